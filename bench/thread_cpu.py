"""Where a replica write's CPU goes, by operator thread: a namespace storm, thread by thread.

    python bench/thread_cpu.py [--sources 5] [--namespaces 1000] [--workers 32]

Not a benchmark (no baseline, no ratio): an explanation of one. The operator runs exactly as
in bench_storm.py, with bench/profiling/sitecustomize.py on its PYTHONPATH and
CONFIGMIRROR_THREAD_CPU set, so each thread's own CPU time (time.thread_time, no profiler
slowing anything down) is written at exit, summed by thread-name group. An operator is first
started and stopped with nothing to do (twice: the second counts); its CPU is subtracted,
so what is left is the storm's: N namespaces created at once (16 threads), S sources
selecting all of them, S*N creates.
Prints each group's CPU seconds per 1,000 writes.
"""

from __future__ import annotations

import json
import time

from configmirror_testing.operator import OperatorProcess
from harness import REPO, RESULTS, Session, common_args, load_average, parallel, wait

SOURCE_NS = "threads-src"


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=5)
    parser.add_argument("--namespaces", type=int, default=1000)
    args = parser.parse_args()
    out = RESULTS / "thread-cpu.json"
    env = {"PYTHONPATH": str(REPO / "bench" / "profiling"), "CONFIGMIRROR_THREAD_CPU": str(out)}
    total = args.sources * args.namespaces
    with Session(args.kubeconfig) as session:
        cluster, watcher = session.cluster, session.watcher
        cluster.kube.request("create", "/api/v1/namespaces", body={"metadata": {"name": SOURCE_NS}})
        cluster.create_sources(SOURCE_NS, args.sources, "threads-*")
        print(f"thread CPU: {args.namespaces} namespaces created at once, {args.sources} "
              f"sources selecting all = {total} replicas; --workers {args.workers} "
              f"--kube-api-qps 0; {load_average()}")
        # An operator with nothing to do: the CPU that is not the storm's. The second of two,
        # so a first start's cold caches (bytecode, page cache) are not subtracted.
        for _ in range(2):
            assert ready_operator(session, args.workers, env).stop() == 0
        before = json.loads(out.read_text())
        operator = ready_operator(session, args.workers, env)
        started = time.monotonic()
        parallel(lambda name: cluster.kube.request(
            "create", "/api/v1/namespaces", body={"metadata": {"name": name}}),
            [f"threads-{i:04d}" for i in range(args.namespaces)], 16)
        wait(lambda: watcher.live() >= total, 900, "the replicas")
        seconds = time.monotonic() - started
        session.idle(operator, 300)
        writes = operator.writes()
        assert operator.stop() == 0
        busy = json.loads(out.read_text())
    print(f"  {writes:.0f} writes; the last replica {seconds:.1f} s after the first namespace")
    print(f"  {'thread group':32s} {'CPU s':>7s}  {'per 1000 writes':>15s}")
    spent = {group: busy[group] - before.get(group, 0.0) for group in busy}
    for group, cpu in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {group:32s} {cpu:7.2f}  {cpu / writes * 1000:15.3f}")
    everything = sum(spent.values())
    print(f"  {'all':32s} {everything:7.2f}  {everything / writes * 1000:15.3f}")


def ready_operator(session: Session, workers: int, env: dict[str, str]) -> OperatorProcess:
    """An operator started, synced and idle."""
    operator = session.operator(workers, env=env)
    operator.wait_ready(120)
    session.idle(operator)
    return operator


if __name__ == "__main__":
    main()
