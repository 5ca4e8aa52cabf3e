"""The server gate: keys that meet an API server that does not answer wait for it, uncounted,
while one of them probes; any answer releases them (a real WorkQueue and Controller, stand-in
reconcile functions, no Kubernetes)."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

import pytest

from configmirror.backoff import Backoff
from configmirror.client.outage import Outage
from configmirror.clock import FakeClock
from configmirror.controller.controller import Controller
from configmirror.controller.reconcile import (
    CacheBehind,
    Forbidden,
    Result,
    RetryableError,
    ServerUnavailable,
    TerminalError,
)
from configmirror.controller.servergate import (
    CACHE_WAIT,
    RETRY_AFTER_FLOOR,
    ServerGate,
    server_backoff,
)
from configmirror.controller.workqueue import WorkQueue
from configmirror.metrics import Metrics
from configmirror_testing.scrape import controller_sample as sample
from configmirror_testing.wait import wait_for


def gated(queue: WorkQueue[str], reconcile: Callable[[str], Result], workers: int,
          clock: FakeClock | None, backoff: Backoff, metrics: Metrics | None = None
          ) -> tuple[Controller[str], ServerGate[str]]:
    """A controller whose reconciler is `reconcile` behind a gate, as the manager wires it."""
    gate = ServerGate("test", reconcile, queue.add, clock, backoff)
    return Controller("test", queue, gate.reconcile, workers, metrics), gate


def FixedBackoff(delay: float) -> Backoff:  # noqa: N802 (reads as the fixed curve it is)
    return Backoff(delay, delay)


class FixedRandom(random.Random):
    """A random source that always says `value`."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


def test_server_backoff_doubles_from_a_quarter_second_to_30_s_jittered_by_a_tenth() -> None:
    backoff = server_backoff(rng=FixedRandom(0.5))
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

    backoff = Backoff(0.5, 100.0, jitter=0.1, rng=FixedRandom(0.0))
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


# -- an overloaded server: 429 (or 503) with Retry-After -----------------------------------------

def overloaded(clock: FakeClock, attempts: list[str], refusals: dict[str, list[float]],
               max_retries: int = 5) -> tuple[Controller[str], ServerGate[str], WorkQueue[str]]:
    """A one-worker gated controller whose reconcile answers key k with 429 and each
    Retry-After in refusals[k] in turn, then succeeds."""
    queue: WorkQueue[str] = WorkQueue(clock=clock, max_retries=max_retries)

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if refusals.get(key):
            raise ServerUnavailable("429 Too Many Requests", retry_after=refusals[key].pop(0))
        return Result()

    controller, gate = gated(queue, reconcile, 1, clock, FixedBackoff(60.0))
    return controller, gate, queue


