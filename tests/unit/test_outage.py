"""The outage: one view, for every part of the operator, of whether the API server answers; a
backoff begun in an outage ends with it, and the outage's probe sees its end (a fake clock,
a stand-in probe, configmirror_testing's FakeKube answering /readyz; no Kubernetes)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator

import pytest

from configmirror.client.kube import ApiError
from configmirror.client.outage import (
    PROBE_INTERVAL,
    PROBE_TIMEOUT,
    Outage,
    no_answer,
    readyz,
    served,
)
from configmirror.clock import FakeClock
from configmirror_testing.fakekube import FakeKube, Request
from configmirror_testing.wait import wait_for


class Waiter:
    """A thread in Outage.wait, as a part that backs off runs it."""

    def __init__(self, outage: Outage, mark: int, seconds: float) -> None:
        self.stopped = False
        self.result: bool | None = None
        self._thread = threading.Thread(target=self._run, args=(outage, mark, seconds))
        self._thread.start()

    def _run(self, outage: Outage, mark: int, seconds: float) -> None:
        self.result = outage.wait(mark, seconds, lambda: self.stopped)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self) -> None:
        self._thread.join(5)


class NoJitter(random.Random):
    def random(self) -> float:
        return 0.0


def test_a_wait_begun_in_an_outage_ends_the_moment_any_part_sees_an_answer() -> None:
    clock = FakeClock()
    outage = Outage(clock=clock)
    waiter = Waiter(outage, outage.failed(), 30.0)
    wait_for(lambda: clock.waiters() == 1, what="the waiter in its 30 s backoff")
    assert outage.active()
    outage.answered()  # another part (an informer, the gate) got an answer
    wait_for(waiter.done, what="the wait to end with the outage")
    assert waiter.result is True
    assert not outage.active()


def test_a_wait_lasts_its_whole_delay_while_the_outage_goes_on() -> None:
    clock = FakeClock()
    outage = Outage(clock=clock)
    waiter = Waiter(outage, outage.failed(), 30.0)
    wait_for(lambda: clock.waiters() == 1, what="the waiter")
    clock.step(29.9)
    assert not waiter.done()
    clock.step(0.1)
    wait_for(waiter.done, what="the wait to end at its delay")
    assert waiter.result is False
    assert outage.active(), "the delay ending is no answer"


def test_an_outage_that_ended_before_the_wait_began_ends_it_at_once() -> None:
    outage = Outage(clock=FakeClock())
    mark = outage.failed()
    outage.answered()
    assert outage.wait(mark, 30.0, lambda: False) is True
    assert outage.wait(outage.failed(), 0.0, lambda: False) is False, "a new outage goes on"


def test_failures_in_one_outage_share_its_mark_and_its_end_is_told_once() -> None:
    outage = Outage(clock=FakeClock())
    told: list[int] = []
    outage.listen(lambda: told.append(1))
    first = outage.failed()
    assert outage.failed() == first, "the informer and the recorder met the same outage"
    outage.answered()
    outage.answered()  # the second answer ends nothing
    assert told == [1]
    assert outage.failed() == first + 1


def test_an_answer_outside_an_outage_tells_nobody() -> None:
    outage = Outage(clock=FakeClock())
    told: list[int] = []
    outage.listen(lambda: told.append(1))
    outage.answered()
    assert told == []


def test_interrupt_ends_the_wait_of_a_part_that_stops() -> None:
    clock = FakeClock()
    outage = Outage(clock=clock)
    waiter = Waiter(outage, outage.failed(), 30.0)
    wait_for(lambda: clock.waiters() == 1, what="the waiter")
    waiter.stopped = True
    outage.interrupt()
    wait_for(waiter.done, what="the stopping waiter to return")
    assert waiter.result is False


# -- the probe ------------------------------------------------------------------------------------


class Probe:
    """Answers as the test says; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.answers = False

    def __call__(self) -> bool:
        self.calls += 1
        return self.answers


@pytest.fixture
def probed() -> Iterator[tuple[Outage, Probe, FakeClock]]:
    clock, probe = FakeClock(), Probe()
    outage = Outage(probe, clock, rng=NoJitter())
    outage.start()
    try:
        yield outage, probe, clock
    finally:
        outage.stop()


