"""The worker pool with a real WorkQueue and stand-in reconcile functions (no Kubernetes)."""

from __future__ import annotations

import threading
from collections.abc import Hashable

import pytest

from configmirror.controller import Controller, Result, TerminalError
from configmirror.metrics import Metrics
from configmirror.ratelimit import ItemExponentialFailureRateLimiter
from configmirror.workqueue import WorkQueue
from configmirror_testing.wait import wait_for


class RecordingLimiter(ItemExponentialFailureRateLimiter):
    """Exponential backoff that remembers the delays it handed out."""

    def __init__(self) -> None:
        super().__init__(base_delay=0.001, max_delay=1.0)
        self.delays: list[float] = []

    def when(self, item: Hashable) -> float:
        delay = super().when(item)
        self.delays.append(delay)
        return delay


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, {"controller": "test", **labels}) or 0.0


def test_burst_of_edits_during_a_reconcile_yields_exactly_one_more() -> None:
    queue: WorkQueue[str] = WorkQueue()
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def reconcile(key: str) -> Result:
        calls.append(key)
        if len(calls) == 1:
            entered.set()
            release.wait(10)
        return Result()

    controller = Controller("test", queue, reconcile, workers=4)
    controller.start()
    try:
        queue.add("ns/cfg")
        assert entered.wait(10)
        for _ in range(1000):
            queue.add("ns/cfg")
        release.set()
        wait_for(lambda: len(calls) == 2 and queue.in_flight() == 0 and len(queue) == 0,
                 what="the one extra reconcile")
    finally:
        controller.stop(drain_timeout=5)
    assert calls == ["ns/cfg", "ns/cfg"]


def test_always_failing_key_is_attempted_max_retries_times_with_growing_backoff() -> None:
    limiter = RecordingLimiter()
    queue: WorkQueue[str] = WorkQueue(max_retries=5, rate_limiter=limiter)
    attempts: list[str] = []
    given_up: list[str] = []
    metrics = Metrics()

    def reconcile(key: str) -> Result:
        attempts.append(key)
        raise OSError("the cluster said no")

    controller = Controller("test", queue, reconcile, workers=2, metrics=metrics,
                            on_give_up=lambda key, err: given_up.append(key),
                            expected_errors=(OSError,))
    controller.start()
    try:
        queue.add("ns/broken")
        wait_for(lambda: given_up, what="the give-up")
    finally:
        controller.stop(drain_timeout=5)
    assert attempts == ["ns/broken"] * 5
    assert limiter.delays == sorted(limiter.delays) and len(set(limiter.delays)) == 4
    assert given_up == ["ns/broken"]
    assert queue.num_requeues("ns/broken") == 0, "given-up keys are forgotten"
    assert sample(metrics, "configmirror_reconcile_given_up_total") == 1
    assert sample(metrics, "controller_runtime_reconcile_total", result="error") == 5
    assert sample(metrics, "controller_runtime_reconcile_panics_total") == 0


def test_an_exception_does_not_kill_the_pool() -> None:
    queue: WorkQueue[str] = WorkQueue(max_retries=1)
    done: list[str] = []
    metrics = Metrics()

    def reconcile(key: str) -> Result:
        if key.startswith("bug"):
            raise ZeroDivisionError("a bug")
        done.append(key)
        return Result()

    controller = Controller("test", queue, reconcile, workers=2, metrics=metrics)
    controller.start()
    try:
        for i in range(10):
            queue.add(f"bug-{i}")
        for i in range(10):
            queue.add(f"ok-{i}")
        wait_for(lambda: len(done) == 10, what="the good keys")
        assert controller.alive_workers() == 2
    finally:
        controller.stop(drain_timeout=5)
    assert sample(metrics, "controller_runtime_reconcile_panics_total") == 10


def test_terminal_error_is_not_retried() -> None:
    queue: WorkQueue[str] = WorkQueue(max_retries=5)
    attempts: list[str] = []

    def reconcile(key: str) -> Result:
        attempts.append(key)
        raise TerminalError("forbidden")

    controller = Controller("test", queue, reconcile, workers=1)
    controller.start()
    try:
        queue.add("k")
        wait_for(lambda: attempts and queue.in_flight() == 0, what="the attempt")
    finally:
        controller.stop(drain_timeout=5)
    assert attempts == ["k"]


def test_requeue_after_adds_the_key_again_later() -> None:
    queue: WorkQueue[str] = WorkQueue()
    calls: list[str] = []

    def reconcile(key: str) -> Result:
        calls.append(key)
        return Result(requeue_after=0.01) if len(calls) == 1 else Result()

    controller = Controller("test", queue, reconcile, workers=1)
    controller.start()
    try:
        queue.add("k")
        wait_for(lambda: len(calls) == 2, what="the requeue")
    finally:
        controller.stop(drain_timeout=5)


def test_stop_lets_a_slow_reconcile_finish() -> None:
    queue: WorkQueue[str] = WorkQueue()
    entered, finished = threading.Event(), threading.Event()

    def reconcile(key: str) -> Result:
        entered.set()
        threading.Event().wait(0.3)  # stands in for a slow API call
        finished.set()
        return Result()

    controller = Controller("test", queue, reconcile, workers=2)
    controller.start()
    queue.add("slow")
    assert entered.wait(5)
    assert controller.stop(drain_timeout=10) is True
    assert finished.is_set()
    assert controller.alive_workers() == 0


def test_start_twice_is_an_error() -> None:
    controller = Controller("test", WorkQueue[str](), lambda key: Result(), workers=1)
    controller.start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            controller.start()
    finally:
        controller.stop(drain_timeout=5)


def test_stop_starts_no_queued_key_and_finishes_the_one_in_flight() -> None:
    queue: WorkQueue[str] = WorkQueue()
    entered, release = threading.Event(), threading.Event()
    done: list[str] = []

    def reconcile(key: str) -> Result:
        if key == "slow":
            entered.set()
            release.wait(10)
        done.append(key)
        return Result()

    controller = Controller("test", queue, reconcile, workers=1)
    controller.start()
    queue.add("slow")
    assert entered.wait(5)
    for i in range(100):
        queue.add(f"queued-{i}")
    stopper = threading.Thread(target=controller.stop, kwargs={"drain_timeout": 10})
    stopper.start()
    while not queue.shutting_down:
        threading.Event().wait(0.001)
    release.set()
    stopper.join(timeout=10)
    assert done == ["slow"], "a stopping controller must not start queued keys"
