"""The scale curve: how configmirror's cost grows from 1,000 to 100,000 replicas.

    python bench/bench_scale.py [--points 1000,3000,10000,30000,100000] [--namespaces 1000]

One control plane for the whole curve. The namespaces are fixed (`--namespaces`, default
1,000) and each point adds sources: 1,000 replicas are 1 source x 1,000 namespaces, 100,000
are 100 sources x 1,000. At each point, with no replica present:

1. the Go operator baseline: the Go client-go writer with an informer on what it writes
   (bench/gowriter -informer, as many goroutines as the operator has workers) creates exactly
   the replicas configmirror will write; its seconds (the API server's audit log), CPU and
   peak RSS (its cache holds every replica). Then they are deleted.
2. configmirror, from a cold start: seconds from its process start to the last replica, its
   create window by the same audit log, its writes (goal: exactly the point's replicas), RSS
   once in sync;
3. `--edits` source edits, one after another: edit -> the last of its replicas (p50, p99);
4. `--new-namespaces` namespaces created one after another: each one's creation -> its last
   replica (one per source) (p50, p99);
5. a restart with nothing changed: its writes (goal: 0), then its CPU over `--idle` seconds
   in sync (millicores, the default --resync-period), and its RSS.

Saves bench/results/scale.json; `make bench-plot` draws docs/scale.png from it.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from harness import (
    Baselines,
    Run,
    Session,
    common_args,
    load_average,
    machine,
    operator_run,
    percentile,
    replica_body,
    run_json,
    save,
    wait,
    writes,
)

SOURCE_NS = "configmirror-scale-sources"


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--points", default="1000,3000,10000,30000,100000",
                        help="replica counts, each a multiple of --namespaces")
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--new-namespaces", type=int, default=20)
    parser.add_argument("--idle", type=float, default=60,
                        help="seconds over which the restarted operator's idle CPU is measured")
    args = parser.parse_args()
    points = [int(p) for p in args.points.split(",")]
    bad = [p for p in points if p % args.namespaces or p <= 0]
    if bad:
        parser.error(f"--points {bad} are not positive multiples of --namespaces "
                     f"{args.namespaces}")
    rows: list[dict[str, Any]] = []
    load_before = load_average()
    with Session(args.kubeconfig) as session:
        cluster = session.cluster
        cluster.namespaces(SOURCE_NS, 1)
        source_ns = f"{SOURCE_NS}-000"
        targets = cluster.namespaces("bench", args.namespaces)
        session.watcher  # noqa: B018 -- watching from here on
        print(f"scale: {', '.join(f'{p:,}' for p in points)} replicas over "
              f"{args.namespaces:,} namespaces; operator --workers {args.workers} "
              f"--kube-api-qps 0; {machine()}")
        print(f"  at the start: {load_before}")
        sources = 0
        for point in points:
            wanted = point // args.namespaces
            if wanted > sources:
                cluster.create_sources(source_ns, wanted, "bench-*", first=sources)
            sources = max(sources, wanted)
            row = measure(session, args, source_ns, targets, sources, point)
            rows.append(row)
            print(line(row), flush=True)
        print(f"  at the end:   {load_average()}")
    save("scale", {"namespaces": args.namespaces, "workers": args.workers, "rows": rows,
                   "load_before": load_before, "load_after": load_average(),
                   "machine": machine()})


def measure(session: Session, args: Any, source_ns: str, targets: list[str], sources: int,
            total: int) -> dict[str, Any]:
    cluster, watcher = session.cluster, session.watcher
    bodies = [replica_body(source_ns, f"src-{i:04d}", ns)
              for i in range(sources) for ns in targets]
    assert len(bodies) == total
    baselines = Baselines(session, bodies, args.workers, f"scale-{total}")
    go = baselines.go("create", args.workers, informer=True)
    baselines.clear()

    since = time.monotonic()
    operator = session.operator(args.workers)
    operator.wait_ready(300)
    ours, wall = operator_run(session, operator, args.workers, total, since, timeout=1800)
    own_writes = operator.writes()
    rss_in_sync = operator.rss_bytes()

    edits = []
    for i in range(args.edits):
        version = f"{total}-edit-{i}"
        edited = time.monotonic()
        cluster.kube.request(
            "patch", f"/api/v1/namespaces/{source_ns}/configmaps/src-{i % sources:04d}",
            body={"data": {"v": version}}, content_type="application/merge-patch+json")
        wait(lambda version=version: watcher.holding[version] >= len(targets), 120,
             f"edit {i} to reach every replica", interval=0.005)
        edits.append(watcher.last_reached[version] - edited)

    fresh = []
    late = [f"bench-new{total}-{i:03d}" for i in range(args.new_namespaces)]
    for name in late:
        created = time.monotonic()
        cluster.kube.request("create", "/api/v1/namespaces", body={"metadata": {"name": name}})
        wait(lambda name=name: len(watcher.arrivals.get(name, ())) >= sources, 120,
             f"namespace {name} to get its {sources} replicas", interval=0.005)
        fresh.append(sorted(watcher.arrivals[name])[sources - 1] - created)
    session.idle(operator, 300)
    assert operator.stop() == 0

    mark = time.time()
    restarted = session.operator(args.workers)
    restarted.wait_ready(300)
    wait(lambda: restarted.metric("configmirror_reconciles_total", role="source") >= sources,
         300, "the restarted operator to reconcile every source")
    session.idle(restarted, 600)
    cpu = restarted.cpu_seconds()
    time.sleep(args.idle)  # the measured window: the operator left alone, in sync
    idle_millicores = (restarted.cpu_seconds() - cpu) / args.idle * 1000
    restart_writes = restarted.writes()
    rss_restarted = restarted.rss_bytes()
    audited_restart = writes(cluster.audit("configmirror/", since=mark))
    assert restarted.stop() == 0

    # Back to no replica: the new namespaces go (their replicas with them), then the rest.
    plane = cluster.plane
    for name in late:
        cluster.kube.request("delete", f"/api/v1/namespaces/{name}")
        if plane is not None:  # no namespace controller here: empty and finalize it
            plane.finalize_namespace(name)
    baselines.clear()

    return {"replicas": total, "sources": sources, "namespaces": len(targets),
            "go_informer": run_json(go), "configmirror": run_json(ours),
            "configmirror_wall_seconds": wall, "writes": own_writes,
            "rss_in_sync": rss_in_sync, "edit_latencies": edits,
            "new_namespace_latencies": fresh, "restart_writes": restart_writes,
            "restart_audited_writes": audited_restart, "idle_millicores": idle_millicores,
            "idle_seconds": args.idle, "rss_restarted": rss_restarted}


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), percentile(ordered, 0.99)


def line(row: dict[str, Any]) -> str:
    go, ours = row["go_informer"], row["configmirror"]
    edit50, edit99 = quantiles(row["edit_latencies"])
    new50, new99 = quantiles(row["new_namespace_latencies"])
    mib = 2**20
    go_rss = go["max_rss_bytes"]
    return (
        f"  {row['replicas']:>7,} replicas ({row['sources']} x {row['namespaces']:,}): "
        f"configmirror {ours['seconds']:.1f} s of writes ({row['configmirror_wall_seconds']:.1f}"
        f" s from its start), Go writer + informer {go['seconds']:.1f} s "
        f"(= {ours['seconds'] / go['seconds']:.2f}x); CPU per 1000 writes "
        f"{cpu(ours)} vs {cpu(go)}; writes {row['writes']:.0f} (goal {row['replicas']}); "
        f"RSS in sync {row['rss_in_sync'] / mib:.0f} MiB"
        f"{'' if go_rss is None else f' vs {go_rss / mib:.0f} MiB (Go peak)'}; edit -> last "
        f"replica p50 {edit50 * 1000:.0f} ms p99 {edit99 * 1000:.0f} ms; new namespace -> its "
        f"last replica p50 {new50 * 1000:.0f} ms p99 {new99 * 1000:.0f} ms; restart "
        f"{row['restart_writes']:.0f} writes (audit {row['restart_audited_writes']}; goal 0), "
        f"idle {row['idle_millicores']:.1f} millicores, RSS {row['rss_restarted'] / mib:.0f} MiB")


def cpu(run: dict[str, Any]) -> str:
    seconds = Run(run["writer"], run["concurrency"], run["writes"], run["seconds"],
                  run["cpu_seconds"]).cpu_per_1000
    return "-" if seconds is None else f"{seconds:.2f} s"


if __name__ == "__main__":
    main()