def test_the_probe_asks_every_half_second_while_an_outage_lasts_and_ends_it(
        probed: tuple[Outage, Probe, FakeClock]) -> None:
    outage, probe, clock = probed
    assert clock.waiters() == 0 and probe.calls == 0, "no outage: no probe"
    outage.failed()
    for calls in range(1, 4):
        wait_for(lambda: clock.wake_times() == [clock.now() + PROBE_INTERVAL],
                 what="the probe waiting its interval")
        clock.step(PROBE_INTERVAL)
        wait_for(lambda calls=calls: probe.calls == calls, what=f"probe {calls}")
    probe.answers = True
    wait_for(lambda: clock.wake_times() == [clock.now() + PROBE_INTERVAL], what="the wait")
    clock.step(PROBE_INTERVAL)
    wait_for(lambda: not outage.active(), what="the probe's answer to end the outage")
    assert probe.calls == 4


def test_the_probe_stands_down_when_another_part_saw_the_answer_first(
        probed: tuple[Outage, Probe, FakeClock]) -> None:
    outage, probe, clock = probed
    outage.failed()
    wait_for(lambda: clock.waiters() == 1, what="the probe waiting")
    outage.answered()
    wait_for(lambda: clock.waiters() == 0, what="the probe to stand down")
    clock.step(PROBE_INTERVAL)
    assert probe.calls == 0


def test_the_probe_interval_is_jittered_by_up_to_a_tenth() -> None:
    class Top(random.Random):
        def random(self) -> float:
            return 0.999

    clock = FakeClock()
    outage = Outage(Probe(), clock, rng=Top())
    outage.start()
    try:
        outage.failed()
        wait_for(lambda: clock.waiters() == 1, what="the probe waiting")
        assert clock.wake_times()[0] - clock.now() == pytest.approx(PROBE_INTERVAL * 1.0999)
    finally:
        outage.stop()


def test_stop_joins_the_probe_thread_in_and_out_of_an_outage() -> None:
    for failing in (False, True):
        outage = Outage(Probe(), FakeClock())
        outage.start()
        if failing:
            outage.failed()
        outage.stop(timeout=5)
        assert not any(t.name == "outage-probe" for t in threading.enumerate())


def test_an_outage_without_a_probe_has_no_thread() -> None:
    with pytest.raises(RuntimeError, match="without a probe"):
        Outage(clock=FakeClock()).start()


# -- what counts as an answer ------------------------------------------------------------------


def error(status: int) -> ApiError:
    return ApiError(status, "x", "x", "get", "/readyz")


@pytest.mark.parametrize(("failure", "answers"), [
    (None, True), (error(403), False), (error(401), False),
    (error(0), False), (error(429), False), (error(500), False), (error(503), False)])
def test_readyz_ends_an_outage_only_when_it_says_ready(failure: ApiError | None,
                                                       answers: bool) -> None:
    server = FakeKube(failures=[failure])
    probe: Callable[[], bool] = readyz(server)  # type: ignore[arg-type]
    assert probe() is answers
    assert server.written() == [Request("get", "/readyz", None, {"timeout": PROBE_TIMEOUT})]


@pytest.mark.parametrize(("err", "unanswered"), [
    (error(0), True), (OSError("reset"), True), (ValueError("cut"), True),
    (error(429), False), (error(500), False), (error(409), False)])
def test_only_a_request_with_no_answer_at_all_begins_an_outage(err: Exception,
                                                                unanswered: bool) -> None:
    assert no_answer(err) is unanswered


@pytest.mark.parametrize(("err", "serves"), [
    (error(400), True), (error(404), True), (error(409), True), (error(410), True),
    (error(422), True), (error(401), False), (error(403), False), (error(429), False),
    (error(499), True), (error(500), False), (error(0), False), (OSError("reset"), False)])
def test_an_answer_ends_an_outage_only_when_the_server_authorized_and_served_it(
        err: Exception, serves: bool) -> None:
    """A server just back refuses (401, 403) what its RBAC allows until it has read it back."""
    assert served(err) is serves


def test_the_promise_rests_on_a_probe_every_half_second_that_gives_up_within_2_s() -> None:
    """An outage's end is seen within about PROBE_INTERVAL (the InvalidSpec Event comes
    within 2 s of the server's return: tests/e2e/test_faults.py), and one probe of a server
    that does not answer may not hold the next one back past that promise."""
    assert (PROBE_INTERVAL, PROBE_TIMEOUT) == (0.5, 2.0)
