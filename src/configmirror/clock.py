"""Time, injected: production code asks a Clock, tests step a FakeClock and never sleep.

A thread that must wake at a time of the clock (the work queue's getter, waiting for a
delayed item) waits through `Clock.wait`: the real clock turns the time into a timeout, the
fake clock wakes the thread when a test steps it that far (client-go's fake clock does the
same for its timers).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """A monotonic clock in seconds."""

    def now(self) -> float: ...

    def wait(self, cond: threading.Condition, until: float | None,
             timeout: float | None) -> None:
        """Wait on `cond` (its lock held) until it is notified, this clock reaches `until`,
        or `timeout` real seconds pass; None means no such bound. May wake early."""
        ...


class RealClock:
    """The process's monotonic clock."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, cond: threading.Condition, until: float | None,
             timeout: float | None) -> None:
        if until is not None:
            left = max(until - time.monotonic(), 0.0)
            timeout = left if timeout is None else min(timeout, left)
        cond.wait(timeout)


class FakeClock:
    """A clock that moves only when a test steps it; a step wakes the waiters whose time came."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        # Threads in wait() with a time to wake at: (until, their condition), one entry each.
        self._waiters: list[tuple[float, threading.Condition]] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def step(self, seconds: float) -> None:
        """Move the clock on and wake every waiter whose time has come."""
        with self._lock:
            self._now += seconds
            due = {id(cond): cond for until, cond in self._waiters if until <= self._now}
        # Outside our lock: a waiter holds its condition's lock while it asks for now().
        # It registered under that lock, so it is already waiting when this gets the lock.
        for cond in due.values():
            with cond:
                cond.notify_all()

    def waiters(self) -> int:
        """Threads waiting for a time of this clock: a test steps once they are waiting."""
        with self._lock:
            return len(self._waiters)

    def wake_times(self) -> list[float]:
        """The times the waiting threads wait for, earliest first."""
        with self._lock:
            return sorted(until for until, _ in self._waiters)

    def wait(self, cond: threading.Condition, until: float | None,
             timeout: float | None) -> None:
        if until is None:
            cond.wait(timeout)
            return
        entry = (until, cond)
        with self._lock:
            if until <= self._now:
                return
            self._waiters.append(entry)
        try:
            cond.wait(timeout)
        finally:
            with self._lock:
                self._waiters.remove(entry)
