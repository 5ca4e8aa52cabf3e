"""One way to wait: poll a condition until it holds or a deadline passes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold in time; the message names it and its last value."""


def wait_for(check: Callable[[], T], timeout: float = 10.0, what: str = "condition",
             interval: float = 0.05, abort: Callable[[], str | None] | None = None) -> T:
    """Poll `check()` until it returns something truthy, and return that.

    Polls at once, then after 1 ms, 2 ms, ... up to every `interval` seconds: a condition
    about to hold (a worker thread's next step) costs milliseconds, a slow one few polls.
    Raises WaitTimeout after `timeout` seconds, or at once when `abort()` returns a reason
    (a process that died, say), so a failure says why instead of waiting out the deadline.
    """
    deadline = time.monotonic() + timeout
    pause = min(0.001, interval)
    while True:
        value = check()
        if value:
            return value
        if abort is not None and (reason := abort()):
            raise WaitTimeout(f"gave up waiting for {what}: {reason}")
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what} "
                              f"(last: {value!r})")
        time.sleep(pause)
        pause = min(pause * 2, interval)
