"""Work-queue throughput against the standard library's queue.Queue, measured side by side.

    python bench/bench_workqueue.py [--items 200000] [--threads 4] [--repeat 5]

Prints cycles per second (add -> get -> done for WorkQueue, put -> get for queue.Queue) for
unique keys and for one hot key, in one thread and in 4 threads each running cycles, and the
ratio WorkQueue / queue.Queue (goal: >= 0.8). Also the operator's shape, one producer feeding
4 consumers, reported beside the goal. Then the burst figure: 1,000 adds to one key while it
is in flight must hand it out exactly once more.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time
from collections.abc import Callable

from configmirror.controller.workqueue import WorkQueue


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
    """`threads` threads, each running put -> get cycles on its share of the keys."""
    q: queue.Queue[str] = queue.Queue()

    def cycle(share: list[str]) -> None:
        for key in share:
            q.put(key)
            q.get()

    return _in_threads(keys, threads, cycle)


def workqueue_threaded(keys: list[str], threads: int) -> float:
    """`threads` threads, each running add -> get -> done cycles on its share of the keys."""
    wq: WorkQueue[str] = WorkQueue()

    def cycle(share: list[str]) -> None:
        for key in share:
            wq.add(key)
            item = wq.get()
            if item is not None:  # None: another thread has this (hot) key in flight
                wq.done(item)

    return _in_threads(keys, threads, cycle)


def _in_threads(keys: list[str], threads: int, cycle: Callable[[list[str]], None]) -> float:
    shares = [keys[i::threads] for i in range(threads)]
    pool = [threading.Thread(target=cycle, args=(share,)) for share in shares]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - start


def stdlib_pipeline(keys: list[str], threads: int) -> float:
    """One producer feeding `threads` consumers (the operator's shape: informers -> workers)."""
    q: queue.Queue[str | None] = queue.Queue()

    def consume() -> None:
        while q.get() is not None:
            pass

    return _pipeline(keys, threads, q.put, consume, lambda: [q.put(None) for _ in range(threads)])


def workqueue_pipeline(keys: list[str], threads: int) -> float:
    wq: WorkQueue[str] = WorkQueue()

    def consume() -> None:
        while (item := wq.get(timeout=None)) is not None:
            wq.done(item)

    return _pipeline(keys, threads, wq.add, consume, wq.shutdown_with_drain)


def _pipeline(keys: list[str], threads: int, put: Callable[[str], object],
              consume: Callable[[], None], stop: Callable[[], object]) -> float:
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


def paired(base: Callable[[], float], ours: Callable[[], float], n: int,
           repeat: int) -> tuple[float, float, float]:
    """Run baseline and ours back to back `repeat` times, so drift on a shared machine hits
    both alike. Returns (median baseline rate, median our rate, median per-pair ratio)."""
    pairs = [(base(), ours()) for _ in range(repeat)]
    return (n / statistics.median(b for b, _ in pairs),
            n / statistics.median(o for _, o in pairs),
            statistics.median(b / o for b, o in pairs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n = args.items
    unique = [f"ns/name-{i}" for i in range(n)]
    hot = ["ns/hot"] * n
    print(f"work queue: {n} cycles per run, median of {args.repeat} paired runs, "
          f"{args.threads} threads when threaded")
    print(f"{'case':<28}{'queue.Queue /s':>16}{'WorkQueue /s':>16}{'ratio':>8}")
    ratios = []
    for label, keys in (("unique keys", unique), ("hot key", hot)):
        for threads in (1, args.threads):
            mode = "1 thread" if threads == 1 else f"{threads} threads"
            if threads == 1:
                cases = (lambda k=keys: stdlib_single(k), lambda k=keys: workqueue_single(k))
            else:
                cases = (lambda k=keys, t=threads: stdlib_threaded(k, t),
                         lambda k=keys, t=threads: workqueue_threaded(k, t))
            base, ours, ratio = paired(*cases, n, args.repeat)
            ratios.append(ratio)
            print(f"{label + ', ' + mode:<28}{base:>16,.0f}{ours:>16,.0f}{ratio:>8.2f}")
    print(f"lowest ratio: {min(ratios):.2f} (goal >= 0.80)")
    base, ours, ratio = paired(lambda: stdlib_pipeline(unique, args.threads),
                               lambda: workqueue_pipeline(unique, args.threads), n, args.repeat)
    print(f"{'pipeline, 1 -> ' + str(args.threads) + ' threads':<28}{base:>16,.0f}{ours:>16,.0f}"
          f"{ratio:>8.2f}  (one producer, {args.threads} consumers: done() is a third "
          f"lock round-trip per item that put/get does not have)")
    extra = burst_extra_handouts()
    print(f"burst of 1,000 adds to one in-flight key: handed out {extra} more time(s) "
          f"(goal: exactly 1)")


if __name__ == "__main__":
    main()
