"""Restart and idle: one converged cluster, the operator restarted again and again, alternating
this tree and another (a worktree of an older commit), both measured the same way.

    python bench/bench_restart.py --sources 20 --namespaces 5000 --base ../../older --rounds 3
    python bench/bench_restart.py --sources 20 --namespaces 500      # this tree alone

The cluster is converged once, by this tree's operator. Then, each round, each tree (the order
swapped every round) is started on it with `--resync-period RESYNC` and measured:
  - restart: seconds from its start to /readyz and to idle (every source planned, and with
    it every replica checked, and nothing left to do), its CPU seconds to each, and its
    writes (goal: 0);
  - idle: CPU over `--cycles` whole resync cycles, each from the end of one resync to the end
    of the next (a resync is over once it has planned every source again and the operator
    has been idle, its counts unchanged, for a second: since 4893ebd a resync leaves a
    replica of a cached source to that source's plan, so code before it reconciles every
    replica too and code after it does not), in millicores and CPU seconds per resync. A window of
    fixed length would cut a resync at either end wherever the process's timer happens to
    fall, so two trees that went idle a second apart would be told apart by that alone;
  - RSS once idle after the restart, and after the cycles.
Prints every round, the medians, and this tree's medians over the other's.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from configmirror.operator.settings import parse_duration
from configmirror_testing.scrape import Scrape
from harness import (
    Session,
    common_args,
    load_average,
    machine,
    operator_env,
    operator_origin,
    save,
    wait,
)

MIB = 2**20
FIGURES = ("ready_s", "idle_s", "cpu_to_ready", "cpu_to_idle", "rss_idle_mib",
           "cpu_per_resync", "idle_millicores", "rss_after_mib")


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=20)
    parser.add_argument("--namespaces", type=int, default=5000)
    parser.add_argument("--base", type=Path, default=None,
                        help="another tree, alternated with this one (its src/ is run as the "
                        "operator; default: this tree alone)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--resync", default="60", help="--resync-period of every restart")
    parser.add_argument("--cycles", type=int, default=2, help="whole resync cycles measured")
    args = parser.parse_args()
    replicas = args.sources * args.namespaces
    trees: dict[str, dict[str, str] | None] = {"this tree": None}
    if args.base is not None:
        trees[f"base ({args.base.name})"] = operator_env(args.base)
    with Session(args.kubeconfig) as session:
        cluster = session.cluster
        cluster.namespaces("configmirror-bench-sources", 1)
        cluster.namespaces("bench", args.namespaces)
        print(f"restart: {args.sources} sources x {args.namespaces} namespaces = {replicas} "
              f"replicas; --resync-period {args.resync}, {args.cycles} cycles; {machine()}")
        for label, env in trees.items():
            print(f"  {label}: {operator_origin(env)}")
        print(f"  at the start: {load_average()}", flush=True)
        cluster.create_sources("configmirror-bench-sources-000", args.sources, "bench-*")
        operator = session.operator(args.workers)
        operator.wait_ready(120)
        wait(lambda: session.watcher.live() >= replicas, 900, "the replicas")
        session.idle(operator, 300)
        assert operator.stop() == 0

        runs: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
        order = list(trees)
        for round_ in range(args.rounds):
            for label in order if round_ % 2 == 0 else order[::-1]:
                run = restart(session, args.workers, args.resync, args.cycles, args.sources,
                              trees[label])
                runs[label].append(run)
                print(f"  round {round_ + 1}, {label}: " + ", ".join(
                    f"{k} {run[k]:.2f}" for k in (*FIGURES, "writes",
                                                  "target_reconciles_at_start")), flush=True)
        print(f"  at the end:   {load_average()}")
        medians = {label: {k: statistics.median(r[k] for r in rs) for k in FIGURES}
                   for label, rs in runs.items()}
        print(f"  {'median':16}" + "".join(f"{k:>16}" for k in FIGURES))
        for label in order:
            print(f"  {label[:16]:16}" + "".join(f"{medians[label][k]:16.2f}" for k in FIGURES))
        if len(order) == 2:
            ours, base = (medians[label] for label in order)
            print(f"  {'this / base':16}"
                  + "".join(f"{ours[k] / base[k]:16.2f}" for k in FIGURES))
        writes = sum(r["writes"] for rs in runs.values() for r in rs)
        print(f"  writes by every restarted operator, resyncs included: {writes:.0f} (goal: 0)")
        save(f"restart-{args.sources}x{args.namespaces}", {
            "sources": args.sources, "namespaces": args.namespaces, "resync": args.resync,
            "cycles": args.cycles, "runs": runs, "medians": medians, "machine": machine(),
            "trees": {label: operator_origin(env) for label, env in trees.items()}})


def restart(session: Session, workers: int, resync: str, cycles: int, sources: int,
            env: dict[str, str] | None) -> dict[str, float]:
    """One operator started on the converged cluster and measured (see the module's doc)."""
    started = time.monotonic()
    operator = session.operator(workers, "--resync-period", resync, env=env)
    operator.wait_ready(300)
    ready, cpu_to_ready = time.monotonic() - started, operator.cpu_seconds()
    reconciled = Reconciled(f"http://127.0.0.1:{operator.metrics_port}/metrics")
    # Idle once every source is planned: the keys of the first list are all queued before
    # the first worker runs, so nothing is left then.
    idle = reconciled.wait(sources, 0) - started
    cpu_to_idle, rss_idle = operator.cpu_seconds(), operator.rss_bytes()
    looked = reconciled.look()[0][1]  # target reconciles at start-up (7a6a820: orphans only)
    # Whole cycles: from the end of the first resync to the end of the last.
    reconciled.wait(2 * sources, 0, timeout=parse_duration(resync) + 300)
    cycle_start, cycle_cpu = time.monotonic(), operator.cpu_seconds()
    reconciled.wait((2 + cycles) * sources, 0, timeout=cycles * (parse_duration(resync) + 300))
    wall, cpu = time.monotonic() - cycle_start, operator.cpu_seconds() - cycle_cpu
    run = {"ready_s": ready, "idle_s": idle, "cpu_to_ready": cpu_to_ready,
           "cpu_to_idle": cpu_to_idle, "rss_idle_mib": rss_idle / MIB,
           "cpu_per_resync": cpu / cycles, "idle_millicores": cpu / wall * 1000,
           "rss_after_mib": operator.rss_bytes() / MIB, "writes": operator.writes(),
           "target_reconciles_at_start": looked}
    assert operator.stop() == 0
    return run


class Reconciled:
    """Waits, by the operator's own counts on /metrics at `url`, until it has reconciled so
    many source and target keys since its start and has stayed idle, those counts unchanged,
    for `quiet` seconds (a resync hands its keys to the queue as it walks the cache, so one
    idle look can fall inside it)."""

    def __init__(self, url: str, quiet: float = 1.0) -> None:
        self._url, self._quiet = url, quiet

    def look(self) -> tuple[tuple[float, float], bool]:
        """((source, target) reconciles so far, idle), from one scrape (nothing yet, and not
        idle, while the process does not answer)."""
        scrape = Scrape.fetch(self._url, timeout=60)
        if scrape is None:
            return (0.0, 0.0), False
        return ((scrape.value("configmirror_reconciles_total", role="source"),
                 scrape.value("configmirror_reconciles_total", role="target")), scrape.idle())

    def wait(self, sources: int, targets: int, timeout: float = 300,
             interval: float = 0.2) -> float:
        """The time.monotonic() at which it went idle (`quiet` seconds before this returns)."""
        quiet: list[tuple[float, tuple[float, float]]] = []  # since when, at which counts

        def done() -> bool:
            counted, idle = self.look()
            if counted[0] < sources or counted[1] < targets or not idle:
                quiet.clear()
                return False
            if not quiet or quiet[0][1] != counted:
                quiet[:] = [(time.monotonic(), counted)]
            return time.monotonic() - quiet[0][0] >= self._quiet
        wait(done, timeout, f"{sources} source and {targets} target reconciles, then idle",
             interval=interval)
        return quiet[0][0]


if __name__ == "__main__":
    main()
