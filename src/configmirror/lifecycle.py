"""Components: the parts of the operator that own threads, and one deadline to stop them all.

Like controller-runtime's manager, which runs the Runnables given to it with Add and gives
them all one graceful-shutdown timeout: a component is started once and stopped once, within
the seconds it is given; `Components` starts them in order, stops them in reverse, each with
what is left of one deadline, and names in one log line every one that did not stop in time.
A component's thread is an `OwnedThread`: named, never a daemon, joined within a timeout.

A leaf: it imports nothing of configmirror but the clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from configmirror.clock import Clock, RealClock

log = logging.getLogger(__name__)


class Deadline:
    """A time of `clock`, `seconds` from now, and what is left of it."""

    def __init__(self, seconds: float, clock: Clock | None = None) -> None:
        self._clock = clock or RealClock()
        self.at = self._clock.now() + seconds

    def left(self) -> float:
        """Seconds until the deadline; 0 once it has passed."""
        return max(self.at - self._clock.now(), 0.0)


class Component(Protocol):
    """What the manager runs: started once, then stopped once within a timeout."""

    def start(self) -> None:
        """Start its threads and return."""
        ...

    def stop(self, timeout: float, /) -> bool:
        """Tell its threads to end and join them, all within `timeout` seconds (0: only tell
        them); True when every one has ended."""
        ...


class OwnedThread:
    """One named thread of a component: started once, told to end by its owner (each owner
    has its own signal), joined within a timeout. Never a daemon: a thread that outlives its
    join is named by its owner, not left to die unseen with the process."""

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=target, name=name, daemon=False)

    @property
    def name(self) -> str:
        return self._thread.name

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for it to end; True once it has (or never started)."""
        if self._thread.ident is None:
            return True
        self._thread.join(max(timeout, 0.0))
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread.is_alive()


def join(threads: Iterable[OwnedThread | None], timeout: float) -> bool:
    """Join every thread (None: one never made) within `timeout` seconds in all; True when
    every one has ended."""
    deadline = Deadline(timeout)
    ended = True
    for thread in threads:
        if thread is not None:
            ended = thread.join(deadline.left()) and ended
    return ended


def lingering() -> list[str]:
    """The threads other than this one that would keep the interpreter from exiting."""
    current = threading.current_thread()
    return [t.name for t in threading.enumerate()
            if t is not current and not t.daemon]  # enumerate() lists the living only


class Components:
    """Components in the order they started; `stop` stops them in reverse, within one
    deadline of `clock`."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or RealClock()
        self._started: list[tuple[str, Component, float]] = []

    def start(self, name: str, component: Component, leave: float = 0.0) -> None:
        """Start `component`. When stopped, it gets what is left of the deadline but `leave`
        seconds, kept for the components stopped after it."""
        # Listed first: a start that fails half-way has threads to stop too.
        self._started.append((name, component, leave))
        component.start()

    def names(self) -> list[str]:
        """The components started and not yet stopped, in the order they started."""
        return [name for name, _, _ in self._started]

    def stop(self, timeout: float) -> list[str]:
        """Stop every started component, the last started first, all within `timeout`
        seconds: each gets what is left (one the deadline has passed is still told to
        stop). Returns the names of those that did not stop, which one log line gives."""
        deadline = Deadline(timeout, self._clock)
        late: list[str] = []
        unwaited: list[str] = []  # told to stop with none of the deadline left to wait
        while self._started:
            name, component, leave = self._started.pop()
            given = max(deadline.left() - leave, 0.0)
            try:
                stopped = component.stop(given)
            except Exception:
                log.exception("stopping %s failed", name)
                stopped = False
            if not stopped:
                late.append(name)
                if given == 0:
                    unwaited.append(name)
        if late:
            log.error("shutdown: %s did not stop within %.0f s (%sthreads still running: %s); "
                      "exiting without them", ", ".join(late), timeout,
                      f"no time was left to wait for {', '.join(unwaited)}; " if unwaited
                      else "", ", ".join(lingering()) or "none")
        return late
