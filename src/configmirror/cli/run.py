"""`run`: the operator, until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from dataclasses import replace

from configmirror.allocator import fix_mmap_threshold
from configmirror.cli.arguments import add_cluster_flags, add_command, add_flag
from configmirror.cli.connect import connect
from configmirror.cli.flags import Parser, UsageError, duration
from configmirror.cli.settings import settings_of
from configmirror.lifecycle import lingering
from configmirror.operator.policy import own_namespace
from configmirror.operator.settings import Settings
from configmirror.replication.spec import InvalidSpec


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`run` and its flags: the cluster's, then the operator's own."""
    d = Settings()
    run = add_command(commands, "run", "run the operator until SIGTERM/SIGINT",
                      "stopped by SIGTERM or SIGINT, in-flight work drained",
                      errors="error: bad flags, no cluster, lost leadership")
    add_cluster_flags(run)
    add_flag(run, "--workers", d.workers, "reconcile worker threads", int)
    add_flag(run, "--max-retries", d.max_retries, "attempts per change before giving up", int)
    add_flag(run, "--resync-period", d.resync_period,
             "how often every source is checked again from the cache (0: never)", duration)
    add_flag(run, "--leader-elect", d.leader_elect,
             "elect a leader among replicas through a Lease", bool)
    add_flag(run, "--leader-election-namespace", d.leader_election_namespace,
             "namespace of the leader-election Lease")
    add_flag(run, "--leader-election-id", d.leader_election_id, "name of the Lease")
    add_flag(run, "--operator-namespace", d.operator_namespace, "the operator's namespace "
             "when it runs outside a pod (in a pod: the pod's own); it never receives "
             "replicas, whatever its labels")
    add_flag(run, "--metrics-bind-address", d.metrics_bind_address,
             "host:port for /metrics ('0' disables)")
    add_flag(run, "--health-probe-bind-address", d.health_probe_bind_address,
             "host:port for /healthz and /readyz ('0' disables)")
    add_flag(run, "--drain-timeout", d.drain_timeout,
             "how long in-flight reconciles may take to finish on SIGTERM", duration)
    add_flag(run, "--dry-run", d.dry_run, "decide and log every write, perform none", bool)
    add_flag(run, "--source-metrics", d.source_metrics, "export configmirror_source_replicas"
             "{kind,source,state}: each source's replicas by state (a series per source: off "
             "by default)", bool)
    add_flag(run, "--kube-api-qps", d.kube_api_qps, "requests per second to the API server, "
             "shared by every request (0: no client-side limit)", float)
    add_flag(run, "--kube-api-burst", d.kube_api_burst, "requests allowed above "
             "--kube-api-qps in a burst", int)


def command(args: argparse.Namespace) -> int:
    """Run the operator until a signal stops it; its exit code."""
    from configmirror.operator.manager import (
        Manager,  # the other commands do not need the machinery
    )

    settings = settings_of(args)
    settings = replace(settings, operator_namespace=own_namespace(settings))
    # Before any list page is read: a relist's freed pages are returned, not kept (allocator).
    fixed = fix_mmap_threshold()
    logging.getLogger("configmirror").debug("glibc's mmap threshold %s",
                                            "fixed" if fixed else "left as it is")
    kube = connect(settings, pool_size=settings.workers + 4)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("configmirror").info("%s: draining in-flight work and stopping",
                                               signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        manager = Manager(settings, kube)
    except InvalidSpec as err:  # a kind --kinds names that discovery does not resolve
        kube.close()
        raise UsageError(str(err)) from None
    code = manager.run(stop)
    if lingering():
        # A thread past the shutdown's deadline (the manager named it) would hold the
        # interpreter's exit as long as it likes: exit without it.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
