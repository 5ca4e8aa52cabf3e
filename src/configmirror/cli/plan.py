"""`plan`: what `run` would change, changing nothing."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from configmirror.cli import listing, reference
from configmirror.cli.arguments import (
    EXIT_ATTENTION,
    EXIT_OK,
    add_cluster_flags,
    add_command,
    add_selection_flags,
)
from configmirror.cli.flags import Parser, UsageError
from configmirror.cli.output import dump
from configmirror.cli.settings import followed, settings_of
from configmirror.operator.settings import format_duration
from configmirror.replication.plan import ReplicationPlan


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`plan` and its flags: the cluster's, and which sources."""
    plan = add_command(commands, "plan", "print what run would change, change nothing",
                       "in sync", "not in sync: changes to make, or problems")
    add_cluster_flags(plan, policy_shown=False)
    add_selection_flags(plan)


def command(args: argparse.Namespace) -> int:
    """Print the plan of each source the command is about; 0 when all are in sync."""
    settings = followed(args, settings_of(args))
    named = reference.source(args, settings)
    cache = listing.listed(settings)
    source = reference.known(named, cache)
    clusters = listing.fleet(settings, cache, args.cluster)
    planned = [(c, [p for kind, cached in c.cache.kinds.items()
                    for p in listing.plans(cached, settings,
                                           listing.only(kind, source, args.namespace))]
                if c.cache is not None else []) for c in clusters]
    if source is not None and not any(plans for _, plans in planned):
        raise UsageError(f"there is no {source[0].name} source {source[1]} (nor a replica "
                         "of one)")
    in_sync = all(p.in_sync for _, plans in planned for p in plans) and all(
        c.cache is not None for c in clusters)
    if args.output != "text":
        print(dump({"in_sync": in_sync,
                    "plans": [{**p.to_json(), "cluster": c.name}
                              for c, plans in planned for p in plans],
                    "clusters": [{"name": c.name, "home": c.home,
                                  "reachable": c.cache is not None, "error": c.error}
                                 for c in clusters]}, args.output), end="")
    elif len(clusters) == 1 and clusters[0].home:
        print_plans(planned[0][1], reference.kind_words(cache))
    else:
        for listed, plans in planned:
            if listed.cache is None:
                print(f"cluster {listed.name}: {listed.error}")
                continue
            print(f"cluster {listed.name}{' (home)' if listed.home else ''}:")
            print_plans(plans, reference.kind_words(cache), indent="  ")
    return EXIT_OK if in_sync else EXIT_ATTENTION


def print_plans(plans: list[ReplicationPlan], said: Mapping[str, str],
                indent: str = "") -> None:
    """The plans as text: each source's changes and problems, then the sums (`indent`: under
    their cluster's name)."""
    if not plans:
        print(f"{indent}no sources")
    for plan in plans:
        # A Secret (any kind) says so; a ConfigMap is the default and needs no word.
        name = plan.source if plan.kind == "ConfigMap" else \
            f"{said.get(plan.kind, plan.kind.lower())} {plan.source}"
        if plan.invalid is not None:
            print(f"{indent}{name}: invalid spec: {plan.invalid} (nothing will change)")
            continue
        if plan.not_allowed is not None:
            print(f"{indent}{name}: not allowed: {plan.not_allowed}")
        state = "in sync" if plan.in_sync else "out of sync"
        print(f"{indent}{name}: {state}, {len(plan.targets)} target namespace(s)")
        if plan.content is not None and "fields" in plan.content:  # a kind of no data keys
            print(f"{indent}  content  {', '.join(plan.content['fields']) or 'no fields'}; "
                  f"hash {plan.content['hash']}")
        elif plan.content is not None:  # key names, sizes and a hash: never a value
            keys = ", ".join(f"{k} ({n} B)" for k, n in plan.content["keys"].items())
            print(f"{indent}  content  {keys or 'no keys'}; hash {plan.content['hash']}")
        for action in plan.actions:
            when = f"in {format_duration(action.due_in)}: " if action.due_in > 0 else ""
            print(f"{indent}  {action.kind:<8} {action.namespace}/{action.name}  "
                  f"({when}{action.why})")
        for conflict in plan.conflicts:
            print(f"{indent}  conflict {conflict.namespace}/{conflict.name}  "
                  f"({conflict.message})")
    changes = sum(len(p.actions) for p in plans)
    problems = sum(len(p.conflicts) + (p.invalid is not None) + (p.not_allowed is not None)
                   for p in plans)
    print(f"{indent}{len(plans)} source(s): {changes} change(s), {problems} problem(s)")
