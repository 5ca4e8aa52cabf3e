"""Latency: from a source edit to its last replica updated.

    python bench/bench_latency.py [--namespaces 50] [--edits 100] [--spacing 0.25]

One source targeting N namespaces is edited `--edits` times, `--spacing` seconds apart;
a watch sees each replica change. Prints p50/p99 of edit -> last replica (goal: p99 <= 1 s).
"""

from __future__ import annotations

import math
import statistics
import time

from harness import Session, common_args, wait


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--spacing", type=float, default=0.25)
    args = parser.parse_args()
    with Session(args.kubeconfig) as session:
        cluster, watcher = session.cluster, session.watcher
        cluster.namespaces("latency-src", 1)
        source_ns = "latency-src-000"
        targets = cluster.namespaces("latency", args.namespaces)
        cluster.create_sources(source_ns, 1, "latency-*", payload=100)
        session.operator(args.workers)
        wait(lambda: watcher.live() == len(targets), 60, "the replicas")
        latencies = []
        for i in range(1, args.edits + 1):
            edited = time.monotonic()
            cluster.kube.request("patch", f"/api/v1/namespaces/{source_ns}/configmaps/src-0000",
                                 body={"data": {"v": str(i)}},
                                 content_type="application/merge-patch+json")
            keys = [f"{ns}/src-0000" for ns in targets]
            wait(lambda i=i, keys=keys: all((k, str(i)) in watcher.seen_at for k in keys), 30,
                 f"edit {i} to reach every replica", interval=0.005)
            latencies.append(max(watcher.seen_at[(k, str(i))] for k in keys) - edited)
            time.sleep(max(0.0, args.spacing - (time.monotonic() - edited)))
        ordered = sorted(latencies)
        p50 = statistics.median(ordered)
        p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]  # nearest-rank percentile
        print(f"latency: {args.edits} edits of one source -> {len(targets)} replicas, "
              f"{args.workers} workers")
        print(f"  edit -> last replica updated: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
              f"max {ordered[-1] * 1000:.0f} ms (goal: p99 <= 1000 ms)")


if __name__ == "__main__":
    main()
