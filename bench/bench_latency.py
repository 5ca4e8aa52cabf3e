"""Latency: from a source edit to its last replica updated, against the Go writer's time.

    python bench/bench_latency.py [--namespaces 50] [--edits 100] [--spacing 0.25]
    python bench/bench_latency.py --namespaces 5000 --edits 5

One source targeting N namespaces is edited `--edits` times, one edit after the previous
one reached every replica and at least `--spacing` seconds apart; a watch sees each replica
change. Prints p50/p99 of edit -> last replica. Goals (docs/performance.md): p99 <= 1 s for
50 replicas; for 5,000, p99 <= 1.3 x the Go writer's time for N writes at its best. That
reference is measured in the same run: the Go writer (no client-side rate limit) updates the
same N replicas (as many goroutines as the operator has workers, and 32) before and after
the operator, and the best mean is used. The operator runs with --kube-api-qps 0.
"""

from __future__ import annotations

import statistics
import time

from harness import (
    Baselines,
    Run,
    Session,
    _delta,
    bodies_file,
    common_args,
    cpu_snapshot,
    load_average,
    machine,
    percentile,
    replica_body,
    wait,
)

SOURCE_NS = "latency-src-000"
PAYLOAD = 100


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--spacing", type=float, default=0.25)
    args = parser.parse_args()
    load_before = load_average()
    with Session(args.kubeconfig) as session:
        cluster, watcher = session.cluster, session.watcher
        cluster.namespaces("latency-src", 1)
        targets = cluster.namespaces("latency", args.namespaces)
        n = len(targets)

        # The reference: the Go writer updating the same N replicas. It creates them first
        # (the operator would), then each pass writes a content no pass wrote before, so
        # every update really changes the object.
        bodies = [replica_body(SOURCE_NS, "src-0000", ns, payload=PAYLOAD) for ns in targets]
        baselines = Baselines(session, bodies, args.workers, f"latency-{n}")
        baselines.go("create", 32)
        passes = iter(range(1, 1000))

        def go_updates() -> None:
            for concurrency in baselines.concurrencies:
                v = f"go-{next(passes)}"
                changed = bodies_file(f"latency-{n}-{v}", (
                    {**b, "data": {**b["data"], "v": v}} for b in bodies))
                baselines.record(f"go@{concurrency}", baselines.go("update", concurrency,
                                                                   changed))

        go_updates()
        cluster.create_sources(SOURCE_NS, 1, "latency-*", payload=PAYLOAD)
        operator = session.operator(args.workers)
        wait(lambda: sum(1 for v, _ in watcher.versions.values() if v == "") == n
             and operator.idle(), 600, "the operator to bring every replica in line")
        cpu_before, server_before = cpu_snapshot(session, operator)
        writes_before = operator.writes()
        latencies = []
        edited_at = []  # epoch seconds, the audit log's clock
        for i in range(1, args.edits + 1):
            version = f"e{i}"
            edited_at.append(time.time())
            edited = time.monotonic()
            cluster.kube.request("patch", f"/api/v1/namespaces/{SOURCE_NS}/configmaps/src-0000",
                                 body={"data": {"v": version}},
                                 content_type="application/merge-patch+json")
            wait(lambda version=version: watcher.holding[version] >= n, 600,
                 f"edit {i} to reach every replica", interval=0.005 if n <= 500 else 0.02)
            latencies.append(watcher.last_reached[version] - edited)
            time.sleep(max(0.0, args.spacing - (time.monotonic() - edited)))
        session.idle(operator, 300)
        ours = Run("configmirror", args.workers, int(operator.writes() - writes_before),
                   sum(latencies), operator.cpu_seconds() - cpu_before, None,
                   _delta(cluster.server_cpu(), server_before))
        # Where each edit's time went: the operator's first and last write of it, on the
        # server's clock (the audit log), and the rest is the watch delivering the last one.
        ended_at = time.time()
        spans = cluster.spans("configmirror/", "update", [*edited_at, ended_at])
        requests = cluster.requests("configmirror/", edited_at[0], ended_at)
        assert operator.stop() == 0
        go_updates()

        ordered = sorted(latencies)
        p50 = statistics.median(ordered)
        p99 = percentile(ordered, 0.99)
        best = min((baselines.mean(f"go@{c}") for c in baselines.concurrencies),
                   key=lambda r: r.seconds)
        print(f"latency: {args.edits} edits of one source -> {n} replicas; operator "
              f"--workers {args.workers} --kube-api-qps 0; {machine()}")
        print(f"  at the start: {load_before}")
        print(f"  at the end:   {load_average()}")
        for concurrency in baselines.concurrencies:
            run = baselines.mean(f"go@{concurrency}")
            print(f"  Go writer, {n} updates, {concurrency} goroutines: {run.seconds:.2f} s "
                  f"({run.rate:.0f} writes/s; mean of a run before ("
                  + " s) and one after (".join(f"{r.seconds:.2f}"
                                                for r in baselines.runs[f"go@{concurrency}"])
                  + f" s)){cpu_text(run)}")
        print(f"  configmirror, {ours.writes} updates over the {args.edits} edits: "
              f"{ours.rate:.0f} writes/s{cpu_text(ours)}")
        print(f"  edit -> last replica updated: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} "
              f"ms, max {ordered[-1] * 1000:.0f} ms")
        if len(latencies) <= 10:
            print("  each edit, in order: " + ", ".join(f"{t:.2f} s" for t in latencies))
            if spans is not None:
                print("  the operator's writes of each edit, on the server's clock (first, last "
                      "after the edit): " + ", ".join(
                          f"{first:.2f}-{last:.2f} s" for first, last in spans))
        if requests is not None:
            print("  the operator's requests over the edits (verb resource status: count): "
                  + ", ".join(f"{verb} {resource} {code}: {count}" for (verb, resource, code),
                              count in sorted(requests.items())))
        if n <= 50:
            print(f"  p99 {p99 * 1000:.0f} ms (goal for 50 replicas: <= 1000 ms)")
        print(f"  p99 / the Go writer's best time for {n} writes ({best.concurrency} "
              f"goroutines, {best.seconds:.2f} s) = {p99 / best.seconds:.2f} "
              f"(goal for 5,000 replicas: <= 1.3)")


def cpu_text(run: Run) -> str:
    """CPU seconds per 1,000 writes: the writer's, and the server's over the same pass."""
    if run.cpu_per_1000 is None:
        return ""
    server = "" if run.server_cpu_per_1000 is None else \
        f", the server {run.server_cpu_per_1000:.2f} s"
    return f"; CPU per 1,000 writes: the writer {run.cpu_per_1000:.2f} s{server}"


if __name__ == "__main__":
    main()
