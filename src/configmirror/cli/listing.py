"""What plan, status and wait read: the operator's caches listed once, the failures it
recorded, and the plan of each source they are about."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Literal, overload

from configmirror.cli.connect import connect
from configmirror.cli.flags import UsageError
from configmirror.cli.output import prog
from configmirror.cli.settings import kinds_of, rules_of
from configmirror.client.kube import ApiError, Kube
from configmirror.operator.caches import ClusterInformers, KindInformers
from configmirror.operator.settings import Settings
from configmirror.replication.plan import Grace, ReplicationPlan, plan_source
from configmirror.replication.status import Failure
from configmirror.vocabulary import EVENTS, Kind


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
