"""Time, injected: production code asks a Clock, tests step a FakeClock and never sleep."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """A monotonic clock in seconds."""

    def now(self) -> float: ...


class RealClock:
    """The process's monotonic clock."""

    def now(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when a test steps it."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def step(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
