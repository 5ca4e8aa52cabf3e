"""The worker pool with a real WorkQueue and stand-in reconcile functions (no Kubernetes)."""

from __future__ import annotations

import threading
from collections.abc import Hashable

import pytest
from pytest_mock import MockerFixture

from configmirror.client.events import EventRecorder
from configmirror.clock import FakeClock
from configmirror.controller.controller import Controller
from configmirror.controller.ratelimit import ItemExponentialFailureRateLimiter
from configmirror.controller.reconcile import Result, RetryableError, TerminalError
from configmirror.controller.workqueue import WorkQueue
from configmirror.metrics import Metrics
from configmirror.vocabulary import ObjectRef
from configmirror_testing.scrape import controller_sample as sample
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


SOURCE = ObjectRef("ConfigMap", "ns", "src", "uid-1", "7")


def test_always_conflicting_key_is_attempted_max_retries_times_then_reported(
        mocker: MockerFixture) -> None:
    clock = FakeClock()
    limiter = RecordingLimiter()
    queue: WorkQueue[str] = WorkQueue(max_retries=5, rate_limiter=limiter, clock=clock)
    attempts: list[str] = []
    metrics = Metrics()
    recorder = mocker.create_autospec(EventRecorder, instance=True)

    def reconcile(key: str) -> Result:
        attempts.append(key)
        raise RetryableError("409 Conflict", SOURCE)

    controller = Controller("test", queue, reconcile, workers=2, metrics=metrics,
                            recorder=recorder)
    controller.start()
    try:
        queue.add("ns/broken")
        for attempt in range(1, 5):
            # Each retry waits for its backoff: both workers sleep until it is due.
            wait_for(lambda attempt=attempt: len(attempts) == attempt
                     and queue.counts() == (0, 0, 1)
                     and clock.wake_times() == [clock.now() + limiter.delays[-1]] * 2,
                     what=f"attempt {attempt} to back off")
            clock.step(limiter.delays[-1])
        wait_for(lambda: recorder.warning.called, what="the give-up")
        wait_for(lambda: queue.counts() == (0, 0, 0), what="the key to be let go")
    finally:
        controller.stop(drain_timeout=5)
    assert attempts == ["ns/broken"] * 5
    assert limiter.delays == pytest.approx([0.001, 0.002, 0.004, 0.008])
    recorder.warning.assert_called_once_with(
        SOURCE, "ReplicationFailed", "giving up until the next change or resync: 409 Conflict")
    assert queue.num_requeues("ns/broken") == 0, "given-up keys are forgotten"
    assert limiter.num_requeues("ns/broken") == 0, "and so is their backoff"
    assert sample(metrics, "configmirror_reconcile_given_up_total") == 1
    assert sample(metrics, "controller_runtime_reconcile_total", result="error") == 5
    assert sample(metrics, "controller_runtime_reconcile_panics_total") == 0


def test_an_exception_does_not_kill_the_pool(mocker: MockerFixture) -> None:
    queue: WorkQueue[str] = WorkQueue(max_retries=1)
    done: list[str] = []
    metrics = Metrics()
    recorder = mocker.create_autospec(EventRecorder, instance=True)

    def reconcile(key: str) -> Result:
        if key.startswith("bug"):
            raise ZeroDivisionError("a bug")
        done.append(key)
        return Result()

    controller = Controller("test", queue, reconcile, workers=2, metrics=metrics,
                            recorder=recorder)
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
    assert sample(metrics, "controller_runtime_reconcile_errors_total") == 10
    assert not recorder.warning.called, "a bug names no object to tell about it"
    assert sample(metrics, "controller_runtime_reconcile_total", result="error") == 10


def test_terminal_error_is_not_retried_and_its_failures_are_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue(max_retries=5)
    attempts: list[str] = []
    metrics = Metrics()

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if len(attempts) == 1:
            raise RetryableError("conflict")
        raise TerminalError("forbidden")

    controller = Controller("test", queue, reconcile, workers=1, metrics=metrics)
    controller.start()
    try:
        queue.add("k")
        wait_for(lambda: len(attempts) == 2 and queue.in_flight() == 0 and
                 queue.counts() == (0, 0, 0), what="the two attempts")
    finally:
        controller.stop(drain_timeout=5)
    assert attempts == ["k", "k"]
    assert queue.num_requeues("k") == 0
    assert sample(metrics, "controller_runtime_terminal_reconcile_errors_total") == 1


