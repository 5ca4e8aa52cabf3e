"""Namespace storm: many namespaces created at once, every source selecting all of them.

    python bench/bench_storm.py [--namespaces 1000] [--sources 5] [--workers 32]

The operator runs (--kube-api-qps 0) and is idle, with S sources that select every namespace
named storm-*; then N such namespaces are created at once (16 threads). Prints the time from
the first namespace created to the last of the S*N replicas, and the operator's write rate
against the Go writer's and the Python bare client's on the same S*N bodies, measured right
after the operator on the same server (the namespaces only exist from the storm on): once
on a quiet server, and once while another N namespaces are created the same way, the load
the operator's writes share the server with.
Then the exact write counts and a restart with nothing changed (goal: 0 writes).
The whole storm is run --rounds times (default 3), each with its own sources and namespaces,
and the ratios' medians are printed: on this VM one run's ratio moves by up to +-0.3 with the
machine's speed between the operator's window and the baselines'.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from harness import (
    Baselines,
    Run,
    Session,
    baseline_rows,
    common_args,
    cpu_snapshot,
    load_average,
    machine,
    operator_run,
    parallel,
    ratio_lines,
    replica_body,
    run_json,
    run_table,
    save,
    wait,
    writes,
)

SOURCE_NS = "storm-sources"


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--sources", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    total = args.sources * args.namespaces
    load_before = load_average()
    with Session(args.kubeconfig) as session:
        session.watcher  # noqa: B018 - watch replicas from before the first one exists
        print(f"storm: {args.namespaces} namespaces created at once, {args.sources} sources "
              f"selecting all = {total} replicas; operator --workers {args.workers} "
              f"--kube-api-qps 0; {args.rounds} rounds; {machine()}")
        print(f"  at the start: {load_before}")
        rounds = [storm_round(session, args, r) for r in range(args.rounds)]
        print(f"  at the end:   {load_average()}")
        quiet = [r["ratio_quiet"] for r in rounds]
        stormy = [r["ratio_storm"] for r in rounds]
        print(f"  over {len(rounds)} rounds, configmirror / Go writer at the same concurrency "
              f"({args.workers}): median {statistics.median(quiet):.2f} on a quiet server "
              f"(each: {', '.join(f'{q:.2f}' for q in quiet)}), median "
              f"{statistics.median(stormy):.2f} in a storm (each: "
              f"{', '.join(f'{q:.2f}' for q in stormy)}) (goal >= 0.8)")
        first = rounds[0]
        save(f"storm-{args.sources}x{args.namespaces}", {
            **{k: v for k, v in first.items() if not k.startswith("ratio_")},
            "sources": args.sources, "namespaces": args.namespaces, "workers": args.workers,
            "load_before": load_before, "load_after": load_average(), "machine": machine(),
            "rounds": [{"ratio_quiet": r["ratio_quiet"], "ratio_storm": r["ratio_storm"],
                        "configmirror": r["configmirror"]} for r in rounds]})


def storm_round(session: Session, args: argparse.Namespace, number: int) -> dict[str, Any]:
    """One storm: the operator's, then the baselines on the same bodies. Each round has its
    own sources and namespaces; afterwards its sources are deleted (the operator stopped) and
    the baselines leave no replica behind, so the next round's operator starts with nothing
    to do. The first round also restarts the operator with nothing changed."""
    cluster = session.cluster
    total = args.sources * args.namespaces
    home = f"{SOURCE_NS}-{number}"
    cluster.kube.request("create", "/api/v1/namespaces", body={"metadata": {"name": home}})
    names = cluster.create_sources(home, args.sources, f"storm-{number}-*")
    operator = session.operator(args.workers)
    operator.wait_ready(120)
    session.idle(operator)
    before = cpu_snapshot(session, operator)
    mark = time.time()

    # The storm: every namespace at once, while the operator watches.
    storm = [f"storm-{number}-{i:04d}" for i in range(args.namespaces)]
    since = time.monotonic()
    creating = parallel(lambda name: cluster.kube.request(
        "create", "/api/v1/namespaces", body={"metadata": {"name": name}}), storm, 16)
    ours, wall = operator_run(session, operator, args.workers, total, since, before)
    own_writes = operator.writes()
    audited = writes(cluster.audit("configmirror/", since=mark))
    assert operator.stop() == 0

    restart_writes, after = None, None
    if number == 0:
        mark = time.time()
        restarted = session.operator(args.workers)
        wait(lambda: restarted.metric("configmirror_reconciles_total", role="source")
             >= args.sources, 300, "the restarted operator to reconcile every source")
        session.idle(restarted, 300)
        restart_writes = restarted.writes()
        after = cluster.audit("configmirror/", since=mark)
        assert restarted.stop() == 0
    for name in names:  # no operator runs: nothing is planned from them any more
        cluster.kube.request("delete", f"/api/v1/namespaces/{home}/configmaps/{name}")

    # The baselines, on the same bodies, right after (the operator stopped: it would
    # repair what they delete).
    bodies = [replica_body(home, name, ns) for name in names for ns in storm]
    baselines = Baselines(session, bodies, args.workers, f"storm-{total}")
    baselines.clear()
    baselines.measure()
    # The same writes under the same load: the Go writer starts as another N namespaces
    # are created from 16 threads (names no source selects), as the operator's writes
    # share the server with the storm's namespace creations. One pass per concurrency.
    in_storm: dict[int, Run] = {}
    for concurrency in baselines.concurrencies:
        squall = [f"squall-{number}-{concurrency}-{i:04d}" for i in range(args.namespaces)]
        load = threading.Thread(target=parallel, args=(lambda name: cluster.kube.request(
            "create", "/api/v1/namespaces", body={"metadata": {"name": name}}), squall,
            16))
        load.start()
        try:
            in_storm[concurrency] = baselines.go("create", concurrency)
        finally:
            load.join()
        baselines.clear()
    storm_best = max(in_storm.values(), key=lambda r: r.rate)

    print(f"  round {number + 1}: {args.namespaces} namespaces created in {creating:.2f} s; "
          f"the last of {total} replicas {wall:.2f} s after the first namespace")
    print(*run_table([*baseline_rows(baselines),
                      (f"configmirror, {args.workers} workers", ours)]), sep="\n")
    print("  (baselines: one run each, right after the operator, on the same bodies; "
          "configmirror: its creates, first to last, during the storm)")
    print(*ratio_lines(ours, baselines), sep="\n")
    print(*run_table([(f"Go client-go, {c} goroutines, storm", run)
                      for c, run in sorted(in_storm.items())]), sep="\n")
    print(f"  (the Go writer again, while {args.namespaces} other namespaces are created "
          f"from 16 threads: the load configmirror's window shares)")
    print(f"  configmirror / Go writer in a storm at the same concurrency "
          f"({args.workers}) = {ours.rate / in_storm[args.workers].rate:.2f}")
    print(f"  configmirror / Go writer in a storm at its best ({storm_best.concurrency}) = "
          f"{ours.rate / storm_best.rate:.2f}")
    print(f"  configmirror writes: {own_writes:.0f} by its counter, {audited} by the "
          f"apiserver's audit log (goal: exactly {total})")
    if restart_writes is not None:
        print(f"  restart, nothing changed: {restart_writes:.0f} writes "
              f"(audit: {writes(after)}) (goal: 0)")
    return {
        "namespace_seconds": creating, "storm_seconds": wall,
        "baselines": {label: [run_json(r) for r in runs]
                      for label, runs in baselines.runs.items()},
        "baselines_in_storm": {f"go@{c}": run_json(r) for c, r in in_storm.items()},
        "configmirror": run_json(ours), "writes": own_writes, "audited_writes": audited,
        "restart_writes": restart_writes,
        "ratio_quiet": ours.rate / baselines.mean(f"go@{args.workers}").rate,
        "ratio_storm": ours.rate / in_storm[args.workers].rate,
    }


if __name__ == "__main__":
    main()
