"""`wait`: until every target of a source is in sync, or --timeout passes."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from configmirror.cli import listing, reference
from configmirror.cli.arguments import (
    EXIT_ATTENTION,
    EXIT_OK,
    add_cluster_flags,
    add_command,
    add_flag,
    add_selection_flags,
)
from configmirror.cli.connect import connect
from configmirror.cli.flags import Parser, UsageError, duration
from configmirror.cli.output import dump, prog
from configmirror.cli.settings import followed, kinds_of, rules_of, settings_of
from configmirror.cli.status import print_status
from configmirror.client.kube import ConfigError, Kube
from configmirror.operator.caches import ClusterInformers
from configmirror.operator.settings import Settings, format_duration
from configmirror.replication.status import KindView, SourceStatus, source_status


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`wait` and its flags: the cluster's, the source, and --timeout."""
    wait = add_command(commands, "wait", "wait until every target of a source is in sync",
                       "in sync", "not in sync when --timeout passed (what is pending is "
                       "printed)")
    add_cluster_flags(wait, policy_shown=False)
    add_selection_flags(wait, required=True)
    add_flag(wait, "--timeout", 300.0, "how long to wait", duration)


@dataclass
class _Watched:
    """One cluster wait watches: its caches (None: it could not be reached at all)."""

    name: str
    cache: ClusterInformers | None
    kube: Kube | None
    error: str = ""
    home: bool = False

    def why_not(self) -> str:
        """Why it has no answer yet ("" when it has one)."""
        if self.cache is None:
            return self.error
        if any(i.failing() for i in self.cache.informers):
            return "unreachable"
        return "" if self.cache.has_synced() else "not listed yet"


def command(args: argparse.Namespace) -> int:
    """Watch the source's targets in every cluster until all are in sync (0) or --timeout
    passes."""
    settings = followed(args, settings_of(args))
    named = reference.named_in(args, settings)
    kube = connect(settings, pool_size=2, limited=False)
    changed = threading.Event()

    def wake(*_: object) -> None:
        changed.set()

    try:
        cache = ClusterInformers(kube, kinds_of(settings, kube), rules_of(settings),
                                 on_object=wake, on_namespace=wake)
        kind, key = reference.known(named, cache)
        watched = _clusters(settings, cache, kube, args.cluster, wake)
    except BaseException:
        kube.close()
        raise
    deadline = time.monotonic() + args.timeout
    for cluster in watched:
        if cluster.cache is not None:
            cluster.cache.start()
    try:
        last: dict[str, SourceStatus | None] = {}
        while True:
            if cache.has_synced():
                for cluster in watched:
                    if cluster.cache is None or not cluster.cache.has_synced():
                        continue
                    cached = cluster.cache.kinds[kind]
                    plans = listing.plans(cached, settings, lambda k: k == key)
                    view = KindView(cached.caches, cached.scope, cached.names, plans)
                    last[cluster.name] = source_status(plans[0], view, ()) if plans else None
                found = cache.kinds[kind].caches.source(key)  # in the home cluster
                if found is None or found.compiled is None:
                    raise UsageError(f"there is no {kind.name} source {key}")
                pending = [c for c in watched if c.why_not() or not _done(last.get(c.name))]
                if not pending:
                    _print_done(key, watched, last, args.output)
                    return EXIT_OK
            else:
                pending = list(watched)
            left = deadline - time.monotonic()
            if left <= 0:
                _print_late(key, args.timeout, watched, pending, last, args.output,
                            reference.kind_words(cache))
                return EXIT_ATTENTION
            changed.wait(min(left, 1.0))
            changed.clear()
    finally:
        for cluster in watched:
            if cluster.cache is not None:
                cluster.cache.stop()
            if cluster.kube is not None:
                cluster.kube.close()


def _done(status: SourceStatus | None) -> bool:
    """In sync there (a source that reaches no namespace there is, trivially)."""
    return status is None or status.done


def _clusters(settings: Settings, home: ClusterInformers, kube: Kube, only: str | None,
              wake: Callable[..., None]) -> list[_Watched]:
    """The clusters to wait for: the home cluster, and with --member-clusters each member
    (`only`: the one --cluster names)."""
    watched = [_Watched(settings.cluster_name, home, kube, home=True)]
    if not settings.member_clusters:
        if only not in (None, settings.cluster_name):
            raise UsageError(f"--cluster {only}: there is no such cluster (the operator "
                             f"replicates into no member cluster: --member-clusters is off; "
                             f"this cluster is {settings.cluster_name})")
        return watched
    members = listing.cluster_inventory(settings)
    if only is not None and only != settings.cluster_name and only not in members:
        raise UsageError(f"--cluster {only}: there is no such cluster (clusters: "
                         f"{', '.join([settings.cluster_name, *sorted(members)])})")
    for name in sorted(members):
        try:
            member_kube = listing.member_kube(members[name])
        except ConfigError as err:
            watched.append(_Watched(name, None, None, str(err)))
            continue
        watched.append(_Watched(name, listing.member_cache(
            members[name], settings, home, member_kube, on_object=wake, on_namespace=wake),
            member_kube))
    kept = [w for w in watched if only is None or w.name == only]
    for dropped in (w for w in watched if w not in kept and not w.home):
        if dropped.kube is not None:
            dropped.kube.close()
    return kept


def _print_done(key: str, watched: list[_Watched], last: dict[str, SourceStatus | None],
                output: str) -> None:
    fleet = len(watched) > 1 or not watched[0].home
    targets = sum(s.targets for s in last.values() if s is not None)
    if output != "text":
        doc: dict[str, Any] = {"in_sync": True, "source": _first_json(watched, last)}
        if fleet:
            doc["clusters"] = [_cluster_json(c, last, True) for c in watched]
        print(dump(doc, output), end="")
    elif fleet:
        print(f"{key}: in sync in {targets} target namespace(s) in {len(watched)} "
              f"cluster(s) ({', '.join(c.name for c in watched)})")
    else:
        print(f"{key}: in sync in {targets} target namespace(s)")


def _print_late(key: str, timeout: float, watched: list[_Watched], pending: list[_Watched],
                last: dict[str, SourceStatus | None], output: str,
                said: dict[str, str]) -> None:
    fleet = len(watched) > 1 or not watched[0].home
    where = ""
    if fleet:
        where = " in cluster(s) " + ", ".join(
            c.name + (f" ({why})" if (why := c.why_not()) else "") for c in pending)
    print(f"{prog()}: {key} not in sync after {format_duration(timeout)}{where}",
          file=sys.stderr)
    if output != "text":
        doc: dict[str, Any] = {"in_sync": False, "source": _first_json(watched, last)}
        if fleet:
            doc["clusters"] = [_cluster_json(c, last, c not in pending) for c in watched]
        print(dump(doc, output), end="")
        return
    for cluster in watched:
        status = last.get(cluster.name)
        if fleet:
            print(f"cluster {cluster.name}:" + (f" {why}" if (why := cluster.why_not()) else ""))
        if status is not None:
            print_status([status], None, said, indent="  " if fleet else "")


def _first_json(watched: list[_Watched], last: dict[str, SourceStatus | None]
                ) -> dict[str, Any] | None:
    status = next((last.get(c.name) for c in watched if last.get(c.name) is not None), None)
    return status.to_json() if status is not None else None


def _cluster_json(cluster: _Watched, last: dict[str, SourceStatus | None],
                  in_sync: bool) -> dict[str, Any]:
    status = last.get(cluster.name)
    return {"name": cluster.name, "home": cluster.home, "in_sync": in_sync,
            "error": cluster.why_not(),
            "source": status.to_json() if status is not None else None}
