"""A restart and a resync of the whole operator process, in instructions, by valgrind.

    python bench/bench_restart_instructions.py --sources 20 --namespaces 500 --base DIR

`bench_restart.py` times restarts and resyncs in CPU seconds, and on a shared machine those
move with the machine's pace by more than a third from one minute to the next (the same tree's
CPU to idle ranged 9.6-14.9 s over three rounds). This counts them: one converged cluster of
SOURCES x NAMESPACES replicas, then each tree's operator started on it under valgrind
(callgrind) with `--resync-period RESYNC`, and the instructions of every thread counted in two
windows:
  - restart: from the process's start to idle (every source planned, nothing left to do, the
    operator's counts unchanged for three seconds), imports and the first lists included;
  - resync: from there to the end of the first resync (every source planned again, and idle
    as above), per key in the cache.
Both include what serving the benchmark's /metrics scrapes costs (one a second). The count
still depends a little on timing (what the threads do while they wait); TLS handshakes in each
window are counted and printed. With `--base DIR` (a checkout of other code, e.g. a worktree
of d0c25a1) the trees alternate, DIR/src first on the operator's path.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench_process_instructions import callgrind_operator, callgrind_totals, dump, trees_of
from bench_restart import Reconciled
from configmirror_testing.controlplane import free_port
from configmirror_testing.scrape import Scrape
from harness import Session, load_average, save, wait

SOURCE_NS = "configmirror-bench-sources"
QUIET = 3.0  # seconds idle, with unchanged counts, before a window is closed


def one_arm(session: Session, src: str, sources: int, resync: int, out: Path
            ) -> dict[str, float]:
    """One operator of `src` under callgrind on the converged cluster: both windows."""
    metrics, health = free_port(), free_port()
    proc = callgrind_operator(session, src, out, out / "operator.log", metrics, health,
                              "--resync-period", str(resync))
    reconciled = Reconciled(f"http://127.0.0.1:{metrics}/metrics", quiet=QUIET)
    started = time.monotonic()
    try:
        # Every source planned once (start-up), then again (the first resync), each time
        # followed by QUIET seconds idle.
        reconciled.wait(sources, 0, timeout=3600, interval=1)
        restart_dump = dump(proc, out, 1)
        seconds = time.monotonic() - started
        reconciled.wait(2 * sources, 0, timeout=3600, interval=1)
        resync_dump = dump(proc, out, 2)
        writes = Scrape.fetch(f"http://127.0.0.1:{metrics}/metrics", timeout=60)
    finally:
        proc.terminate()
        proc.wait(300)
    (r_total, r_shakes, _), (s_total, s_shakes, _) = (callgrind_totals(d)
                                                      for d in (restart_dump, resync_dump))
    return {"restart": r_total, "restart_handshakes": r_shakes, "resync": s_total,
            "resync_handshakes": s_shakes, "restart_seconds": seconds,
            "writes": writes.value("configmirror_replica_writes_total") if writes
            else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=20)
    parser.add_argument("--namespaces", type=int, default=500)
    parser.add_argument("--resync", type=int, default=150,
                        help="--resync-period, seconds (valgrind makes a start-up slow)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--base", help="a checkout of the code to compare with")
    args = parser.parse_args()
    trees = trees_of(args.base)
    keys = args.sources * args.namespaces + args.sources
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
    with Session(None) as session, tempfile.TemporaryDirectory() as scratch:
        cluster = session.cluster
        cluster.namespaces(SOURCE_NS, 1)
        cluster.namespaces("bench", args.namespaces)
        cluster.create_sources(f"{SOURCE_NS}-000", args.sources, "bench-*")
        operator = session.operator(32)
        operator.wait_ready(120)
        wait(lambda: session.watcher.live() >= args.sources * args.namespaces, 900,
             "the replicas")
        session.idle(operator, 300)
        assert operator.stop() == 0
        print(f"restart and resync, {args.sources} x {args.namespaces}, instructions "
              f"(valgrind); {load_average()}")
        for run in range(args.rounds):
            for label, src in (trees if run % 2 == 0 else trees[::-1]):
                got = one_arm(session, src, args.sources, args.resync,
                              Path(scratch) / f"{run}-{label.replace(' ', '-')}")
                runs[label].append(got)
                print(f"  run {run + 1} {label:9s} restart {got['restart'] / 1e9:6.3f} G "
                      f"({got['restart_handshakes']:.0f} TLS handshakes), resync "
                      f"{got['resync'] / 1e9:6.3f} G ({got['resync'] / keys / 1000:.1f} "
                      f"thousand per key, {got['resync_handshakes']:.0f} handshakes); "
                      f"{got['writes']:.0f} writes", flush=True)
    if args.base:
        for window in ("restart", "resync"):
            ours, base = (sum(r[window] for r in runs[label]) for label in ("this tree", "base"))
            print(f"  this tree / base, {window}, over {args.rounds} rounds: {ours / base:.2f}")
    save(f"restart-instructions-{args.sources}x{args.namespaces}", {
        "sources": args.sources, "namespaces": args.namespaces, "resync": args.resync,
        "runs": runs, "trees": dict(trees)})


if __name__ == "__main__":
    main()
