"""The fake clock: time moves when a test steps it, and a step wakes the waiters it makes due."""

from __future__ import annotations

import threading

from configmirror.clock import FakeClock
from configmirror_testing.wait import wait_for


class Sleeper:
    """A thread waiting on the fake clock until `until`, as a work queue's getter does."""

    def __init__(self, clock: FakeClock, until: float) -> None:
        self.cond = threading.Condition()
        self.woke = threading.Event()

        def sleep() -> None:
            with self.cond:
                clock.wait(self.cond, until, timeout=30)
            self.woke.set()

        self.thread = threading.Thread(target=sleep)
        self.thread.start()

    def join(self) -> None:
        with self.cond:
            self.cond.notify_all()  # a sleeper the test did not wake
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


def test_a_step_wakes_the_waiters_it_makes_due_and_no_other() -> None:
    clock = FakeClock(start=0.0)
    soon, later = Sleeper(clock, 5.0), Sleeper(clock, 9.0)
    try:
        wait_for(lambda: clock.wake_times() == [5.0, 9.0], what="both to wait")
        clock.step(5.0)  # exactly due: woken
        assert soon.woke.wait(5)
        wait_for(lambda: clock.wake_times() == [9.0], what="the woken one to leave")
        assert not later.woke.is_set()
        assert clock.now() == 5.0
    finally:
        soon.join()
        later.join()


def test_a_wait_for_a_time_already_reached_returns_at_once() -> None:
    clock = FakeClock(start=10.0)
    cond = threading.Condition()
    with cond:
        clock.wait(cond, 10.0, timeout=None)  # would block forever if it waited
        clock.wait(cond, 3.0, timeout=None)
    assert clock.waiters() == 0


def test_a_wait_with_no_time_is_a_plain_wait_that_the_clock_never_wakes() -> None:
    clock = FakeClock()
    cond = threading.Condition()
    with cond:
        clock.wait(cond, None, timeout=0.01)
    assert clock.waiters() == 0
