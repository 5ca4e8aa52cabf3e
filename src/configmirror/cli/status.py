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
from configmirror.operator.settings import format_duration
from configmirror.replication.status import (
    KindView,
    SourceStatus,
    namespace_status,
    source_status,
)


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
    views = {k.name: KindView(c.caches, c.scope, c.names,
                              listing.plans(c, settings, listing.only(k, source, args.namespace)))
             for k, c in cache.kinds.items()}
    sources = [source_status(p, view, failures) for view in views.values() for p in view.plans]
    namespace = None
    if source is not None and (not sources or not sources[0].exists):
        raise UsageError(f"there is no {source[0].name} source {source[1]}")
    if args.target_namespace is not None:
        namespace = namespace_status(args.target_namespace, views,
                                     frozenset(k.pull_name for k in cache.kinds))
        if not namespace["exists"]:
            raise UsageError(f"there is no namespace {args.target_namespace}")
        related = {(h["kind"], h["replica_of"]) for h in namespace["holds"]} | {
            (v, p.source) for v, view in views.items() for p in view.plans
            if args.target_namespace in p.targets or args.target_namespace in p.pullers}
        sources = [s for s in sources if (s.kind, s.source) in related]
    if args.output != "text":
        doc: dict[str, Any] = {"sources": [s.to_json() for s in sources]}
        if namespace is not None:
            doc["namespace"] = namespace
        print(dump(doc, args.output), end="")
    else:
        print_status(sources, namespace, reference.kind_words(cache))
    return 0


def print_status(sources: list[SourceStatus], namespace: dict[str, Any] | None,
                 said: Mapping[str, str]) -> None:
    """The status as text: the namespace's holdings and pulls, each source's pending changes
    and problems, then the sums."""
    if namespace is not None:
        print(f"namespace {namespace['name']}:")
        for hold in namespace["holds"]:
            print(f"  holds  {said.get(hold['kind'], hold['kind'].lower())} {hold['name']}  "
                  f"replica of {hold['replica_of']} ({hold['state']})")
        for pull in namespace["pulls"]:
            why = f": {pull['reason']}" if pull["reason"] else ""
            print(f"  pulls  {pull['entry']}  {pull['state']}{why}")
        if not namespace["holds"] and not namespace["pulls"]:
            print("  no replicas, no pulls")
    if not sources and namespace is None:
        print("no sources")
    for status in sources:
        print(f"{said.get(status.kind, status.kind.lower())} {status.source}: "
              f"{status.in_sync}/{status.targets} "
              f"target(s) in sync" + ("" if status.exists else " (the source is gone)")
              + (f", {status.adopting} to adopt" if status.adopting else ""))
        for p in status.pending:
            when = f"in {format_duration(p['due_in'])}: " if p["due_in"] else ""
            print(f"  pending  {p['action']} {p['namespace']}/{p['name']}  ({when}{p['why']})")
        for problem in status.problems:
            print(f"  problem  {problem.type}: {problem.message}")
    if sources:
        pending = sum(len(s.pending) for s in sources)
        problems = sum(len(s.problems) for s in sources)
        adopting = sum(s.adopting for s in sources)
        print(f"{len(sources)} source(s): {pending} pending"
              + (f" ({adopting} adoption(s))" if adopting else "")
              + f", {problems} problem(s)")
