"""An overloaded server (API Priority and Fairness: 429 with Retry-After) through the
controller: a key the server told when to come back is retried then, by itself, never
counted toward giving up, and opens no outage (no probe, no waiting keys, no log lines)."""

from __future__ import annotations

import logging

import pytest

from configmirror.clock import FakeClock
from configmirror.controller import RETRY_AFTER_FLOOR, Controller
from configmirror.reconcile import Result, ServerUnavailable
from configmirror.workqueue import WorkQueue
from configmirror_testing.wait import wait_for
from tests.unit.test_controller import FixedBackoff


def controller_for(clock: FakeClock, attempts: list[str], refusals: dict[str, list[float]],
                   max_retries: int = 5) -> tuple[Controller[str], WorkQueue[str]]:
    """A one-worker controller whose reconcile answers key k with 429 and each Retry-After
    in refusals[k] in turn, then succeeds."""
    queue: WorkQueue[str] = WorkQueue(clock=clock, max_retries=max_retries)

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if refusals.get(key):
            raise ServerUnavailable("429 Too Many Requests", retry_after=refusals[key].pop(0))
        return Result()

    return Controller("test", queue, reconcile, workers=1, clock=clock,
                      server_backoff=FixedBackoff(60.0)), queue


def test_a_key_told_when_to_retry_is_retried_then_by_itself(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    attempts: list[str] = []
    controller, queue = controller_for(clock, attempts, {"told": [5.0]})
    controller.start()
    try:
        with caplog.at_level(logging.INFO, logger="configmirror.controller"):
            queue.add("told")
            wait_for(lambda: clock.wake_times() == [1005.0], what="a wait of its 5 s")
            assert controller.waiting_for_server() == 0, "no outage: the server answered"
            queue.add("other")
            wait_for(lambda: attempts == ["told", "other"], what="the other key, at once")
            clock.step(4.9)
            assert attempts == ["told", "other"], "not before its Retry-After"
            clock.step(0.1)
            wait_for(lambda: attempts == ["told", "other", "told"], what="the retry at 5 s")
        assert [r.getMessage() for r in caplog.records] == [], "no outage to log"
    finally:
        controller.stop(drain_timeout=5)


def test_a_retry_after_of_0_still_waits_the_floor() -> None:
    clock = FakeClock()
    attempts: list[str] = []
    controller, queue = controller_for(clock, attempts, {"k": [0.0]})
    controller.start()
    try:
        queue.add("k")
        wait_for(lambda: clock.wake_times() == [1000.0 + RETRY_AFTER_FLOOR],
                 what="a wait of the floor, not a hot loop")
        clock.step(RETRY_AFTER_FLOOR)
        wait_for(lambda: attempts == ["k", "k"], what="the retry")
    finally:
        controller.stop(drain_timeout=5)


def test_retry_afters_never_count_toward_giving_up() -> None:
    clock = FakeClock()
    attempts: list[str] = []
    controller, queue = controller_for(clock, attempts, {"k": [1.0] * 4}, max_retries=1)
    controller.start()
    try:
        queue.add("k")
        for tries in range(2, 6):
            wait_for(lambda: clock.waiters() == 1, what="the wait for the next try")
            clock.step(1.0)
            wait_for(lambda tries=tries: attempts.count("k") == tries,
                     what=f"try {tries}")
        wait_for(lambda: queue.counts() == (0, 0, 0), what="the key done")
        assert queue.num_requeues("k") == 0
    finally:
        controller.stop(drain_timeout=5)
