"""The server gate: keys that meet an API server that does not answer wait for it, uncounted,
while one of them probes; any answer releases them (a real WorkQueue and Controller, stand-in
reconcile functions, no Kubernetes)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest

from configmirror.clock import FakeClock
from configmirror.controller import Controller
from configmirror.metrics import Metrics
from configmirror.reconcile import Result, RetryableError, ServerUnavailable, TerminalError
from configmirror.servergate import ServerBackoff, ServerGate
from configmirror.workqueue import WorkQueue
from configmirror_testing.wait import wait_for
from tests.unit.test_controller import sample


def gated(queue: WorkQueue[str], reconcile: Callable[[str], Result], workers: int,
          clock: FakeClock | None, backoff: ServerBackoff, metrics: Metrics | None = None
          ) -> tuple[Controller[str], ServerGate[str]]:
    """A controller whose reconciler is `reconcile` behind a gate, as the manager wires it."""
    gate = ServerGate("test", reconcile, queue.add, clock, backoff)
    return Controller("test", queue, gate.reconcile, workers, metrics), gate


class FixedBackoff(ServerBackoff):
    def __init__(self, delay: float) -> None:
        super().__init__(delay, delay)


class FixedRandom(random.Random):
    """A random source that always says `value`."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


def test_server_backoff_doubles_from_a_quarter_second_to_30_s_jittered_by_a_tenth() -> None:
    backoff = ServerBackoff(rng=FixedRandom(0.5))
    bases = [0.25, 0.5, 1, 2, 4, 8, 16, 30, 30]
    assert [backoff.next() for _ in bases] == pytest.approx(
        [min(base * 1.05, 30.0) for base in bases])
    backoff.reset()
    assert backoff.next() == pytest.approx(0.25 * 1.05)


def test_an_unavailable_server_never_gives_a_key_up_and_one_key_probes_it() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(max_retries=2, clock=clock)
    attempts: list[str] = []
    written: list[str] = []
    down = threading.Event()
    down.set()

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if down.is_set():
            raise ServerUnavailable("connection refused")
        written.append(key)
        return Result(changed=True)

    metrics = Metrics()
    controller, gate = gated(queue, reconcile, 2, clock, FixedBackoff(5.0), metrics)
    controller.start()
    try:
        for key in ("a", "b", "c"):
            queue.add(key)
        for probes in range(1, 6):  # the probe, five times: well past --max-retries (2)
            wait_for(lambda probes=probes: len(attempts) == 2 + probes
                     and gate.waiting() == 3
                     and queue.counts() == (0, 0, 1)
                     and clock.wake_times() == [clock.now() + 5.0] * 2,
                     what=f"probe {probes} to wait for its backoff")
            clock.step(5.0)
        wait_for(lambda: len(attempts) == 8 and queue.counts() == (0, 0, 1),
                 what="the sixth probe")
        assert sorted(attempts.count(k) for k in "abc") == [1, 1, 6], \
            f"one key probes, the others wait: {attempts}"
        # Not the keys' fault: to the controller, the probe is a requeue-after and the others
        # are done (they wait out of the queue); nothing is an error.
        assert sample(metrics, "controller_runtime_reconcile_errors_total") == 0
        assert sample(metrics, "controller_runtime_reconcile_total", result="requeue_after") == 6
        assert sample(metrics, "configmirror_reconcile_given_up_total") == 0
        down.clear()
        clock.step(5.0)
        wait_for(lambda: sorted(written) == ["a", "b", "c"],
                 what="every waiting key to be released once the probe gets through")
        assert gate.waiting() == 0
    finally:
        controller.stop(drain_timeout=5)


def test_server_answered_releases_waiting_keys_at_once() -> None:
    # The queue's clock is never stepped: the probe never fires, only the answer can help.
    # The controller keeps its own (real) clock: it only times the outage for the log.
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    attempts: list[str] = []
    down = threading.Event()
    down.set()

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if down.is_set():
            raise ServerUnavailable("503")
        return Result()

    controller, gate = gated(queue, reconcile, 1, None, FixedBackoff(30.0))
    controller.start()
    try:
        queue.add("a")
        queue.add("b")
        wait_for(lambda: gate.waiting() == 2, what="both keys to wait")
        assert gate.in_outage()
        down.clear()
        gate.answered()  # as an informer that reconnects says
        assert not gate.in_outage()
        wait_for(lambda: attempts.count("a") == 2 and attempts.count("b") == 2,
                 what="both keys retried")
        assert gate.waiting() == 0
    finally:
        controller.stop(drain_timeout=5)


