"""A client-go-style work queue: dedup, one worker per key, bounded retries, delayed requeue.

    wq = WorkQueue(max_retries=2)
    wq.add("a"); wq.get()      # -> "a", now processing (in flight)
    wq.add("a")                # arrives mid-processing: only marks "a" dirty
    wq.get()                   # -> None: "a" is in flight, not handed out twice
    wq.done("a")               # worker finished: the pending change requeues "a"
    wq.get()                   # -> "a"

A worker's loop is `get -> work -> forget() or retry() -> done()`. Semantics follow client-go's
`util/workqueue` (queue.go, delaying_queue.go, rate_limiting_queue.go). Delayed items live in
a heap that `get()` consults, so there is no timer thread to own and a FakeClock drives them.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from configmirror.clock import Clock, RealClock
from configmirror.controller.ratelimit import RateLimiter

T = TypeVar("T", bound=Hashable)


class QueueMetrics(Protocol):
    """What a queue reports; `configmirror.metrics.PrometheusQueueMetrics` is the real one."""

    def added(self) -> None:
        """An add() was accepted (not deduplicated away)."""
        ...

    def taken(self, queued_seconds: float) -> None:
        """get() handed out an item that waited `queued_seconds` since its first add."""
        ...

    def finished(self, work_seconds: float) -> None:
        """done() for an item that was in flight for `work_seconds`."""
        ...

    def retried(self) -> None:
        """A requeue through add_after() (retries and delayed adds)."""
        ...

    def observe_in_flight(self, ages: Callable[[], list[float]]) -> None:
        """Register a callback giving the ages of in-flight items, read at scrape time."""
        ...

    def observe_depth(self, depth: Callable[[], int]) -> None:
        """Register a callback giving the number of queued items, read at scrape time."""
        ...


class WorkQueue(Generic[T]):
    """A thread-safe FIFO of keys in which a key is queued once and processed by one worker."""

    def __init__(
        self,
        max_retries: int = 5,
        rate_limiter: RateLimiter | None = None,
        clock: Clock | None = None,
        metrics: QueueMetrics | None = None,
    ) -> None:
        if max_retries < 1:
            raise ValueError(f"max_retries must be at least 1, got {max_retries}")
        self.max_retries = max_retries
        self._rate_limiter = rate_limiter
        self._clock: Clock = clock or RealClock()
        self._metrics = metrics

        self._lock = threading.Lock()
        # Signalled when an item becomes ready (or the queue shuts down); getters wait here.
        self._ready = threading.Condition(self._lock)
        # Signalled when the last in-flight item is done while draining.
        self._idle = threading.Condition(self._lock)
        self._getters = 0  # threads blocked in get(): notify only when someone listens

        # Items ready to hand out, in order. Every element of _queue is in _dirty and not in
        # _processing, and appears in _queue once.
        self._queue: deque[T] = deque()
        # Items that need processing: everything in _queue, plus in-flight items that were
        # added again while being processed (done() requeues those).
        self._dirty: set[T] = set()
        # Items handed out by get() and not yet done(). A key is never in flight twice.
        self._processing: set[T] = set()
        # Failures recorded by retry(), per item, until forget().
        self._failures: dict[T, int] = {}
        # Delayed adds: a heap of (ready_at, seq, item) and the live ready_at per item. An entry
        # whose ready_at differs from _waiting[item] was superseded by an earlier add_after.
        self._heap: list[tuple[float, int, T]] = []
        self._waiting: dict[T, float] = {}
        self._seq = itertools.count()
        # Timestamps kept only when metrics are on, so the default path never reads the clock.
        self._added_at: dict[T, float] = {}
        self._started_at: dict[T, float] = {}

        self._shutting_down = False
        self._draining = False
        if metrics is not None:
            metrics.observe_in_flight(self._in_flight_ages)
            metrics.observe_depth(self.__len__)

    # -- the core: add / get / done -------------------------------------------------------

    def add(self, item: T) -> None:
        """Queue `item` unless it is already pending; if it is in flight, mark it dirty only."""
        with self._lock:
            self._add_locked(item)

    def get(self, timeout: float | None = 0.0) -> T | None:
        """Hand out the next ready item and mark it in flight; None if none is ready in time.

        timeout=0 (default) never blocks, None blocks until an item or shutdown, a number
        blocks at most that many seconds. After shutdown, items still queued are handed out.
        """
        with self._lock:
            if self._heap:
                self._promote_ready()
            if not self._queue and timeout != 0.0 and not self._shutting_down:
                self._wait_for_item(timeout)
            if not self._queue:
                return None
            item = self._queue.popleft()
            self._dirty.discard(item)
            self._processing.add(item)
            if self._metrics is not None:
                now = self._clock.now()
                self._metrics.taken(now - self._added_at.pop(item, now))
                self._started_at[item] = now
            return item

    def done(self, item: T) -> None:
        """Mark `item` finished; if it was added meanwhile, queue it again (also after shutdown)."""
        with self._lock:
            self._processing.discard(item)
            if self._metrics is not None:
                started = self._started_at.pop(item, None)
                if started is not None:
                    self._metrics.finished(self._clock.now() - started)
            if item in self._dirty:
                self._queue.append(item)
                if self._getters:
                    self._ready.notify()
            # A drain waits for in-flight items only: a dirty item requeued above is queued,
            # not in flight, so it must not hold the drain up.
            if not self._processing and self._draining:
                self._idle.notify_all()

    # -- retries ----------------------------------------------------------------------------

    def retry(self, item: T) -> bool:
        """Record a failure of `item`; requeue it (through add) unless it has failed max_retries.

        Returns False when the item is given up: it has now failed `max_retries` times or more.
        """
        with self._lock:
            failures = self._failures.get(item, 0) + 1
            self._failures[item] = failures
        if failures >= self.max_retries:
            return False
        delay = self._rate_limiter.when(item) if self._rate_limiter is not None else 0.0
        if delay > 0:
            self.add_after(item, delay)
        else:
            self.add(item)
        return True

    def forget(self, item: T) -> None:
        """Clear `item`'s failure count (and its rate limiter's)."""
        # Every successful reconcile forgets its key, and almost none has failed: a key with
        # no count needs no lock (a dict lookup is atomic). 32 workers taking the queue's lock
        # here for nothing made it the most contended line of a fan-out.
        if item in self._failures:
            with self._lock:
                self._failures.pop(item, None)
        if self._rate_limiter is not None:
            self._rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """How many failures of `item` retry() has recorded since the last forget()."""
        with self._lock:
            return self._failures.get(item, 0)

    def add_after(self, item: T, seconds: float) -> None:
        """Add `item` after `seconds`; a pending delayed add moves only to an earlier time."""
        with self._lock:
            if self._shutting_down:
                return
            if self._metrics is not None:
                self._metrics.retried()
            if seconds <= 0:
                self._add_locked(item)
                return
            ready_at = self._clock.now() + seconds
            current = self._waiting.get(item)
            if current is not None and current <= ready_at:
                return
            self._waiting[item] = ready_at
            heapq.heappush(self._heap, (ready_at, next(self._seq), item))
            if self._getters:
                self._ready.notify_all()  # a sleeping getter may now need to wake sooner

    # -- shutdown ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop accepting adds and wake every waiter; delayed items are dropped."""
        with self._lock:
            self._shut_down_locked(drain=False)

    def shutdown_with_drain(self, timeout: float | None = None) -> bool:
        """Shut down, then wait until every in-flight item is done. False if `timeout` passed."""
        with self._lock:
            self._shut_down_locked(drain=True)
            drained = self._idle.wait_for(
                lambda: not self._processing or not self._draining, timeout
            )
            return drained and not self._processing

    @property
    def shutting_down(self) -> bool:
        """True once shutdown() or shutdown_with_drain() was called."""
        with self._lock:
            return self._shutting_down

    def __len__(self) -> int:
        """Items queued and ready (in-flight and delayed items are not counted)."""
        with self._lock:
            return len(self._queue)

    def in_flight(self) -> int:
        """Items handed out and not yet done."""
        with self._lock:
            return len(self._processing)

    def delayed(self) -> int:
        """Items waiting in add_after()."""
        with self._lock:
            return len(self._waiting)

    def counts(self) -> tuple[int, int, int]:
        """(queued, in flight, delayed), read together under one lock."""
        with self._lock:
            return len(self._queue), len(self._processing), len(self._waiting)

    # -- internals (the lock is held) -------------------------------------------------------

    def _add_locked(self, item: T) -> None:
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        if self._metrics is not None:
            self._metrics.added()
            self._added_at.setdefault(item, self._clock.now())
        if item in self._processing:
            return
        self._queue.append(item)
        if self._getters:
            self._ready.notify()

    def _promote_ready(self) -> None:
        now = self._clock.now()
        while self._heap and self._heap[0][0] <= now:
            ready_at, _, item = heapq.heappop(self._heap)
            if self._waiting.get(item) == ready_at:
                del self._waiting[item]
                self._add_locked(item)

    def _wait_for_item(self, timeout: float | None) -> None:
        # The timeout is real waiting time; only delayed items follow the injected clock,
        # which wakes this getter when the first of them is due (a FakeClock: when stepped).
        deadline = None if timeout is None else time.monotonic() + timeout
        self._getters += 1
        try:
            while not self._queue and not self._shutting_down:
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return
                self._clock.wait(self._ready, self._heap[0][0] if self._heap else None, wait)
                if self._heap:
                    self._promote_ready()
        finally:
            self._getters -= 1

    def _shut_down_locked(self, drain: bool) -> None:
        self._shutting_down = True
        self._draining = drain
        self._heap.clear()
        self._waiting.clear()
        self._ready.notify_all()
        self._idle.notify_all()

    def _in_flight_ages(self) -> list[float]:
        with self._lock:
            now = self._clock.now()
            return [now - started for started in self._started_at.values()]
