"""Convergence: S sources x N namespaces, configmirror against two baselines on one server.

    python bench/bench_convergence.py [--sources 200] [--namespaces 50] [--workers 32]
    python bench/bench_convergence.py --shape 20x5000        # 100,000 replicas
    python bench/bench_convergence.py --shape 1000x10        # with --edits 1000 by default
    python bench/bench_convergence.py --clusters 3 --namespaces 1000   # member clusters

The shapes of docs/performance.md: 1 x 5000, 200 x 50, 20 x 500, 20 x 5000 (flags, or
`--shape SxN`), and 1000 x 10, the shape other replicators publish: there, once in sync, the
operator's RSS and each of `--edits` sources edited in turn (the next once the last reached
every replica), with the p50/p99 of edit -> its last replica written. Baselines, in the
same run on the same server, writing exactly the S*N bodies configmirror writes:
  - the Go client-go writer (bench/gowriter, no client-side rate limit) with as many
    goroutines as the operator has workers, and with 32 (its best here: the server's limit);
  - the Python bare client (the same connection pool as the operator, nothing else) with as
    many threads as the operator has workers.
Each baseline runs before and after the operator, and the mean is used, so drift in the
machine's speed favours neither side. Every writer is timed by the API server's audit log,
from its first create received to its last answered.

Prints the operator's rate against each (goals: >= 0.8 of the Go writer at the same
concurrency, >= 0.7 of its best), CPU seconds per 1,000 writes, the operator's writes by its
counter and by the audit log (goal: exactly S*N), then restarts it with nothing changed and
prints its writes (goal: 0), reads (goal: one LIST per informer) and seconds from its start to
/readyz and to idle. With `--idle SECONDS`, the restarted operator runs with
`--resync-period --idle-resync` and its CPU is measured over that long once idle (millicores;
goal: still 0 writes). The operator runs with --kube-api-qps 0.

    python bench/bench_convergence.py --shape 20x5000 --idle 180 --operator-src ../other

`--operator-src TREE` runs the operator from another tree's src/ (a worktree of another
commit) under this harness: both trees are measured by the same baselines, clock and figures.
`--restart-src TREE` restarts onto another tree (`.` for this one): with the code before a
change converging and the code after it restarted, the restart's 0 writes show that an
upgrade rewrites no replica the older code wrote.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench_fleet import fleet
from harness import (
    Baselines,
    Session,
    baseline_rows,
    common_args,
    load_average,
    machine,
    operator_env,
    operator_origin,
    operator_run,
    peak_rss_of,
    percentile,
    ratio_lines,
    replica_body,
    run_json,
    run_table,
    save,
    wait,
    writes,
)

SOURCE_NS = "configmirror-bench-sources"
# The shapes the docs report (sources, namespaces).
SHAPES = {"1x5000": (1, 5000), "200x50": (200, 50), "20x500": (20, 500),
          "20x5000": (20, 5000), "1000x10": (1000, 10)}


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--shape", choices=sorted(SHAPES),
                        help="a named shape: sets --sources and --namespaces")
    parser.add_argument("--edits", type=int, default=None,
                        help="once in sync, edit this many sources one after another and "
                        "report edit -> last replica (p50/p99) and RSS (default: 1000 for "
                        "the 1000x10 shape, else none)")
    parser.add_argument("--idle", type=float, default=0,
                        help="after the restart, measure the operator's idle CPU over this many "
                        "seconds (default: not measured)")
    parser.add_argument("--idle-resync", default="60",
                        help="--resync-period of the restarted operator when --idle is given")
    parser.add_argument("--operator-src", type=Path, default=None,
                        help="run the operator from this tree's src/ (another commit's worktree)")
    parser.add_argument("--restart-src", type=Path, default=None,
                        help="restart onto this tree's src/ instead (an upgrade; default: the "
                        "tree the operator converged with)")
    parser.add_argument("--clusters", type=int, default=1, choices=(1, 2, 3),
                        help="with 2 or 3: 1 source x --namespaces in each of that many "
                        "clusters, the home one and members, against a Go writer per cluster "
                        "(bench_fleet.py; --edits default 20)")
    args = parser.parse_args()
    if args.clusters > 1:
        fleet(args.namespaces, 20 if args.edits is None else args.edits, args.workers,
              args.clusters)
        return
    env = operator_env(args.operator_src)
    restart_env = env if args.restart_src is None else operator_env(args.restart_src)
    if args.shape is not None:
        args.sources, args.namespaces = SHAPES[args.shape]
    if args.edits is None:
        args.edits = 1000 if args.shape == "1000x10" else 0
    args.edits = min(args.edits, args.sources)
    total = args.sources * args.namespaces
    shape = f"{args.sources}x{args.namespaces}"
    load_before = load_average()
    with Session(args.kubeconfig) as session:
        cluster, watcher = session.cluster, session.watcher
        cluster.namespaces(SOURCE_NS, 1)
        source_ns = f"{SOURCE_NS}-000"
        targets = cluster.namespaces("bench", args.namespaces)
        print(f"convergence: {args.sources} sources x {args.namespaces} namespaces = {total} "
              f"replicas; operator --workers {args.workers} --kube-api-qps 0; {machine()}")
        print(f"  at the start: {load_before}")
        print(f"  operator: {operator_origin(env)}"
              + (f"; restarted as {operator_origin(restart_env)}" if restart_env != env else ""))

        # 1. The baselines, before the operator.
        bodies = [replica_body(source_ns, f"src-{i:04d}", ns)
                  for i in range(args.sources) for ns in targets]
        baselines = Baselines(session, bodies, args.workers, shape)
        baselines.measure()

        # 2. configmirror, from a cold start, on the same workload.
        cluster.create_sources(source_ns, args.sources, "bench-*")
        since = time.monotonic()
        operator = session.operator(args.workers, env=env)
        operator.wait_ready(120)
        ours, wall = operator_run(session, operator, args.workers, total, since)
        own_writes = operator.writes()
        requests = cluster.audit("configmirror/")
        audited = writes(requests)
        curve = watcher.curve(since)
        rss_in_sync, rss_peak = operator.rss_bytes(), peak_rss_of(operator.pid)
        latencies = edit_latencies(session, source_ns, args.edits, args.namespaces)
        if latencies:
            session.idle(operator, 300)

        # 3. Restart with nothing changed: zero writes, one LIST per informer.
        assert operator.stop() == 0
        mark, started = time.time(), time.monotonic()
        resync = ("--resync-period", args.idle_resync) if args.idle else ()
        restarted = session.operator(args.workers, *resync, env=restart_env)
        restarted.wait_ready(300)
        restart_ready = time.monotonic() - started
        wait(lambda: restarted.metric("configmirror_reconciles_total", role="source")
             >= args.sources, 300, "the restarted operator to reconcile every source")
        session.idle(restarted, 300)
        restart_idle = time.monotonic() - started
        rss_restart_idle = restarted.rss_bytes()  # listed and idle, before any resync
        restart_writes = restarted.writes()
        idle_millicores, idle_reconciles = None, {}
        if args.idle:
            def reconciles() -> dict[str, float]:
                return {role: restarted.metric("configmirror_reconciles_total", role=role)
                        for role in ("source", "target")}
            cpu, before = restarted.cpu_seconds(), reconciles()
            time.sleep(args.idle)  # the measured window: the operator left alone, in sync
            idle_millicores = (restarted.cpu_seconds() - cpu) / args.idle * 1000
            idle_reconciles = {role: n - before[role] for role, n in reconciles().items()}
            restart_writes = restarted.writes()
        rss_restarted = restarted.rss_bytes()
        relists = restarted.metric("configmirror_informer_relists_total")
        after = cluster.audit("configmirror/", since=mark)
        assert restarted.stop() == 0

        # 4. The baselines again, after the operator.
        baselines.clear()
        baselines.measure()

        print(f"  at the end:   {load_average()}")
        print(*run_table([*baseline_rows(baselines),
                          (f"configmirror, {args.workers} workers", ours)]), sep="\n")
        print(f"  (baselines: mean of a run before and one after the operator; configmirror: "
              f"{wall:.2f} s from process start to the last replica; its CPU counts from "
              f"ready to idle)")
        print(*ratio_lines(ours, baselines), sep="\n")
        print(f"  configmirror writes: {own_writes:.0f} by its counter, {audited} by the "
              f"apiserver's audit log (goal: exactly {total})")
        print(f"  RSS in sync: {rss_in_sync / 2**20:.0f} MiB (peak {rss_peak / 2**20:.0f} MiB)")
        if latencies:
            ordered = sorted(latencies)
            p50 = statistics.median(ordered)
            p99 = percentile(ordered, 0.99)
            print(f"  {len(ordered)} sources edited one after another, edit -> its last of "
                  f"{args.namespaces} replicas written: p50 {p50 * 1000:.0f} ms, p99 "
                  f"{p99 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms")
        print(f"  restart, nothing changed: {restart_writes:.0f} writes "
              f"(audit: {writes(after)}) (goal: 0); ready {restart_ready:.1f} s and idle "
              f"{restart_idle:.1f} s after its start; RSS {rss_restart_idle / 2**20:.0f} MiB "
              f"then, {rss_restarted / 2**20:.0f} MiB at the end")
        if idle_millicores is not None:
            print(f"  idle, --resync-period {args.idle_resync}: {idle_millicores:.1f} millicores "
                  f"over {args.idle:.0f} s, in which it reconciled "
                  f"{idle_reconciles['source']:.0f} source and {idle_reconciles['target']:.0f} "
                  f"target keys")
        lists = {res: n for (verb, res), n in (after or {}).items() if verb == "list"}
        print(f"  restart reads: {relists:.0f} LISTs by the informers (one per informer); "
              f"HTTP list requests by resource: {lists} (pages of 500)")
        save(f"convergence-{shape}", {
            "sources": args.sources, "namespaces": args.namespaces, "workers": args.workers,
            "load_before": load_before, "load_after": load_average(),
            "baselines": {label: [run_json(r) for r in runs]
                          for label, runs in baselines.runs.items()},
            "configmirror": run_json(ours), "configmirror_wall_seconds": wall,
            "writes": own_writes, "audited_writes": audited,
            "configmirror_requests": sum((requests or {}).values()),
            "restart_writes": restart_writes, "restart_relists": relists,
            "rss_in_sync": rss_in_sync, "rss_peak": rss_peak, "edit_latencies": latencies,
            "restart_ready_seconds": restart_ready, "restart_idle_seconds": restart_idle,
            "rss_restart_idle": rss_restart_idle, "rss_restarted": rss_restarted,
            "idle_millicores": idle_millicores, "idle_reconciles": idle_reconciles,
            "idle_seconds": args.idle, "idle_resync": args.idle_resync,
            "operator": operator_origin(env), "restarted_as": operator_origin(restart_env),
            "restart_list_requests": lists,
            "configmirror_curve": curve[::max(1, len(curve) // 400)],
            "machine": machine()})


def edit_latencies(session: Session, namespace: str, edits: int, replicas: int) -> list[float]:
    """Seconds from each edit of a source to its last replica holding it: sources src-0000..,
    one after another, each edited once the one before reached all its `replicas`."""
    latencies = []
    for i in range(edits):
        version = f"edit-{i}"
        edited = time.monotonic()
        session.cluster.kube.request(
            "patch", f"/api/v1/namespaces/{namespace}/configmaps/src-{i:04d}",
            body={"data": {"v": version}}, content_type="application/merge-patch+json")
        wait(lambda version=version: session.watcher.holding[version] >= replicas, 120,
             f"edit {i} to reach every replica", interval=0.005)
        latencies.append(session.watcher.last_reached[version] - edited)
    return latencies


if __name__ == "__main__":
    main()
