"""`status`: per source, its targets, what is in sync, pending, and the problems; changes
nothing."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from configmirror.cli import listing, reference
from configmirror.cli.arguments import (
    add_cluster_flags,
    add_command,
    add_flag,
    add_selection_flags,
)
from configmirror.cli.flags import Parser, UsageError
from configmirror.cli.output import dump
from configmirror.cli.settings import followed, settings_of
from configmirror.operator.settings import Settings, format_duration
from configmirror.replication.status import (
    Failure,
    KindView,
    SourceStatus,
    namespace_status,
    source_status,
)
from configmirror.vocabulary import Kind


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`status` and its flags: the cluster's, which sources, and --target-namespace."""
    status = add_command(commands, "status", "per source: targets, in sync, pending, "
                         "problems (the same decision as run); change nothing",
                         "shown (in sync or not)",
                         errors="error: bad flags or input, no cluster, no such source or "
                                "namespace")
    add_cluster_flags(status, policy_shown=False)
    add_selection_flags(status)
    add_flag(status, "--target-namespace", None, "what this namespace holds and pulls, and "
             "the sources of those", env=False)


def command(args: argparse.Namespace) -> int:
    """Print the status of each source the command is about (and of --target-namespace)."""
    settings = followed(args, settings_of(args))
    named = reference.source(args, settings)
    cache, failures = listing.listed(settings, failures=True)
    source = reference.known(named, cache)
    clusters = listing.fleet(settings, cache, args.cluster)
    shown = [_cluster_status(c, args, settings, source, failures) for c in clusters]
    if source is not None and not any(s.exists for statuses, _ in shown for s in statuses):
        raise UsageError(f"there is no {source[0].name} source {source[1]}")
    if args.target_namespace is not None and not any(
            namespace is not None and namespace["exists"] for _, namespace in shown):
        raise UsageError(f"there is no namespace {args.target_namespace}")
    words = reference.kind_words(cache)
    if args.output != "text":
        doc: dict[str, Any] = {"sources": [{**s.to_json(), "cluster": c.name}
                                           for c, (statuses, _) in zip(clusters, shown,
                                                                       strict=True)
                                           for s in statuses],
                               "clusters": [{"name": c.name, "home": c.home,
                                             "reachable": c.cache is not None,
                                             "error": c.error} for c in clusters]}
        if args.target_namespace is not None:
            doc["namespace"] = next((n for c, (_, n) in zip(clusters, shown, strict=True)
                                     if c.home and n is not None and n["exists"]), None)
            doc["namespaces"] = [{**n, "cluster": c.name}
                                 for c, (_, n) in zip(clusters, shown, strict=True)
                                 if n is not None and n["exists"]]
        print(dump(doc, args.output), end="")
    elif len(clusters) == 1 and clusters[0].home:
        print_status(shown[0][0], shown[0][1], words)
    else:
        for listed, (statuses, namespace) in zip(clusters, shown, strict=True):
            if listed.cache is None:
                print(f"cluster {listed.name}: {listed.error}")
                continue
            print(f"cluster {listed.name}{' (home)' if listed.home else ''}:")
            print_status(statuses, namespace if namespace is None or namespace["exists"]
                         else None, words, indent="  ")
    return 0


def _cluster_status(listed: listing.Listed, args: argparse.Namespace, settings: Settings,
                    source: tuple[Kind, str] | None, failures: list[Failure]
                    ) -> tuple[list[SourceStatus], dict[str, Any] | None]:
    """One cluster's statuses of the sources the command is about, and of
    --target-namespace there (None: not asked, or the cluster was not read)."""
    cache = listed.cache
    if cache is None:
        return [], None
    views = {k.name: KindView(c.caches, c.scope, c.names,
                              listing.plans(c, settings, listing.only(k, source, args.namespace)))
             for k, c in cache.kinds.items()}
    sources = [source_status(p, view, failures if listed.home else ())
               for view in views.values() for p in view.plans]
    if args.target_namespace is None:
        return sources, None
    namespace = namespace_status(args.target_namespace, views,
                                 frozenset(k.pull_name for k in cache.kinds))
    related = {(h["kind"], h["replica_of"]) for h in namespace["holds"]} | {
        (v, p.source) for v, view in views.items() for p in view.plans
        if args.target_namespace in p.targets or args.target_namespace in p.pullers}
    return [s for s in sources if (s.kind, s.source) in related], namespace


def print_status(sources: list[SourceStatus], namespace: dict[str, Any] | None,
                 said: Mapping[str, str], indent: str = "") -> None:
    """The status as text: the namespace's holdings and pulls, each source's pending changes
    and problems, then the sums."""
    if namespace is not None:
        print(f"{indent}namespace {namespace['name']}:")
        for hold in namespace["holds"]:
            print(f"{indent}  holds  {said.get(hold['kind'], hold['kind'].lower())} "
                  f"{hold['name']}  replica of {hold['replica_of']} ({hold['state']})")
        for pull in namespace["pulls"]:
            why = f": {pull['reason']}" if pull["reason"] else ""
            print(f"{indent}  pulls  {pull['entry']}  {pull['state']}{why}")
        if not namespace["holds"] and not namespace["pulls"]:
            print(f"{indent}  no replicas, no pulls")
    if not sources and namespace is None:
        print(f"{indent}no sources")
    for status in sources:
        print(f"{indent}{said.get(status.kind, status.kind.lower())} {status.source}: "
              f"{status.in_sync}/{status.targets} "
              f"target(s) in sync" + ("" if status.exists else " (the source is gone)")
              + (f", {status.adopting} to adopt" if status.adopting else ""))
        for p in status.pending:
            when = f"in {format_duration(p['due_in'])}: " if p["due_in"] else ""
            print(f"{indent}  pending  {p['action']} {p['namespace']}/{p['name']}  "
                  f"({when}{p['why']})")
        for problem in status.problems:
            print(f"{indent}  problem  {problem.type}: {problem.message}")
    if sources:
        pending = sum(len(s.pending) for s in sources)
        problems = sum(len(s.problems) for s in sources)
        adopting = sum(s.adopting for s in sources)
        print(f"{indent}{len(sources)} source(s): {pending} pending"
              + (f" ({adopting} adoption(s))" if adopting else "")
              + f", {problems} problem(s)")
