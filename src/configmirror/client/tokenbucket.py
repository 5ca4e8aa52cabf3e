"""An overall rate limit as a token bucket (client-go's util/flowcontrol), below both users.

The API client (`kube`) limits every request with it (--kube-api-qps/--kube-api-burst), and the
work queue's default limiter (`ratelimit`) caps the overall retry rate with it: a module of
its own, so the wire does not import the controller layer's limiters.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

from configmirror.clock import Clock, RealClock


class TokenBucketRateLimiter:
    """An overall limit of `qps` with bursts of `burst`, like golang.org/x/time/rate Reserve().

    Every call takes a token; when the bucket is empty the token is borrowed from the future
    and the returned delay says how far. It tracks no items: num_requeues is always 0.
    """

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"token bucket needs qps > 0 and burst >= 1, got {qps}, {burst}")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock or RealClock()
        self._tokens = float(burst)
        self._last = self._clock.now()
        self._lock = threading.Lock()

    def when(self, item: Hashable) -> float:
        with self._lock:
            now = self._clock.now()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def forget(self, item: Hashable) -> None:
        pass

    def num_requeues(self, item: Hashable) -> int:
        return 0
