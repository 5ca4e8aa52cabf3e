"""Rate limiters for the work queue's retries, ported from client-go's default_rate_limiters.go.

A limiter answers "how long should this item wait before its next attempt?" and counts
failures per item until `forget()`.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Protocol

from configmirror.backoff import Backoff
from configmirror.client.tokenbucket import TokenBucketRateLimiter
from configmirror.clock import Clock


class RateLimiter(Protocol):
    """Decides the delay before an item's next attempt."""

    def when(self, item: Hashable) -> float:
        """Record a failure of `item` and return the seconds to wait before retrying it."""
        ...

    def forget(self, item: Hashable) -> None:
        """Stop tracking `item` (it succeeded or was given up)."""
        ...

    def num_requeues(self, item: Hashable) -> int:
        """How many failures of `item` are on record."""
        ...


class _PerItemFailures:
    """Failure counts per item, shared by the per-item limiters."""

    def __init__(self) -> None:
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def _record(self, item: Hashable) -> int:
        """Count one more failure of `item`; return how many there were before it."""
        with self._lock:
            before = self._failures.get(item, 0)
            self._failures[item] = before + 1
            return before

    def forget(self, item: Hashable) -> None:
        if item in self._failures:  # the common case, no failures: no lock (an atomic lookup)
            with self._lock:
                self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class ItemExponentialFailureRateLimiter(_PerItemFailures):
    """base * 2**failures per item, capped at `max_delay` (client-go: 5 ms base, 1000 s cap)."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        super().__init__()
        self._curve = Backoff(base_delay, max_delay)

    def when(self, item: Hashable) -> float:
        return self._curve.at(self._record(item))


class ItemFastSlowRateLimiter(_PerItemFailures):
    """`fast_delay` for the first `max_fast_attempts` failures of an item, then `slow_delay`."""

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        super().__init__()
        self._fast = fast_delay
        self._slow = slow_delay
        self._max_fast = max_fast_attempts

    def when(self, item: Hashable) -> float:
        return self._fast if self._record(item) < self._max_fast else self._slow


class MaxOfRateLimiter:
    """Asks every limiter (so each one records the failure) and returns the longest delay."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, item: Hashable) -> float:
        return max([limiter.when(item) for limiter in self._limiters])

    def forget(self, item: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


class WithMaxWaitRateLimiter:
    """Caps another limiter's delay at `max_wait`."""

    def __init__(self, limiter: RateLimiter, max_wait: float) -> None:
        self._limiter = limiter
        self._max_wait = max_wait

    def when(self, item: Hashable) -> float:
        return min(self._limiter.when(item), self._max_wait)

    def forget(self, item: Hashable) -> None:
        self._limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return self._limiter.num_requeues(item)


def default_controller_rate_limiter(clock: Clock | None = None) -> RateLimiter:
    """client-go's DefaultTypedControllerRateLimiter: per-item 5 ms..1000 s, overall 10 qps/100."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        TokenBucketRateLimiter(qps=10.0, burst=100, clock=clock),
    )