def test_success_forgets_earlier_failures() -> None:
    clock = FakeClock()
    limiter = RecordingLimiter()
    queue: WorkQueue[str] = WorkQueue(max_retries=3, rate_limiter=limiter, clock=clock)
    attempts: list[str] = []

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if len(attempts) in (1, 2, 4, 5):
            raise RetryableError("conflict")
        return Result()

    def retried(count: int) -> None:
        wait_for(lambda: len(attempts) == count and queue.counts() == (0, 0, 1)
                 and clock.wake_times() == [clock.now() + limiter.delays[-1]],
                 what=f"attempt {count} to back off")
        clock.step(limiter.delays[-1])

    controller = Controller("test", queue, reconcile, workers=1)
    controller.start()
    try:
        queue.add("k")
        retried(1)
        retried(2)
        wait_for(lambda: len(attempts) == 3 and queue.counts() == (0, 0, 0),
                 what="the success")
        assert queue.num_requeues("k") == 0
        queue.add("k")  # fails twice more: had the success not forgotten, it would give up
        retried(4)
        retried(5)
        wait_for(lambda: len(attempts) == 6, what="the third attempt of the second change")
    finally:
        controller.stop(drain_timeout=5)
    assert attempts == ["k"] * 6
    # Forgotten by the limiter too: the second change's backoff starts again from the base.
    assert limiter.delays == pytest.approx([0.001, 0.002, 0.001, 0.002])


def test_follow_up_keys_are_queued_and_changes_are_counted_per_worker() -> None:
    queue: WorkQueue[str] = WorkQueue()
    seen: list[str] = []
    metrics = Metrics()

    def reconcile(key: str) -> Result:
        seen.append(key)
        if key == "source":
            return Result(follow_up=tuple(f"target-{i}" for i in range(20)))
        return Result(changed=True)

    controller = Controller("test", queue, reconcile, workers=2, metrics=metrics)
    controller.start()
    try:
        queue.add("source")
        wait_for(lambda: len(seen) == 21, what="the source and its 20 targets")
    finally:
        controller.stop(drain_timeout=5)
    assert sorted(seen) == sorted(["source", *(f"target-{i}" for i in range(20))])
    by_worker = [sample(metrics, "configmirror_worker_changes_total", worker=w) for w in "01"]
    assert sum(by_worker) == 20


def test_requeue_after_adds_the_key_again_after_that_delay_and_not_before() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    calls: list[str] = []
    metrics = Metrics()

    def reconcile(key: str) -> Result:
        calls.append(key)
        return Result(requeue_after=0.5) if len(calls) == 1 else Result()

    controller = Controller("test", queue, reconcile, workers=1, metrics=metrics)
    controller.start()
    try:
        start = clock.now()
        queue.add("k")
        wait_for(lambda: len(calls) == 1 and queue.counts() == (0, 0, 1)
                 and clock.wake_times() == [start + 0.5],
                 what="the worker to wait 0.5 s for the requeue")
        clock.step(0.5)
        wait_for(lambda: len(calls) == 2, what="the requeue, 0.5 s later")
    finally:
        controller.stop(drain_timeout=5)
    assert queue.num_requeues("k") == 0, "a requeue is not a failure"
    assert sample(metrics, "controller_runtime_reconcile_total", result="requeue_after") == 1
    assert sample(metrics, "controller_runtime_reconcile_total", result="success") == 1


def test_requeue_after_zero_is_a_plain_success() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    calls: list[str] = []
    metrics = Metrics()

    def reconcile(key: str) -> Result:
        calls.append(key)
        return Result(requeue_after=0)

    controller = Controller("test", queue, reconcile, workers=1, metrics=metrics)
    controller.start()
    try:
        queue.add("k")
        wait_for(lambda: calls and queue.counts() == (0, 0, 0), what="the reconcile")
    finally:
        controller.stop(drain_timeout=5)
    assert calls == ["k"]
    assert sample(metrics, "controller_runtime_reconcile_total", result="success") == 1


