"""`wait`: until every target of a source is in sync, or --timeout passes."""

from __future__ import annotations

import argparse
import sys
import threading
import time

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
from configmirror.operator.caches import ClusterInformers
from configmirror.operator.settings import format_duration
from configmirror.replication.status import KindView, SourceStatus, source_status


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`wait` and its flags: the cluster's, the source, and --timeout."""
    wait = add_command(commands, "wait", "wait until every target of a source is in sync",
                       "in sync", "not in sync when --timeout passed (what is pending is "
                       "printed)")
    add_cluster_flags(wait, policy_shown=False)
    add_selection_flags(wait, required=True)
    add_flag(wait, "--timeout", 300.0, "how long to wait", duration)


def command(args: argparse.Namespace) -> int:
    """Watch the source's targets until all are in sync (0) or --timeout passes."""
    settings = followed(args, settings_of(args))
    named = reference.named_in(args, settings)
    kube = connect(settings, pool_size=2, limited=False)
    changed = threading.Event()
    try:
        cache = ClusterInformers(kube, kinds_of(settings, kube), rules_of(settings),
                                 on_object=lambda *_: changed.set(),
                                 on_namespace=lambda *_: changed.set())
        kind, key = reference.known(named, cache)
    except BaseException:
        kube.close()
        raise
    cached = cache.kinds[kind]
    deadline = time.monotonic() + args.timeout
    cache.start()
    try:
        last: SourceStatus | None = None
        while True:
            if cache.has_synced():
                plans = listing.plans(cached, settings, lambda k: k == key)
                view = KindView(cached.caches, cached.scope, cached.names, plans)
                last = source_status(plans[0], view, ()) if plans else None
                if last is None or not last.exists:
                    raise UsageError(f"there is no {kind.name} source {key}")
                if last.done:
                    if args.output != "text":
                        print(dump({"in_sync": True, "source": last.to_json()}, args.output),
                              end="")
                    else:
                        print(f"{key}: in sync in {last.targets} target namespace(s)")
                    return EXIT_OK
            left = deadline - time.monotonic()
            if left <= 0:
                print(f"{prog()}: {key} not in sync after {format_duration(args.timeout)}",
                      file=sys.stderr)
                if last is not None and args.output != "text":
                    print(dump({"in_sync": False, "source": last.to_json()}, args.output),
                          end="")
                elif last is not None:
                    print_status([last], None, reference.kind_words(cache))
                return EXIT_ATTENTION
            changed.wait(min(left, 1.0))
            changed.clear()
    finally:
        cache.stop()
        kube.close()
