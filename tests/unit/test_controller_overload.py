"""An overloaded server (API Priority and Fairness: 429 with Retry-After) through the
controller's outage gate: a key the server told to come back later is released at that time,
not at once with the others; and its many short outages are logged at most once a minute."""

from __future__ import annotations

import logging
import threading

import pytest

from configmirror.clock import FakeClock
from configmirror.controller import OUTAGE_LOG_PERIOD, Controller
from configmirror.reconcile import Result, ServerUnavailable
from configmirror.workqueue import WorkQueue
from configmirror_testing.wait import wait_for
from tests.unit.test_controller import FixedBackoff


def test_a_key_told_to_retry_later_is_released_then_and_the_others_at_once() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    attempts: list[str] = []
    refused = threading.Event()
    refused.set()

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if refused.is_set():
            raise ServerUnavailable("429", retry_after=5.0 if key == "told" else None)
        return Result()

    controller = Controller("test", queue, reconcile, workers=1, clock=clock,
                            server_backoff=FixedBackoff(60.0))
    controller.start()
    try:
        queue.add("told")   # the probe: waits max(60 s backoff, 5 s)
        queue.add("other")  # waits for the probe's answer
        wait_for(lambda: controller.waiting_for_server() == 2, what="both keys to wait")
        refused.clear()
        clock.step(1.0)
        controller.server_answered()
        wait_for(lambda: attempts.count("other") == 2, what="the other key, at once")
        assert attempts.count("told") == 1, "not before its Retry-After"
        wait_for(lambda: clock.wake_times() == [1005.0],
                 what="the told key due 5 s after its 429, not 60 s")
        clock.step(4.0)
        wait_for(lambda: attempts.count("told") == 2, what="the told key at its time")
        assert controller.waiting_for_server() == 0
    finally:
        controller.stop(drain_timeout=5)


def test_many_short_outages_are_logged_at_most_once_a_minute(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    refused = threading.Event()

    def reconcile(key: str) -> Result:
        if refused.is_set():
            raise ServerUnavailable("429 Too Many Requests")
        return Result()

    controller = Controller("test", queue, reconcile, workers=1, clock=clock,
                            server_backoff=FixedBackoff(60.0))
    controller.start()

    def outage(name: str) -> None:
        refused.set()
        queue.add(name)
        # (>= 1: the earlier probes' own retries come due too once the clock has moved on)
        wait_for(lambda: controller.waiting_for_server() >= 1, what=f"{name} to wait")
        refused.clear()
        controller.server_answered()
        wait_for(lambda: controller.waiting_for_server() == 0 and queue.counts()[:2] == (0, 0),
                 what=f"{name} released")

    try:
        with caplog.at_level(logging.INFO, logger="configmirror.controller"):
            for i in range(5):
                outage(f"k{i}")
                clock.step(1.0)
            lines = [r.getMessage() for r in caplog.records]
            assert len(lines) == 2, lines  # the first outage: its warning and its end
            assert "does not answer" in lines[0] and "answers again" in lines[1]
            clock.step(OUTAGE_LOG_PERIOD)
            outage("later")
            lines = [r.getMessage() for r in caplog.records]
            assert len(lines) == 4, lines
            assert "4 shorter outage(s) since the last such line" in lines[2]
    finally:
        controller.stop(drain_timeout=5)
