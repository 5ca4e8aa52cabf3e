"""Convergence: S sources x N namespaces, configmirror against a bare client on one server.

    python bench/bench_convergence.py [--sources 200] [--namespaces 50] [--workers 4]

Baseline (same run, same server): a bare client creating the same S*N replicas with the same
number of threads as the operator has workers. Prints operator_rate / baseline_rate (goal
>= 0.8), the operator's writes (goal: exactly S*N), then restarts it with nothing changed
and prints its writes (goal: 0) and reads (goal: one LIST per informer).
"""

from __future__ import annotations

import time

from harness import (
    Session,
    common_args,
    machine,
    parallel,
    replica_body,
    save,
    wait,
    writes,
)

SOURCE_NS = "configmirror-bench-sources"


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=50)
    args = parser.parse_args()
    total = args.sources * args.namespaces
    with Session(args.kubeconfig) as session:
        cluster, watcher = session.cluster, session.watcher
        cluster.namespaces(SOURCE_NS, 1)
        source_ns = f"{SOURCE_NS}-000"
        targets = cluster.namespaces("bench", args.namespaces)
        print(f"convergence: {args.sources} sources x {args.namespaces} namespaces = {total} "
              f"replicas, {args.workers} threads/workers; {machine()}")

        # 1. The bare client: the API server's own write rate at this concurrency. It runs
        # again after the operator, and the two are averaged, so drift in the machine's speed
        # over the run favours neither side.
        bodies = [replica_body(source_ns, f"src-{i:04d}", ns)
                  for i in range(args.sources) for ns in targets]

        def bare_client() -> list[tuple[float, int]]:
            since = time.monotonic()
            parallel(lambda b: cluster.kube.request(
                "create", f"/api/v1/namespaces/{b['metadata']['namespace']}/configmaps",
                body=b), bodies, args.workers)
            wait(lambda: watcher.live() == total, 120, "the baseline's replicas")
            curve = watcher.curve(since)
            cluster.delete_replicas(targets, watcher)
            return curve

        baseline_curve = bare_client()
        first_span = baseline_curve[-1][0] - baseline_curve[0][0]

        # 2. configmirror, from a cold start, on the same workload.
        cluster.create_sources(source_ns, args.sources, "bench-*")
        since = time.monotonic()
        operator = session.operator(args.workers)
        wait(lambda: watcher.live() == total, 600, "configmirror's replicas")
        wall = time.monotonic() - since
        curve = watcher.curve(since)
        span = curve[-1][0] - curve[0][0]
        session.idle(operator)
        own_writes = operator.metric("configmirror_replica_writes_total")
        audited = writes(cluster.audit("configmirror/"))

        # 3. Restart with nothing changed: zero writes, one LIST per informer.
        assert operator.stop() == 0
        mark = time.time()
        restarted = session.operator(args.workers)
        wait(lambda: restarted.metric("controller_runtime_reconcile_total") >= args.sources,
             120, "the restarted operator to reconcile every source")
        session.idle(restarted)
        restart_writes = restarted.metric("configmirror_replica_writes_total")
        relists = restarted.metric("configmirror_informer_relists_total")
        after = cluster.audit("configmirror/", since=mark)
        assert restarted.stop() == 0
        cluster.delete_replicas(targets, watcher)
        second = bare_client()
        second_span = second[-1][0] - second[0][0]
        baseline_span = (first_span + second_span) / 2

        baseline_rate = total / baseline_span
        rate = total / span
        print(f"  bare client:   {baseline_span:6.2f} s  {baseline_rate:8.0f} writes/s  "
              f"(mean of {first_span:.2f} s before and {second_span:.2f} s after)")
        print(f"  configmirror:  {span:6.2f} s  {rate:8.0f} writes/s  "
              f"({wall:.2f} s from process start)")
        print(f"  operator_rate / baseline_rate = {rate / baseline_rate:.2f} (goal >= 0.8)")
        print(f"  configmirror writes: {own_writes:.0f} by its counter, {audited} by the "
              f"apiserver's audit log (goal: exactly {total})")
        print(f"  restart, nothing changed: {restart_writes:.0f} writes "
              f"(audit: {writes(after)}) (goal: 0)")
        lists = {res: n for (verb, res), n in (after or {}).items() if verb == "list"}
        print(f"  restart reads: {relists:.0f} LISTs by the informers (one per informer); "
              f"HTTP list requests by resource: {lists} (pages of 500)")
        save("convergence", {
            "sources": args.sources, "namespaces": args.namespaces, "workers": args.workers,
            "baseline_seconds": baseline_span, "configmirror_seconds": span,
            "configmirror_wall_seconds": wall, "ratio": rate / baseline_rate,
            "writes": own_writes, "audited_writes": audited,
            "restart_writes": restart_writes, "restart_relists": relists,
            "restart_list_requests": lists,
            "configmirror_requests": {f"{v} {r}": n for (v, r), n in
                                      (cluster.audit("configmirror/", 0) or {}).items()},
            "baseline_curve": baseline_curve[::max(1, len(baseline_curve) // 400)],
            "configmirror_curve": curve[::max(1, len(curve) // 400)],
            "machine": machine()})


if __name__ == "__main__":
    main()
