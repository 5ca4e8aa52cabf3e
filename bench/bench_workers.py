"""--workers: configmirror's write rate at several worker counts, each against the Go writer.

    python bench/bench_workers.py [--sources 1] [--namespaces 5000] [--workers-list 4,8,16,32]

For each worker count W, on one server: the Go writer (no client-side rate limit) with W
goroutines, configmirror with W workers (--kube-api-qps 0) from a cold start, and the Go
writer with W goroutines again; each writes the same S*N replicas, which are deleted after
each pass. The Go writer at 32 runs at the start and the end (its best: the server's limit).
Prints writes/s, the ratios, and CPU seconds per 1,000 writes for both, per W.
"""

from __future__ import annotations

import time

from harness import (
    BEST_CONCURRENCY,
    Baselines,
    Session,
    common_args,
    load_average,
    machine,
    operator_run,
    replica_body,
    save,
)

SOURCE_NS = "workers-src-000"


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=1)
    parser.add_argument("--namespaces", type=int, default=5000)
    parser.add_argument("--workers-list", default="4,8,16,32")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers_list.split(",")]
    total = args.sources * args.namespaces
    load_before = load_average()
    with Session(args.kubeconfig) as session:
        cluster = session.cluster
        cluster.namespaces("workers-src", 1)
        targets = cluster.namespaces("workers", args.namespaces)
        names = cluster.create_sources(SOURCE_NS, args.sources, "workers-*")
        bodies = [replica_body(SOURCE_NS, name, ns) for name in names for ns in targets]
        baselines = Baselines(session, bodies, BEST_CONCURRENCY,
                              f"workers-{args.sources}x{args.namespaces}")
        print(f"workers: {args.sources} sources x {args.namespaces} namespaces = {total} "
              f"replicas; --kube-api-qps 0; {machine()}")
        print(f"  at the start: {load_before}")

        def go(concurrency: int) -> None:
            baselines.record(f"go@{concurrency}", baselines.go("create", concurrency))
            baselines.clear()

        go(BEST_CONCURRENCY)
        rows = []
        for workers in counts:
            go(workers)
            since = time.monotonic()
            operator = session.operator(workers)
            operator.wait_ready(120)
            ours, _ = operator_run(session, operator, workers, total, since)
            assert operator.writes() == total, operator.writes()
            assert operator.stop() == 0
            baselines.clear()
            go(workers)
            rows.append((workers, ours, load_average()))
            print(f"  {workers:2d} workers: {ours.rate:.0f} writes/s ({load_average()})",
                  flush=True)
        go(BEST_CONCURRENCY)

        best = baselines.mean(f"go@{BEST_CONCURRENCY}")
        print(f"  at the end:   {load_average()}")
        print(f"  Go writer at {BEST_CONCURRENCY} goroutines (its best): {best.rate:.0f} writes/s, "
              f"{best.cpu_per_1000:.2f} CPU s / 1000 writes (mean of the start and the end)")
        print(f"  {'W':>3} {'Go@W /s':>8} {'ours /s':>8} {'ours/Go@W':>10} {'ours/best':>10} "
              f"{'CPU: ours':>10} {'Go':>5} {'server(ours)':>13} {'server(Go)':>11}"
              f"   (CPU: s per 1000 writes)")
        for workers, ours, _ in rows:
            same = baselines.mean(f"go@{workers}")
            print(f"  {workers:3d} {same.rate:8.0f} {ours.rate:8.0f} {ours.rate / same.rate:10.2f} "
                  f"{ours.rate / best.rate:10.2f} {ours.cpu_per_1000 or 0:10.2f} "
                  f"{same.cpu_per_1000 or 0:5.2f} {ours.server_cpu_per_1000 or 0:13.2f} "
                  f"{same.server_cpu_per_1000 or 0:11.2f}")
        save(f"workers-{args.sources}x{args.namespaces}", {
            "sources": args.sources, "namespaces": args.namespaces,
            "load_before": load_before, "load_after": load_average(),
            "best": best.rate, "rows": [
                {"workers": w, "rate": r.rate, "cpu_per_1000": r.cpu_per_1000,
                 "server_cpu_per_1000": r.server_cpu_per_1000,
                 "go_rate": baselines.mean(f"go@{w}").rate,
                 "go_cpu_per_1000": baselines.mean(f"go@{w}").cpu_per_1000,
                 "go_server_cpu_per_1000": baselines.mean(f"go@{w}").server_cpu_per_1000,
                 "load": load}
                for w, r, load in rows],
            "machine": machine()})


if __name__ == "__main__":
    main()