def test_active_workers_and_reconcile_time_are_reported() -> None:
    queue: WorkQueue[str] = WorkQueue()
    entered, release = threading.Event(), threading.Event()
    metrics = Metrics()

    def reconcile(key: str) -> Result:
        entered.set()
        release.wait(10)
        return Result()

    controller = Controller("test", queue, reconcile, workers=3, metrics=metrics)
    assert sample(metrics, "controller_runtime_max_concurrent_reconciles") == 3
    assert metrics.registry.get_sample_value(
        "controller_runtime_active_workers", {"controller": "test"}) == 0, "a 0, not absent"
    controller.start()
    try:
        queue.add("k")
        assert entered.wait(5)
        assert sample(metrics, "controller_runtime_active_workers") == 1
        release.set()
        wait_for(lambda: sample(metrics, "controller_runtime_reconcile_time_seconds_count") == 1
                 and sample(metrics, "controller_runtime_active_workers") == 0,
                 what="the reconcile to be timed and its worker to be free")
    finally:
        release.set()
        controller.stop(drain_timeout=5)
    # Not a figure: any real duration is below the test's own timeout (300 s).
    assert 0 < sample(metrics, "controller_runtime_reconcile_time_seconds_sum") < 300


def test_a_pool_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="workers must be at least 1"):
        Controller("test", WorkQueue[str](), lambda key: Result(), workers=0)


def test_stop_lets_a_slow_reconcile_finish() -> None:
    queue: WorkQueue[str] = WorkQueue()
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def reconcile(key: str) -> Result:
        entered.set()
        release.wait(10)  # stands in for a slow API call, which the test ends
        order.append("reconcile finished")
        return Result()

    controller = Controller("test", queue, reconcile, workers=2)
    controller.start()
    queue.add("slow")
    assert entered.wait(5)
    stopped: list[bool] = []

    def stop() -> None:
        stopped.append(controller.stop(drain_timeout=30))
        order.append("stop returned")

    stopper = threading.Thread(target=stop)
    stopper.start()
    try:
        wait_for(lambda: queue.shutting_down, what="the stop to begin")
        release.set()
    finally:
        release.set()
        stopper.join(timeout=20)
    assert not stopper.is_alive()
    assert order == ["reconcile finished", "stop returned"] and stopped == [True]
    assert controller.alive_workers() == 0


def test_stop_reports_work_that_outlives_the_drain_and_returns_within_its_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    queue: WorkQueue[str] = WorkQueue()
    entered, release = threading.Event(), threading.Event()

    def reconcile(key: str) -> Result:
        entered.set()
        release.wait(10)
        return Result()

    controller = Controller("test", queue, reconcile, workers=1)
    controller.start()
    queue.add("stuck")
    assert entered.wait(5)
    try:
        # The drain and the join share the one timeout: stop() does not wait for the
        # reconcile beyond it (a shutdown has one deadline for everything).
        assert controller.stop(drain_timeout=0.2) is False
        assert "in-flight work did not finish within" in caplog.text
        assert controller.alive_workers() == 1, "the worker is still in its reconcile"
    finally:
        release.set()
    wait_for(lambda: controller.alive_workers() == 0,
             what="the worker to end once its reconcile does")


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
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(controller.stop(drain_timeout=10)))
    stopper.start()
    try:
        wait_for(lambda: queue.shutting_down, what="the stop to begin")
    finally:
        release.set()
        stopper.join(timeout=20)
    assert not stopper.is_alive()
    assert done == ["slow"], "a stopping controller must not start queued keys"
    assert stopped == [True], "the keys it did not start are let go, not left in flight"
    assert controller.alive_workers() == 0


def test_every_failure_counter_is_there_at_0_before_the_first_failure() -> None:
    # An alert's increase() sees no first step of a series that starts at its first failure.
    metrics = Metrics()
    Controller("test", WorkQueue(), lambda key: Result(), workers=1, metrics=metrics)
    for name in ("controller_runtime_reconcile_errors_total",
                 "controller_runtime_reconcile_panics_total",
                 "controller_runtime_terminal_reconcile_errors_total",
                 "configmirror_reconcile_given_up_total"):
        assert metrics.registry.get_sample_value(name, {"controller": "test"}) == 0, name