def test_a_probe_that_finds_nothing_to_write_releases_the_waiting_keys() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    attempts: list[str] = []
    down = threading.Event()
    down.set()

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if down.is_set():
            raise ServerUnavailable("connection refused")
        return Result()  # in sync: nothing written, but the server answered

    controller, gate = gated(queue, reconcile, 1, clock, FixedBackoff(5.0))
    controller.start()
    try:
        queue.add("a")
        queue.add("b")
        wait_for(lambda: gate.waiting() == 2 and queue.counts() == (0, 0, 1)
                 and clock.wake_times() == [clock.now() + 5.0],
                 what="one key to probe, the other to wait")
        down.clear()
        clock.step(5.0)
        wait_for(lambda: attempts.count("a") == 2 and attempts.count("b") == 2,
                 what="the waiting key released by the probe's answer")
        assert gate.waiting() == 0
    finally:
        controller.stop(drain_timeout=5)


@pytest.mark.parametrize("answer", ["a write", "a conflict", "forbidden"])
def test_any_answer_from_the_server_releases_the_keys_waiting_for_it(answer: str) -> None:
    clock = FakeClock()  # never stepped: the probe never fires, only the answer can help
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    attempts: list[str] = []
    down = threading.Event()
    down.set()

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if key == "other":  # a key that reaches the server once it is back
            if answer == "a conflict":
                raise RetryableError("409 Conflict")
            if answer == "forbidden":
                raise TerminalError("403 Forbidden")
            return Result(changed=True)
        if down.is_set():
            raise ServerUnavailable("connection refused")
        return Result()

    controller, gate = gated(queue, reconcile, 1, clock, FixedBackoff(30.0))
    controller.start()
    try:
        queue.add("a")
        wait_for(lambda: gate.waiting() == 1, what="the key to wait")
        down.clear()
        queue.add("other")
        wait_for(lambda: attempts.count("a") == 2, what=f"{answer} to release the waiting key")
    finally:
        controller.stop(drain_timeout=5)


def test_each_outage_probes_from_the_first_backoff_step_again() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    attempts: list[str] = []
    down = threading.Event()
    down.set()

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if down.is_set():
            raise ServerUnavailable("connection refused")
        return Result(changed=True)

    def probe_waits(attempt: int, delay: float) -> None:
        wait_for(lambda: len(attempts) == attempt and queue.counts() == (0, 0, 1)
                 and clock.wake_times() == [clock.now() + delay],
                 what=f"probe {attempt} to wait {delay} s")

    backoff = ServerBackoff(0.5, 100.0, FixedRandom(0.0))
    controller, _gate = gated(queue, reconcile, 1, clock, backoff)
    controller.start()
    try:
        queue.add("a")
        for attempt, delay in ((1, 0.5), (2, 1.0)):  # the first outage: backoff grows to 2 s
            probe_waits(attempt, delay)
            clock.step(delay)
        probe_waits(3, 2.0)
        down.clear()
        clock.step(2.0)
        wait_for(lambda: len(attempts) == 4 and queue.counts() == (0, 0, 0),
                 what="the end of the first outage")
        down.set()  # the second outage probes after 0.5 s again, not 4 s
        queue.add("a")
        probe_waits(5, 0.5)
        down.clear()
        clock.step(0.5)
        wait_for(lambda: len(attempts) == 6, what="the second outage's first probe")
    finally:
        controller.stop(drain_timeout=5)


def test_a_retry_after_from_the_server_is_honoured_over_a_shorter_backoff() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    attempts: list[str] = []

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if len(attempts) == 1:
            raise ServerUnavailable("429 Too Many Requests", retry_after=7.0)
        return Result()

    controller, _gate = gated(queue, reconcile, 1, clock, FixedBackoff(1.0))
    controller.start()
    try:
        start = clock.now()
        queue.add("a")
        wait_for(lambda: len(attempts) == 1 and queue.counts() == (0, 0, 1)
                 and clock.wake_times() == [start + 7.0],
                 what="the worker to wait 7 s for the key's retry")
        clock.step(7.0)
        wait_for(lambda: len(attempts) == 2, what="the retry after 7 s")
    finally:
        controller.stop(drain_timeout=5)