def test_a_key_told_when_to_retry_is_retried_then_by_itself_and_opens_no_outage(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    attempts: list[str] = []
    controller, gate, queue = overloaded(clock, attempts, {"told": [5.0]})
    controller.start()
    try:
        with caplog.at_level(logging.INFO, logger="configmirror.controller.servergate"):
            queue.add("told")
            wait_for(lambda: clock.wake_times() == [1005.0],
                     what="a wait of its 5 s, not the 60 s backoff")
            assert not gate.in_outage() and gate.waiting() == 0, "the server answered"
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
    controller, _gate, queue = overloaded(clock, attempts, {"k": [0.0]})
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
    controller, _gate, queue = overloaded(clock, attempts, {"k": [1.0] * 4}, max_retries=1)
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


def test_a_retry_after_in_an_outage_neither_releases_nor_joins_the_waiting_keys() -> None:
    clock = FakeClock()
    attempts: list[str] = []
    down = {"a": True}

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if key == "a" and down["a"]:
            raise ServerUnavailable("connection refused")
        if key == "b" and attempts.count("b") == 1:
            raise ServerUnavailable("429 Too Many Requests", retry_after=3.0)
        return Result()

    queue: WorkQueue[str] = WorkQueue(clock=clock)
    controller, gate = gated(queue, reconcile, 1, clock, FixedBackoff(60.0))
    controller.start()
    try:
        queue.add("a")
        wait_for(lambda: gate.in_outage() and gate.waiting() == 1, what="a's outage")
        queue.add("b")
        wait_for(lambda: attempts == ["a", "b"] and clock.wake_times() == [1003.0],
                 what="b waiting its own 3 s, before a's probe at 60 s")
        assert gate.in_outage() and gate.waiting() == 1, "b's 429 released nothing"
        clock.step(3.0)
        wait_for(lambda: attempts == ["a", "b", "b"], what="b's retry at 3 s")
        assert gate.in_outage() and gate.waiting() == 1, "b joined no outage"
    finally:
        controller.stop(drain_timeout=5)


# -- a cache behind its server (issue 42) --------------------------------------------------------


def test_a_key_whose_cache_is_behind_is_never_the_probe_and_holds_no_key_back() -> None:
    """After an outage, the first key to fail is the one whose write was in flight: the server
    applied it and its answer was lost, so until the watch is back it conflicts with itself.
    The keys that met the outage with it are released by the first answer, that conflict."""
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(max_retries=2, clock=clock)
    attempts: list[str] = []
    down, watching = threading.Event(), threading.Event()
    down.set()

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if down.is_set():
            raise ServerUnavailable("connection refused")
        if key == "lost" and not watching.is_set():
            raise CacheBehind("409 Conflict (the cache is behind until the watch reconnects)")
        return Result(changed=key != "lost")

    metrics = Metrics()
    controller, gate = gated(queue, reconcile, 1, clock, FixedBackoff(30.0), metrics)
    controller.start()
    try:
        for key in ("lost", "a", "b"):
            queue.add(key)
        wait_for(lambda: gate.waiting() == 3 and len(attempts) == 3, what="all three to wait")
        down.clear()
        clock.step(30.0)  # the probe, "lost", tries again: the server answers, a conflict
        wait_for(lambda: attempts.count("a") == 2 and attempts.count("b") == 2,
                 what="the conflict, an answer, to release the others at once")
        assert not gate.in_outage() and gate.waiting() == 0
        for attempt, delay in enumerate((CACHE_WAIT.at(0), CACHE_WAIT.at(1)), start=3):
            wait_for(lambda attempt=attempt, delay=delay: attempts.count("lost") == attempt - 1
                     and clock.wake_times() == [clock.now() + delay],
                     what=f"'lost' alone to wait {delay} s for the watch")
            clock.step(delay)
        wait_for(lambda: attempts.count("lost") == 4, what="its third try since")
        assert not gate.in_outage(), "a cache behind is no outage"
        watching.set()
        clock.step(CACHE_WAIT.at(2))
        wait_for(lambda: queue.counts() == (0, 0, 0) and attempts.count("lost") == 5,
                 what="'lost' to find it in sync once the watch is back")
        assert sample(metrics, "configmirror_reconcile_given_up_total") == 0
        assert sample(metrics, "controller_runtime_reconcile_errors_total") == 0
    finally:
        controller.stop(drain_timeout=5)


def test_a_cache_behind_waits_a_quarter_second_doubling_to_30_s_per_key_and_starts_afresh(
        ) -> None:
    clock = FakeClock()
    behind = {"x": 9, "y": 1}

    def reconcile(key: str) -> Result:
        if behind[key] > 0:
            behind[key] -= 1
            raise CacheBehind("409")
        return Result()

    gate = ServerGate("test", reconcile, lambda key: None, clock)
    waits = [gate.reconcile("x").requeue_after for _ in range(9)]
    assert waits == [0.25, 0.5, 1, 2, 4, 8, 16, 30, 30]
    assert gate.reconcile("y").requeue_after == 0.25, "each key's own"
    assert gate.reconcile("x").requeue_after is None
    behind["x"] = 1
    assert gate.reconcile("x").requeue_after == 0.25, "caught up: the next wait is the first"


@pytest.mark.parametrize("error", [Forbidden("403"), RetryableError("409"),
                                   TerminalError("422")])
def test_a_cache_behind_starts_afresh_after_any_other_failure(error: Exception) -> None:
    outcomes: list[Exception] = [CacheBehind("409"), CacheBehind("409"), error,
                                 CacheBehind("409")]

    def reconcile(key: str) -> Result:
        raise outcomes.pop(0)

    gate = ServerGate("test", reconcile, lambda key: None, FakeClock())
    assert [gate.reconcile("x").requeue_after for _ in range(2)] == [0.25, 0.5]
    with pytest.raises(type(error)):
        gate.reconcile("x")
    assert gate.reconcile("x").requeue_after == 0.25


def test_a_refusal_met_while_keys_wait_for_the_server_waits_with_them_and_ends_nothing(
        ) -> None:
    """A kube-apiserver just back refuses what its RBAC allows for a moment (issue 42)."""
    clock = FakeClock()
    outage = Outage(clock=clock)
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    attempts: list[str] = []
    state = {"server": "down"}

    def reconcile(key: str) -> Result:
        attempts.append(key)
        if state["server"] == "down":
            raise ServerUnavailable("connection refused")
        if state["server"] == "starting":
            raise Forbidden(f"update ConfigMap {key}/cfg forbidden")
        return Result(changed=True)

    metrics = Metrics()
    gate = ServerGate("test", reconcile, queue.add, clock, FixedBackoff(5.0), outage)
    controller = Controller("test", queue, gate.reconcile, 1, metrics)
    controller.start()
    try:
        outage.failed()  # the informers met the outage
        for key in ("a", "b"):
            queue.add(key)
        wait_for(lambda: gate.waiting() == 2, what="both keys to wait")
        state["server"] = "starting"
        clock.step(5.0)  # the probe, "a", is refused
        wait_for(lambda: attempts.count("a") == 2 and clock.wake_times() == [clock.now() + 5],
                 what="the refused probe to wait on")
        assert gate.waiting() == 2 and gate.in_outage() and outage.active(), \
            "a refusal is no sign that the server serves: nothing released, nothing forgotten"
        assert sample(metrics, "controller_runtime_terminal_reconcile_errors_total") == 0
        state["server"] = "ready"
        outage.answered()  # /readyz says ready
        wait_for(lambda: attempts.count("b") == 2 and queue.counts() == (0, 0, 1),
                 what="both keys written")
        assert gate.waiting() == 0
    finally:
        controller.stop(drain_timeout=5)


def test_a_refusal_waits_while_keys_wait_for_the_server_even_with_no_outage_view() -> None:
    outcomes: list[Exception] = [ServerUnavailable("refused"), Forbidden("403")]

    def reconcile(key: str) -> Result:
        raise outcomes.pop(0)

    gate = ServerGate("test", reconcile, lambda key: None, FakeClock(), FixedBackoff(5.0))
    assert gate.reconcile("a").requeue_after == 5.0  # "a" probes
    assert gate.reconcile("b").requeue_after is None, "refused while the probe is out: waits"
    assert gate.waiting() == 2


def test_a_refusal_waits_while_the_operator_is_in_an_outage_though_no_key_waits() -> None:
    def refused(key: str) -> Result:
        raise Forbidden("update ConfigMap a/cfg forbidden")

    outage = Outage()
    outage.failed()  # the informers met the outage; no key has yet
    gate = ServerGate("test", refused, lambda key: None, FakeClock(), FixedBackoff(5.0),
                      outage)
    assert gate.reconcile("a").requeue_after == 5.0, "held, as the probe"
    assert gate.waiting() == 1 and outage.active()


def test_a_refusal_outside_an_outage_is_terminal() -> None:
    def refused(key: str) -> Result:
        raise Forbidden("update ConfigMap a/cfg forbidden")

    gate = ServerGate("test", refused, lambda key: None, FakeClock(), outage=Outage())
    with pytest.raises(Forbidden):
        gate.reconcile("a")
    assert gate.waiting() == 0 and not gate.in_outage()


def test_a_write_that_gets_through_ends_the_operators_outage_for_every_part() -> None:
    outage = Outage()
    mark = outage.failed()  # an informer, say, waits for the server
    gate = ServerGate("test", lambda key: Result(changed=True), lambda key: None, FakeClock(),
                      outage=outage)
    gate.reconcile("a")
    assert not outage.active()
    assert outage.wait(mark, 0.0, lambda: False) is True, "the informer's wait ends"
