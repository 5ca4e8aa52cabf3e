"""Kinds: what --kinds costs with no sources of the kinds it turns on, and a NetworkPolicy fan-out.

    python bench/bench_kinds.py [--namespaces 1000] [--objects 300] [--runs 2]
                                [--idle-seconds 60] [--parts idle,fanout]

Each part starts its own control plane. The operator runs with --kube-api-qps 0.

idle: one ConfigMap source x N namespaces (its replicas written first, by an operator that is
  then stopped), and `--objects` objects of each kind --kinds can turn on (NetworkPolicy,
  LimitRange, ResourceQuota, Role, RoleBinding, ServiceAccount), one per namespace, none of
  them a source: what the informers of (b) cache. Then the operator, from its start, with
  (a) the default kinds and (b) every built-in kind turned on, alternated a b b a (`--runs`
  pairs). For each run: the informers it started (its configmirror_informer_relists_total
  by resource), its CPU seconds from process start to in sync (every source reconciled, then
  idle; utime + stime of /proc/PID/stat), its RSS then and after `--idle-seconds` of idle,
  its CPU over that window (millicores), and its writes (0: the replicas are there). Then
  the ratio b / a of the medians (issue 40's goal: within 10%).
fanout: one source with replicate-to-matching over N labelled namespaces, a NetworkPolicy
  (--kinds=networkpolicy) against a ConfigMap (the default kinds), alternated a b b a
  (`--runs` pairs), each with the operator idle beforehand: seconds from the source's
  creation to its last replica added (the replicas' watch), the operator's CPU seconds per
  1,000 writes (from the creation to idle), its writes by its counter and by the audit log
  (goal: exactly N), and a restart with nothing changed (goal: 0 writes). The replicas are
  deleted between runs, with the operator stopped.

Figures on a shared 2-core machine move with its load: the load average is printed at the
start and the end of each part, and only the medians of alternated runs are compared.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from configmirror.replication.spec import REPLICATE_TO_MATCHING
from configmirror.vocabulary import CONFIGMAP, NETWORKPOLICY, OPTIONAL, Kind
from configmirror_testing.objects import KIND_CONTENTS, of_kind
from configmirror_testing.operator import OperatorProcess
from harness import (
    REPLICA_SELECTOR,
    Session,
    common_args,
    cpu_snapshot,
    load_average,
    machine,
    operator_run,
    parallel,
    save,
    wait,
    writes,
)

SOURCE_NS = "kindsrc"  # not matched by the targets' prefix
TARGETS = "kinds"
LABEL = {"configmirror-bench": "kinds"}
SELECTOR = "configmirror-bench=kinds"
ALL_KINDS = tuple(f"--kinds={flag}" for flag in sorted(OPTIONAL))
MIB = 2**20


def order(runs: int) -> list[str]:
    """a b b a a b ...: each pair alternated, so drift in the machine favours neither."""
    return [label for i in range(runs) for label in (("a", "b") if i % 2 == 0 else ("b", "a"))]


def in_sync(operator: OperatorProcess, sources: int, timeout: float = 600) -> None:
    """Every source reconciled at least once, then nothing queued or in flight."""
    wait(lambda: operator.metric("configmirror_reconciles_total", role="source") >= sources,
         timeout, "the operator to reconcile every source")
    operator.wait_idle(timeout)


def informers(operator: OperatorProcess) -> list[str]:
    """The resources the operator lists and watches (its informers' relists)."""
    return sorted({labels["resource"] for name, labels, _ in operator.scrape().samples
                   if name == "configmirror_informer_relists_total"})


def median(runs: list[dict[str, Any]], field: str) -> float:
    return statistics.median(r[field] for r in runs)


def ratio(b: list[dict[str, Any]], a: list[dict[str, Any]], field: str) -> str:
    """median(b) / median(a), or "-" when a's is 0."""
    under = median(a, field)
    return f"{median(b, field) / under:.2f}" if under else "-"


# -- idle: every kind on, no sources of them -------------------------------------------------

def plain_objects(session: Session, namespaces: list[str]) -> None:
    """One object of each optional kind in each namespace, none a source."""
    kube = session.cluster.kube
    work = [(kind, ns) for kind in OPTIONAL.values() for ns in namespaces]
    parallel(lambda w: kube.request(
        "create", w[0].resource.collection(w[1]),
        body=of_kind(w[0], "bench-plain", KIND_CONTENTS[w[0].flag][0])), work, 16)


def idle_run(session: Session, label: str, flags: tuple[str, ...], workers: int,
             window: float) -> dict[str, Any]:
    started = time.monotonic()
    operator = session.operator(workers, *flags)
    in_sync(operator, 1)
    sync_seconds = time.monotonic() - started
    cpu_sync, rss_sync = operator.cpu_seconds(), operator.rss_bytes()
    time.sleep(window)  # the measured window: the operator left alone, in sync
    cpu_idle = operator.cpu_seconds() - cpu_sync
    run = {"label": label, "flags": list(flags), "informers": informers(operator),
           "sync_seconds": sync_seconds, "cpu_to_sync": cpu_sync, "rss_sync": rss_sync,
           "rss_idle": operator.rss_bytes(), "idle_millicores": cpu_idle / window * 1000,
           "writes": operator.writes()}
    assert operator.stop() == 0
    print(f"  ({label}) {len(run['informers'])} informers ({', '.join(run['informers'])}); "
          f"in sync {sync_seconds:.1f} s after start, CPU to sync {cpu_sync:.2f} s; RSS "
          f"{rss_sync / MIB:.1f} MiB in sync, {run['rss_idle'] / MIB:.1f} MiB after "
          f"{window:.0f} s idle; idle CPU {run['idle_millicores']:.1f} millicores; writes "
          f"{run['writes']:.0f}", flush=True)
    return run


def idle_part(args: Any) -> dict[str, Any]:
    load_before = load_average()
    with Session(args.kubeconfig) as session:
        cluster = session.cluster
        cluster.namespaces(SOURCE_NS, 1)
        targets = cluster.namespaces(TARGETS, args.namespaces, labels=LABEL)
        plain_objects(session, targets[:args.objects])
        cluster.create_sources(f"{SOURCE_NS}-000", 1, f"{TARGETS}-*")
        print(f"kinds, idle: 1 ConfigMap source x {args.namespaces} namespaces, and "
              f"{min(args.objects, args.namespaces)} objects of each of {', '.join(OPTIONAL)}, "
              f"none a source; (a) the default kinds, (b) {' '.join(ALL_KINDS)}; operator "
              f"--workers {args.workers} --kube-api-qps 0; {machine()}")
        print(f"  at the start: {load_before}", flush=True)
        warm = session.operator(args.workers)  # writes the replicas; every run then finds them
        wait(lambda: session.watcher.live() >= args.namespaces, 600, "the replicas")
        in_sync(warm, 1)
        assert warm.stop() == 0
        runs = [idle_run(session, label, ALL_KINDS if label == "b" else (), args.workers,
                         args.idle_seconds) for label in order(args.runs)]
    load_after = load_average()
    a = [r for r in runs if r["label"] == "a"]
    b = [r for r in runs if r["label"] == "b"]
    print(f"  at the end:   {load_after}")
    print("  b / a, medians: " + ", ".join(
        f"{what} {ratio(b, a, field)}"
        for what, field in (("CPU to sync", "cpu_to_sync"), ("RSS in sync", "rss_sync"),
                            ("RSS idle", "rss_idle"), ("idle CPU", "idle_millicores")))
        + " (goal: within 10%, <= 1.10)")
    print(f"  idle CPU, medians: (a) {median(a, 'idle_millicores'):.1f}, (b) "
          f"{median(b, 'idle_millicores'):.1f} millicores (one clock tick over the window is "
          f"{1000 / args.idle_seconds / os.sysconf('SC_CLK_TCK'):.2f})")
    result = {"namespaces": args.namespaces, "objects": args.objects,
              "idle_seconds": args.idle_seconds, "runs": runs, "load_before": load_before,
              "load_after": load_after, "machine": machine()}
    save("kinds-idle", result)
    return result


# -- fanout: a NetworkPolicy source against a ConfigMap source ------------------------------

def source_body(kind: Kind) -> dict[str, Any]:
    fields = {"data": {"payload": "x" * 900}} if kind is CONFIGMAP \
        else KIND_CONTENTS[kind.flag][0]
    return of_kind(kind, "fanout", fields, {REPLICATE_TO_MATCHING: SELECTOR})


def fanout_run(session: Session, kind: Kind, workers: int, targets: list[str]
               ) -> dict[str, Any]:
    cluster, n = session.cluster, len(targets)
    flags = () if kind is CONFIGMAP else (f"--kinds={kind.flag}",)
    watcher = session.watch(kind.resource)
    operator = session.operator(workers, *flags)
    operator.wait_ready(120)
    operator.wait_idle(120)
    before, writes_before, mark = cpu_snapshot(session, operator), operator.writes(), time.time()
    since = time.monotonic()
    cluster.kube.request("create", kind.resource.collection(f"{SOURCE_NS}-000"),
                         body=source_body(kind))
    ours, _ = operator_run(session, operator, workers, n, since, before,
                           resource=kind.resource)
    curve = watcher.curve(since)
    own = operator.writes() - writes_before
    audited = writes(cluster.audit("configmirror/", since=mark), kind.plural)
    assert operator.stop() == 0

    mark = time.time()
    restarted = session.operator(workers, *flags)
    in_sync(restarted, 1)
    restart_writes = restarted.writes()
    restart_audited = writes(cluster.audit("configmirror/", since=mark), kind.plural)
    assert restarted.stop() == 0

    # Clean up with no operator running: the next run starts from no replicas.
    cluster.kube.request("delete", kind.resource.item(f"{SOURCE_NS}-000", "fanout"))
    parallel(lambda ns: cluster.kube.request("delete", kind.resource.collection(ns),
                                             {"labelSelector": REPLICA_SELECTOR}), targets, 16)
    wait(lambda: watcher.live() == 0, 300, "the replicas to be deleted")
    run = {"kind": kind.name, "flags": list(flags),
           "seconds_to_last": curve[-1][0] if curve else 0.0,
           "cpu_seconds": ours.cpu_seconds, "writes": own, "audited_writes": audited,
           "cpu_per_1000": (ours.cpu_seconds or 0.0) / own * 1000 if own else 0.0,
           "server_cpu_per_1000": ours.server_cpu_per_1000,
           "restart_writes": restart_writes, "restart_audited_writes": restart_audited}
    server = run["server_cpu_per_1000"]
    print(f"  {kind.name:<13} creation -> last of {n} replicas {run['seconds_to_last']:.2f} s; "
          f"CPU per 1,000 writes {run['cpu_per_1000']:.2f} s (the server "
          f"{'-' if server is None else f'{server:.2f}'} s); writes {own:.0f} by its "
          f"counter, {audited} by the audit log (goal {n}); restart: {restart_writes:.0f} "
          f"writes (audit {restart_audited}) (goal 0)", flush=True)
    return run


def fanout_part(args: Any) -> dict[str, Any]:
    load_before = load_average()
    kinds = {"a": CONFIGMAP, "b": NETWORKPOLICY}
    with Session(args.kubeconfig) as session:
        cluster = session.cluster
        cluster.namespaces(SOURCE_NS, 1)
        targets = cluster.namespaces(TARGETS, args.namespaces, labels=LABEL)
        for kind in kinds.values():
            session.watch(kind.resource)  # watching before any replica exists
        print(f"kinds, fan-out: one source, {REPLICATE_TO_MATCHING}={SELECTOR}, over "
              f"{args.namespaces} namespaces: (a) a ConfigMap, (b) a NetworkPolicy "
              f"(--kinds=networkpolicy); operator --workers {args.workers} --kube-api-qps 0; "
              f"{machine()}")
        print(f"  at the start: {load_before}", flush=True)
        runs = [{"label": label, **fanout_run(session, kinds[label], args.workers, targets)}
                for label in order(args.runs)]
    load_after = load_average()
    a = [r for r in runs if r["label"] == "a"]
    b = [r for r in runs if r["label"] == "b"]
    print(f"  at the end:   {load_after}")
    print("  NetworkPolicy / ConfigMap, medians: " + ", ".join(
        f"{what} {ratio(b, a, field)}"
        for what, field in (("seconds to the last replica", "seconds_to_last"),
                            ("CPU per 1,000 writes", "cpu_per_1000"))))
    result = {"namespaces": args.namespaces, "runs": runs, "load_before": load_before,
              "load_after": load_after, "machine": machine()}
    save("kinds-fanout", result)
    return result


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--objects", type=int, default=300,
                        help="idle: objects of each optional kind (one per namespace)")
    parser.add_argument("--runs", type=int, default=2, help="pairs of runs (a b, then b a)")
    parser.add_argument("--idle-seconds", type=float, default=60.0,
                        help="idle: the window idle CPU is measured over, once in sync")
    parser.add_argument("--parts", default="idle,fanout",
                        help="which parts to run (comma-separated)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if "idle" in parts:
        idle_part(args)
    if "fanout" in parts:
        fanout_part(args)


if __name__ == "__main__":
    main()
