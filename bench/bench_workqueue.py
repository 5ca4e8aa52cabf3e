"""Work-queue throughput against the standard library's queue.Queue, measured side by side.

    python bench/bench_workqueue.py [--items 200000] [--threads 4] [--repeat 5]

Prints cycles per second (add -> get -> done for WorkQueue, put -> get for queue.Queue) for
unique keys and for one hot key, single-threaded and threaded, and the ratio
WorkQueue / queue.Queue (goal: >= 0.8). Then the burst figure: 1,000 adds to one key while it
is in flight must hand it out exactly once more.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time
from collections.abc import Callable

from configmirror.workqueue import WorkQueue


def stdlib_single(keys: list[str]) -> float:
    q: queue.Queue[str] = queue.Queue()
    start = time.perf_counter()
    for key in keys:
        q.put(key)
        q.get()
    return time.perf_counter() - start


def workqueue_single(keys: list[str]) -> float:
    wq: WorkQueue[str] = WorkQueue()
    start = time.perf_counter()
    for key in keys:
        wq.add(key)
        item = wq.get()
        wq.done(item)  # type: ignore[arg-type]
    return time.perf_counter() - start


def stdlib_threaded(keys: list[str], threads: int) -> float:
    q: queue.Queue[str | None] = queue.Queue()

    def consume() -> None:
        while q.get() is not None:
            pass

    return _threaded(keys, threads, q.put, consume, lambda: [q.put(None) for _ in range(threads)])


def workqueue_threaded(keys: list[str], threads: int) -> float:
    wq: WorkQueue[str] = WorkQueue()

    def consume() -> None:
        while (item := wq.get(timeout=None)) is not None:
            wq.done(item)

    return _threaded(keys, threads, wq.add, consume, wq.shutdown_with_drain)


def _threaded(keys: list[str], threads: int, put: Callable[[str], object],
              consume: Callable[[], None], stop: Callable[[], object]) -> float:
    """One producer feeding `threads` consumers; time from the first put to the last get."""
    consumers = [threading.Thread(target=consume) for _ in range(threads)]
    for t in consumers:
        t.start()
    start = time.perf_counter()
    for key in keys:
        put(key)
    stop()
    for t in consumers:
        t.join()
    return time.perf_counter() - start


def burst_extra_handouts(burst: int = 1000) -> int:
    """Add one key `burst` times while it is in flight; count how often it is handed out again."""
    wq: WorkQueue[str] = WorkQueue()
    wq.add("hot")
    item = wq.get()
    for _ in range(burst):
        wq.add("hot")
    wq.done(item)  # type: ignore[arg-type]
    extra = 0
    while (again := wq.get()) is not None:
        extra += 1
        wq.done(again)
    return extra


def best_rate(run: Callable[[], float], n: int, repeat: int) -> float:
    """Cycles per second, taking the median of `repeat` runs."""
    return n / statistics.median(run() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n = args.items
    unique = [f"ns/name-{i}" for i in range(n)]
    hot = ["ns/hot"] * n
    print(f"work queue: {n} cycles per run, median of {args.repeat} runs, "
          f"{args.threads} consumer threads when threaded")
    print(f"{'case':<28}{'queue.Queue /s':>16}{'WorkQueue /s':>16}{'ratio':>8}")
    ratios = []
    for label, keys in (("unique keys", unique), ("hot key", hot)):
        for mode in ("1 thread", f"{args.threads} threads"):
            if mode == "1 thread":
                base = best_rate(lambda k=keys: stdlib_single(k), n, args.repeat)
                ours = best_rate(lambda k=keys: workqueue_single(k), n, args.repeat)
            else:
                base = best_rate(lambda k=keys: stdlib_threaded(k, args.threads), n, args.repeat)
                ours = best_rate(lambda k=keys: workqueue_threaded(k, args.threads), n,
                                 args.repeat)
            ratio = ours / base
            ratios.append(ratio)
            print(f"{label + ', ' + mode:<28}{base:>16,.0f}{ours:>16,.0f}{ratio:>8.2f}")
    print(f"lowest ratio: {min(ratios):.2f} (goal >= 0.80)")
    extra = burst_extra_handouts()
    print(f"burst of 1,000 adds to one in-flight key: handed out {extra} more time(s) "
          f"(goal: exactly 1)")


if __name__ == "__main__":
    main()
