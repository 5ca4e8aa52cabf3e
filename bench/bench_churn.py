"""Dedup under churn: many edits to many sources, as fast as possible.

    python bench/bench_churn.py [--sources 50] [--edits 20] [--namespaces 10] [--workers 32]

Each source is edited `--edits` times by 8 threads at full speed (the operator runs with
--kube-api-qps 0). Prints reconciles per source and writes per replica against the naive
count (one per event), once every replica holds the final edit.
"""

from __future__ import annotations

from harness import Session, common_args, load_average, parallel, wait


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=50)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--namespaces", type=int, default=10)
    args = parser.parse_args()
    with Session(args.kubeconfig) as session:
        cluster, watcher = session.cluster, session.watcher
        cluster.namespaces("churn-src", 1)
        source_ns = "churn-src-000"
        targets = cluster.namespaces("churn", args.namespaces)
        names = cluster.create_sources(source_ns, args.sources, "churn-*", payload=100)
        replicas = args.sources * len(targets)
        operator = session.operator(args.workers)
        wait(lambda: watcher.live() == replicas, 120, "the first replicas")
        session.idle(operator)
        reconciles_before = operator.metric("configmirror_reconciles_total", role="source")
        writes_before = operator.metric("configmirror_replica_writes_total")

        edits = [(name, i) for i in range(1, args.edits + 1) for name in names]
        last = str(args.edits)
        seconds = parallel(lambda e: cluster.kube.request(
            "patch", f"/api/v1/namespaces/{source_ns}/configmaps/{e[0]}",
            body={"data": {"v": str(e[1])}}, content_type="application/merge-patch+json"),
            edits, 8)
        wait(lambda: sum(1 for v, _ in watcher.versions.values() if v == last) == replicas,
             300, "every replica to hold the last edit")
        session.idle(operator)
        reconciles = operator.metric("configmirror_reconciles_total", role="source") - \
            reconciles_before
        writes = operator.metric("configmirror_replica_writes_total") - writes_before
        naive_writes = len(edits) * len(targets)
        print(f"churn: {args.sources} sources x {args.edits} edits in {seconds:.2f} s "
              f"({len(edits) / seconds:.0f} edits/s), {len(targets)} replicas each; operator "
              f"--workers {args.workers} --kube-api-qps 0; {load_average()}")
        print(f"  source reconciles (plans) per source: {reconciles / args.sources:.1f} "
              f"(naive: {args.edits}, one per event)")
        print(f"  writes per replica:    {writes / replicas:.1f} (naive: {args.edits}); "
              f"{writes:.0f} writes instead of {naive_writes} "
              f"({naive_writes / max(writes, 1):.1f}x fewer)")

if __name__ == "__main__":
    main()
