"""What plan, status and wait read: the operator's caches listed once, the failures it
recorded, and the plan of each source they are about."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

from configmirror import __version__
from configmirror.cli.connect import connect
from configmirror.cli.flags import UsageError
from configmirror.cli.output import prog
from configmirror.cli.settings import kinds_of, rules_of
from configmirror.client.kube import ApiError, ConfigError, Kube, configuration_from_text
from configmirror.operator.caches import (
    ClusterInformers,
    KindInformers,
    NamespaceHandler,
    ObjectHandler,
    member_kinds,
)
from configmirror.operator.settings import Settings
from configmirror.replication.clusters import CLUSTER_LABEL, MEMBER_NAMESPACE, Member, inventory
from configmirror.replication.plan import Grace, ReplicationPlan, plan_source
from configmirror.replication.status import Failure
from configmirror.vocabulary import EVENTS, SECRETS, Kind

PROBE_TIMEOUT = 5.0  # a member that does not answer /version within it is unreachable


@overload
def listed(settings: Settings) -> ClusterInformers: ...
@overload
def listed(settings: Settings,
           failures: Literal[True]) -> tuple[ClusterInformers, list[Failure]]: ...


def listed(settings: Settings, failures: bool = False
           ) -> ClusterInformers | tuple[ClusterInformers, list[Failure]]:
    """The operator's own caches, listed once (Secrets one name at a time, as it watches
    them), and with `failures` the ReplicationFailed Events it recorded on sources."""
    kube = connect(settings, pool_size=2, limited=False)
    found: list[Failure] = []
    try:
        cache = ClusterInformers(kube, kinds_of(settings, kube), rules_of(settings))
        cache.list_once()
        if failures:
            found = _failures(kube)
    except ApiError as err:
        raise UsageError(f"cannot list {err}") from None
    finally:
        kube.close()
    return (cache, found) if failures else cache


def _failures(kube: Kube) -> list[Failure]:
    """The operator's ReplicationFailed Events (one list for the cluster). Without leave to
    list Events, status says so and goes on without them."""
    query: dict[str, Any] = {"fieldSelector": "reason=ReplicationFailed", "limit": 500}
    found: list[Failure] = []
    while True:
        try:
            body = kube.request("list", EVENTS.collection(), query)
        except ApiError as err:
            print(f"{prog()}: note: cannot list Events ({err.status} {err.reason}), so "
                  f"failed writes are not shown", file=sys.stderr)
            return []
        found += [Failure(str(o.get("uid", "")), str(o.get("resourceVersion", "")),
                          str(e.get("message", "")))
                  for e in body.get("items") or () if (o := e.get("involvedObject") or {})]
        if not (token := (body.get("metadata") or {}).get("continue")):
            return found
        query["continue"] = token


def plans(cached: KindInformers, settings: Settings,
          wanted: Callable[[str], bool] = lambda key: True) -> list[ReplicationPlan]:
    """The plan of every source of one kind (and of every source a replica still names) that
    `wanted` keeps.

    No memory of when the operator first saw a removal's cause: each removal is shown with
    the whole grace left, the most it can take."""
    world = cached.caches
    keys = {source.key for source in world.sources()} | set(world.replicated_sources())
    grace = Grace.from_now(settings.delete_grace)
    return [plan_source(key, world, world.get, cached.scope, grace)
            for key in sorted(keys) if wanted(key)]


def only(kind: Kind, source: tuple[Kind, str] | None,
         namespace: str | None) -> Callable[[str], bool]:
    """Which source keys of `kind` a command is about: the source it names, or those of
    -n's namespace, or all."""
    if source is not None:
        return lambda key: kind is source[0] and key == source[1]
    return lambda key: namespace is None or key.split("/", 1)[0] == namespace


# -- member clusters ------------------------------------------------------------------------


@dataclass
class Listed:
    """One cluster as a command sees it: its caches, or why it could not be read."""

    name: str
    cache: ClusterInformers | None
    error: str = ""
    home: bool = False


def fleet(settings: Settings, home: ClusterInformers, only: str | None = None) -> list[Listed]:
    """The clusters a command covers: the home cluster, then (with --member-clusters, as the
    operator's policy says) each member its inventory names, each listed once; `only`: the
    one --cluster names. A member that cannot be read is listed with why."""
    clusters = [Listed(settings.cluster_name, home, home=True)]
    if not settings.member_clusters:
        if only not in (None, settings.cluster_name):
            raise UsageError(f"--cluster {only}: there is no such cluster (the operator "
                             f"replicates into no member cluster: --member-clusters is off; "
                             f"this cluster is {settings.cluster_name})")
        return clusters
    members = cluster_inventory(settings)
    if only is not None and only != settings.cluster_name and only not in members:
        raise UsageError(f"--cluster {only}: there is no such cluster (clusters: "
                         f"{', '.join([settings.cluster_name, *sorted(members)])})")
    clusters += [member_listed(members[name], settings, home) for name in sorted(members)]
    return [c for c in clusters if only is None or c.name == only]


def cluster_inventory(settings: Settings) -> dict[str, Member]:
    """The member clusters the Secrets in the operator's namespace name; each Secret that
    cannot be used is said on stderr."""
    kube = connect(settings, pool_size=1, limited=False)
    try:
        body = kube.request("list", SECRETS.collection(settings.operator_namespace),
                            {"labelSelector": CLUSTER_LABEL}, timeout=PROBE_TIMEOUT * 2)
    except ApiError as err:
        raise UsageError(f"cannot list the cluster Secrets in namespace "
                         f"{settings.operator_namespace}: {err}") from None
    finally:
        kube.close()
    members, faults = inventory(body.get("items") or (), settings.cluster_name)
    for secret, fault in sorted(faults.items()):
        print(f"{prog()}: warning: Secret {settings.operator_namespace}/{secret}: {fault}",
              file=sys.stderr)
    return members


def member_kube(member: Member, pool_size: int = 2) -> Kube:
    """A client of `member` (no client-side limit, as the other commands'); ConfigError when
    its kubeconfig cannot be loaded."""
    configuration = configuration_from_text(member.kubeconfig, f"cluster {member.name}",
                                            pool_size)
    return Kube(configuration, user_agent=f"configmirror/{__version__}", qps=0.0)


def member_cache(member: Member, settings: Settings, home: ClusterInformers, kube: Kube,
                 on_object: ObjectHandler | None = None,
                 on_namespace: NamespaceHandler | None = None) -> ClusterInformers:
    """A member's caches as the operator keeps them: its objects, the home's sources."""
    return ClusterInformers(kube, member_kinds(home, member.name, member.labels,
                                               MEMBER_NAMESPACE),
                            rules_of(settings), on_object or _ignored, on_namespace or _ignored,
                            home=home, home_name=settings.cluster_name)


def _ignored(*_change: object) -> None:
    """A handler for caches that are only listed: nothing to tell."""


def member_listed(member: Member, settings: Settings, home: ClusterInformers) -> Listed:
    """Member `member` listed once, or why it could not be."""
    try:
        kube = member_kube(member)
    except ConfigError as err:
        return Listed(member.name, None, str(err))
    try:
        kube.request("get", "/version", timeout=PROBE_TIMEOUT)
        cache = member_cache(member, settings, home, kube)
        cache.list_once()
    except ApiError as err:
        return Listed(member.name, None, f"unreachable: {err}")
    finally:
        kube.close()
    return Listed(member.name, cache)
