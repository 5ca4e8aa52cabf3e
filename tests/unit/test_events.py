"""Events: many reconciles' counts become one Event per object once it is quiet (Tallies), and the
recorder writes, aggregates, retries and drops them off the workers' threads."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator

import pytest

from configmirror.client.events import QUIET, RETRY_MIN, EventRecorder, Tallies
from configmirror.client.kube import ApiError
from configmirror.client.outage import Outage
from configmirror.clock import FakeClock
from configmirror.operator.replicator import replicated_message
from configmirror.vocabulary import ObjectRef
from configmirror_testing.fakekube import FakeKube
from configmirror_testing.wait import wait_for

A = ObjectRef("ConfigMap", "src", "a", "uid-a", "1")
B = ObjectRef("ConfigMap", "src", "b", "uid-b", "1")


def test_counts_of_one_object_become_one_event_after_it_is_quiet() -> None:
    clock = FakeClock()
    tallies = Tallies(clock, quiet=2.0, max_age=60.0)
    for i in range(3000):
        tallies.add(A, "Replicated", "created", f"ns-{i}", replicated_message)
        clock.step(0.001)
    assert tallies.due() == []
    assert tallies.next_due_in() == pytest.approx(1.999)
    clock.step(2.0)
    (event,) = tallies.due()
    assert (event.ref, event.type, event.reason) == (A, "Normal", "Replicated")
    assert event.message == "created 3000, updated 0, deleted 0 replicas"
    assert len(tallies) == 0 and tallies.next_due_in() is None


def test_one_replica_written_twice_counts_once() -> None:
    clock = FakeClock()
    tallies = Tallies(clock, quiet=1.0)
    tallies.add(A, "Replicated", "updated", "ns-1", replicated_message)
    tallies.add(A, "Replicated", "updated", "ns-1", replicated_message)
    tallies.add(A, "Replicated", "deleted", "ns-2", replicated_message)
    clock.step(1.0)
    assert [e.message for e in tallies.due()] == ["created 0, updated 1, deleted 1 replicas"]


def test_objects_are_tallied_apart_and_a_long_stream_is_written_at_max_age() -> None:
    clock = FakeClock()
    tallies = Tallies(clock, quiet=2.0, max_age=10.0)
    for i in range(20):  # B keeps changing every second: never quiet
        tallies.add(B, "Replicated", "created", f"ns-{i}", replicated_message)
        if i == 0:
            tallies.add(A, "Replicated", "created", "ns-x", replicated_message)
        clock.step(1.0)
        due = tallies.due()
        if i == 1:
            assert [e.ref for e in due] == [A]
        elif i in (9, 19):  # every 10 s, with that stretch's 10 namespaces
            assert [(e.ref, e.message) for e in due] == [
                (B, "created 10, updated 0, deleted 0 replicas")]
        else:
            assert due == [], i


def test_flush_all_takes_every_tally_now() -> None:
    clock = FakeClock()
    tallies = Tallies(clock)
    tallies.add(A, "Replicated", "created", "x", replicated_message)
    assert len(tallies.due(flush_all=True)) == 1 and len(tallies) == 0


def test_only_a_new_tally_can_be_due_sooner() -> None:
    # The recorder is woken only when add() opens a tally: any other count must leave every
    # tally due no sooner than before, or the recorder's wait would end too late.
    clock = FakeClock()
    tallies = Tallies(clock, quiet=2.0, max_age=10.0)
    assert tallies.add(A, "Replicated", "created", "ns-0", replicated_message) is True
    for i in range(1, 200):
        due_at = clock.now() + (tallies.next_due_in() or 0.0)
        clock.step(0.1)
        assert tallies.add(A, "Replicated", "updated", f"ns-{i}", replicated_message) is False
        assert clock.now() + (tallies.next_due_in() or 0.0) >= due_at
        tallies.due()  # the max-age flush reopens the tally on the next count
        if not len(tallies):
            assert tallies.add(A, "Replicated", "updated", "again", replicated_message) is True
    assert tallies.add(B, "Replicated", "created", "ns-0", replicated_message) is True


# -- the recorder: its writer thread on a fake clock, against the fake client -------------------


def unavailable() -> ApiError:
    return ApiError(0, "ConnectionError", "connection refused", "create", "/events")


@pytest.fixture
def recorder(request: pytest.FixtureRequest
             ) -> Iterator[tuple[EventRecorder, FakeKube, FakeClock, list[int]]]:
    """A started recorder (its queue holds 100 Events, or a test's parameter)."""
    server, clock, dropped = FakeKube(), FakeClock(), [0]
    max_queued = getattr(request, "param", 100)

    def on_dropped() -> None:
        dropped[0] += 1

    recorder = EventRecorder(server, instance="test", max_queued=max_queued,  # type: ignore[arg-type]
                             clock=clock, on_dropped=on_dropped)
    recorder.start()
    try:
        yield recorder, server, clock, dropped
    finally:
        recorder.stop(timeout=5)


def test_a_repeated_warning_patches_the_count_of_the_event_written_for_it(
        recorder: tuple[EventRecorder, FakeKube, FakeClock, list[int]]) -> None:
    events, server, _, _ = recorder
    for _ in range(3):
        events.warning(A, "TargetConflict", "a/cfg exists")
    events.warning(B, "TargetConflict", "a/cfg exists")  # another object: an Event of its own
    wait_for(lambda: len(server.written()) == 4 and events.pending() == 0,
             what="four writes")
    verbs = [(verb, body.get("count")) for verb, _, body, _ in server.written()]
    assert verbs == [("create", 1), ("patch", 2), ("patch", 3), ("create", 1)]
    create = server.written()[0][2]
    assert create["involvedObject"] == {"kind": "ConfigMap", "apiVersion": "v1",
                                        "namespace": "src", "name": "a", "uid": "uid-a",
                                        "resourceVersion": "1"}
    assert (create["type"], create["reason"], create["message"]) == (
        "Warning", "TargetConflict", "a/cfg exists")
    name = create["metadata"]["name"]
    assert server.written()[1][1] == f"/api/v1/namespaces/src/events/{name}"


def test_an_event_whose_record_expired_is_written_anew(
        recorder: tuple[EventRecorder, FakeKube, FakeClock, list[int]]) -> None:
    events, server, _, _ = recorder
    events.warning(A, "InvalidSpec", "bad")
    wait_for(lambda: len(server.written()) == 1 and events.pending() == 0, what="the create")
    server.failures.append(ApiError(404, "NotFound", "gone", "patch", "/events/x"))
    events.warning(A, "InvalidSpec", "bad")
    wait_for(lambda: len(server.written()) == 3 and events.pending() == 0,
             what="the patch, then a new create")
    assert [(verb, body["count"]) for verb, _, body, _ in server.written()] == [
        ("create", 1), ("patch", 2), ("create", 1)]


def test_an_unavailable_server_is_waited_out_with_the_event_first_in_line(
        recorder: tuple[EventRecorder, FakeKube, FakeClock, list[int]]) -> None:
    events, server, clock, _ = recorder
    server.failures += [unavailable(), unavailable()]
    events.warning(A, "First", "1")
    events.warning(B, "Second", "2")
    # 0.5 s after the first failure, then 1 s: the writer waits on the clock, not on a sleep.
    for attempt, delay in ((1, RETRY_MIN), (2, 2 * RETRY_MIN)):
        wait_for(lambda attempt=attempt, delay=delay: len(server.written()) == attempt
                 and clock.wake_times() == [clock.now() + delay],
                 what=f"attempt {attempt} to wait {delay} s")
        assert events.pending() == 2, "nothing is lost while the server does not answer"
        clock.step(delay)
    wait_for(lambda: events.pending() == 0, what="both Events written")
    assert [body["reason"] for _, _, body, _ in server.written()] == [
        "First", "First", "First", "Second"], "the one that failed is written first"


def test_an_event_the_server_rejects_is_dropped_and_the_rest_go_on(
        recorder: tuple[EventRecorder, FakeKube, FakeClock, list[int]]) -> None:
    events, server, _, _ = recorder
    server.failures.append(ApiError(422, "Invalid", "too long", "create", "/events"))
    events.warning(A, "Rejected", "1")
    events.warning(B, "Next", "2")
    wait_for(lambda: events.pending() == 0, what="both handled")
    assert [body["reason"] for _, _, body, _ in server.written()] == ["Rejected", "Next"]


@pytest.mark.parametrize("recorder", [3], indirect=True)
def test_a_full_queue_drops_events_and_counts_each(
        recorder: tuple[EventRecorder, FakeKube, FakeClock, list[int]],
        caplog: pytest.LogCaptureFixture) -> None:
    events, server, clock, dropped = recorder
    server.failures.append(unavailable())
    events.warning(A, "Blocked", "0")  # the writer holds this one, waiting for the server
    wait_for(lambda: clock.waiters() == 1, what="the writer to wait for the server")
    for i in range(5):
        events.warning(A, "Queued", str(i))
    assert dropped[0] == 3, "the queue (3) keeps the first three, the rest are dropped"
    assert caplog.text.count("Event queue full") == 1, "logged once, not per Event"
    clock.step(RETRY_MIN)
    wait_for(lambda: events.pending() == 0, what="the queue to drain")
    assert [body["message"] for _, _, body, _ in server.written()] == ["0", "0", "0", "1"], \
        "the held Event, then the queued ones that fit"


def test_a_tally_is_written_as_one_event_once_its_object_is_quiet(
        recorder: tuple[EventRecorder, FakeKube, FakeClock, list[int]]) -> None:
    events, server, clock, _ = recorder
    for i in range(100):
        events.tally(A, "Replicated", "created", f"ns-{i}", replicated_message)
    wait_for(lambda: clock.wake_times() == [clock.now() + QUIET],
             what="the writer to wait for the tally to be quiet")
    assert server.written() == []
    clock.step(QUIET)
    wait_for(lambda: len(server.written()) == 1, what="the one Event")
    body = server.written()[0][2]
    assert (body["type"], body["reason"], body["message"]) == (
        "Normal", "Replicated", "created 100, updated 0, deleted 0 replicas")


def test_stop_writes_the_open_tallies_and_the_queue(
        recorder: tuple[EventRecorder, FakeKube, FakeClock, list[int]]) -> None:
    events, server, _, _ = recorder
    events.tally(A, "Replicated", "updated", "ns-1", replicated_message)
    events.warning(B, "Queued", "1")
    assert events.stop(timeout=5), "the writer ended within the timeout"
    assert sorted(body["reason"] for _, _, body, _ in server.written()) == ["Queued", "Replicated"]
    assert events.pending() == 0


def test_next_due_in_is_the_earliest_of_quiet_and_max_age_and_never_negative() -> None:
    clock = FakeClock()
    tallies = Tallies(clock)  # the defaults: quiet 2 s, max age 60 s
    tallies.add(A, "Replicated", "created", "ns-0", replicated_message)
    assert tallies.next_due_in() == 2.0
    for i in range(1, 59):  # a count a second: never quiet, so due at 60 s
        clock.step(1.0)
        tallies.add(A, "Replicated", "created", f"ns-{i}", replicated_message)
    assert tallies.next_due_in() == 2.0, "quiet 2 s from now comes before 60 s from the start"
    clock.step(1.0)
    tallies.add(A, "Replicated", "created", "ns-59", replicated_message)
    assert tallies.next_due_in() == 1.0, "max age: 60 s after the first count"
    tallies.add(B, "Replicated", "created", "ns-0", replicated_message)
    assert tallies.next_due_in() == 1.0, "the earliest of two"
    clock.step(5.0)
    assert tallies.next_due_in() == 0.0, "overdue is due now"
    assert [e.ref for e in tallies.due()] == [A, B]


def test_a_message_is_cut_to_1024_characters(
        recorder: tuple[EventRecorder, FakeKube, FakeClock, list[int]]) -> None:
    events, server, _, _ = recorder
    events.warning(A, "Long", "x" * 5000)
    wait_for(lambda: events.pending() == 0 and server.written(), what="the Event")
    assert len(server.written()[0][2]["message"]) == 1024


def test_retries_wait_half_a_second_doubling_to_30_s_and_the_first_failure_is_logged_once(
        recorder: tuple[EventRecorder, FakeKube, FakeClock, list[int]],
        caplog: pytest.LogCaptureFixture) -> None:
    events, server, clock, _ = recorder
    server.failures += [unavailable() for _ in range(9)]
    events.warning(A, "Patient", "1")
    for attempt, delay in enumerate((0.5, 1, 2, 4, 8, 16, 30, 30, 30), start=1):
        wait_for(lambda attempt=attempt, delay=delay: len(server.written()) == attempt
                 and clock.wake_times() == [clock.now() + delay],
                 what=f"attempt {attempt} to wait {delay} s")
        clock.step(delay)
    wait_for(lambda: events.pending() == 0, what="the Event written at last")
    assert len(server.written()) == 10
    warned = [r for r in caplog.records if "cannot record Event" in r.getMessage()]
    assert [r.levelname for r in warned] == ["WARNING"], "once, then at debug level"


@pytest.fixture
def outage_recorder() -> Iterator[tuple[EventRecorder, FakeKube, FakeClock, Outage]]:
    """A started recorder that waits out its retries through an outage view."""
    server, clock = FakeKube(), FakeClock()
    outage = Outage(clock=clock)
    events = EventRecorder(server, instance="test", clock=clock,  # type: ignore[arg-type]
                           outage=outage)
    events.start()
    try:
        yield events, server, clock, outage
    finally:
        outage.answered()
        events.stop(timeout=5)


def fail_and_wait(server: FakeKube, clock: FakeClock, delays: tuple[float, ...]) -> None:
    """Each write attempt fails and waits the next of `delays`; every wait but the last is
    stepped through."""
    for attempt, delay in enumerate(delays, start=1):
        wait_for(lambda attempt=attempt, delay=delay: len(server.written()) == attempt
                 and clock.wake_times() == [clock.now() + delay],
                 what=f"attempt {attempt} to wait {delay} s")
        if attempt < len(delays):
            clock.step(delay)


def test_a_retry_begun_in_an_outage_ends_when_the_outage_does_and_starts_afresh(
        outage_recorder: tuple[EventRecorder, FakeKube, FakeClock, Outage]) -> None:
    events, server, clock, outage = outage_recorder
    server.failures += [unavailable() for _ in range(5)]
    events.warning(A, "InvalidSpec", "bad")
    fail_and_wait(server, clock, (0.5, 1, 2, 4, 8))
    assert outage.active(), "a write with no answer is an outage"
    outage.answered()  # an informer reconnected: 8 s are left of this wait
    wait_for(lambda: events.pending() == 0, what="the Event written at once")
    assert clock.waiters() == 0 and len(server.written()) == 6
    server.failures.append(unavailable())
    events.warning(B, "InvalidSpec", "bad")
    wait_for(lambda: clock.wake_times() == [clock.now() + RETRY_MIN],
             what="the next outage's first wait: the shortest again")


def test_a_retry_that_fails_again_right_after_an_outage_ends_waits_the_shortest_time(
        outage_recorder: tuple[EventRecorder, FakeKube, FakeClock, Outage]) -> None:
    events, server, clock, outage = outage_recorder
    server.failures += [unavailable() for _ in range(4)]
    events.warning(A, "InvalidSpec", "bad")
    fail_and_wait(server, clock, (0.5, 1, 2))
    outage.answered()  # the wait of 2 s ends; the try right after it fails once more
    wait_for(lambda: len(server.written()) == 4
             and clock.wake_times() == [clock.now() + RETRY_MIN],
             what="a fresh start after the outage, not the 4 s its backoff had reached")


def test_stop_ends_a_retry_that_waits_for_the_outage_at_once() -> None:
    server, clock = FakeKube(), FakeClock()
    outage = Outage(clock=clock)
    events = EventRecorder(server, instance="test", clock=clock,  # type: ignore[arg-type]
                           outage=outage)
    events.start()
    server.failures += [unavailable()]
    events.warning(A, "InvalidSpec", "bad")
    wait_for(lambda: clock.wake_times() == [clock.now() + RETRY_MIN], what="the retry waiting")
    events.stop(timeout=5)  # the clock never moves: only stop() can end the wait
    assert not any(t.name == "event-recorder" for t in threading.enumerate())


@pytest.mark.parametrize(("status", "ends"), [(429, False), (403, False), (422, True)])
def test_a_write_throttled_or_refused_waits_on_its_own_and_only_a_served_one_ends_an_outage(
        status: int, ends: bool) -> None:
    server, clock = FakeKube(), FakeClock()
    outage = Outage(clock=clock)
    events = EventRecorder(server, instance="test", clock=clock,  # type: ignore[arg-type]
                           outage=outage)
    events.start()
    try:
        outage.failed()  # an informer met an outage
        server.failures.append(ApiError(status, "Reason", "no", "create", "/e"))
        events.warning(A, "InvalidSpec", "bad")
        wait_for(lambda: len(server.written()) == 1 and (
            events.pending() == 0 if status != 429 else
            clock.wake_times() == [clock.now() + RETRY_MIN]), what="the answer handled")
        assert outage.active() is not ends
        if status == 429:
            outage.answered()
            assert clock.wake_times() == [clock.now() + RETRY_MIN], "throttled: its own pace"
        outage.failed()
        events.warning(B, "InvalidSpec", "bad")
        clock.step(RETRY_MIN)
        wait_for(lambda: not outage.active() and events.pending() == 0,
                 what="a written Event to end the outage")
    finally:
        events.stop(timeout=5)


def test_the_events_are_reported_by_the_instance_given_or_else_the_host() -> None:
    server = FakeKube()
    given = EventRecorder(server, instance="pod-1", clock=FakeClock())  # type: ignore[arg-type]
    default = EventRecorder(server, clock=FakeClock())  # type: ignore[arg-type]
    assert given.pending() == 0 and default.pending() == 0, "nothing pending at first"
    for recorder, instance in ((given, "pod-1"), (default, socket.gethostname())):
        recorder.warning(A, "Who", "1")
        recorder.start()
        recorder.stop(timeout=5)
        assert server.written()[-1][2]["reportingInstance"] == instance


def test_pending_counts_the_queue_the_open_tallies_and_the_event_being_written() -> None:
    release = threading.Event()
    server, clock = FakeKube(held=release), FakeClock()
    events = EventRecorder(server, clock=clock)  # type: ignore[arg-type]
    events.warning(A, "InFlight", "1")
    events.warning(B, "Queued", "2")
    events.tally(A, "Replicated", "created", "ns", replicated_message)
    assert events.pending() == 3
    events.start()
    try:
        assert server.holding.wait(10)
        assert events.pending() == 3, "one being written, one queued, one tally"
    finally:
        release.set()
        events.stop(timeout=5)
    assert events.pending() == 0


def test_stop_gives_up_on_a_server_too_slow_to_take_the_rest(
        caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    server = FakeKube(held=release)
    events = EventRecorder(server, clock=FakeClock())  # type: ignore[arg-type]
    for reason in ("First", "Second", "Third"):
        events.warning(A, reason, "1")
    events.start()
    assert server.holding.wait(10)
    try:
        # Within its timeout, whatever the write in flight does: a shutdown has a deadline.
        assert events.stop(timeout=0.5) is False, "the writer is still in its write"
        assert "stopped with 2 Events unwritten" in caplog.text
    finally:
        release.set()  # the write in flight ends, and the writer after it
    assert events._thread is not None
    wait_for(lambda: not events._thread.is_alive(),  # type: ignore[union-attr]
             what="the writer to end after its write")
    assert [r.body["reason"] for r in server.written()] == ["First"], \
        "the Events given up on are never sent"


def test_stop_with_the_server_down_ends_the_writer_after_one_more_try() -> None:
    server, clock = FakeKube(), FakeClock()
    server.failures += [unavailable() for _ in range(100)]
    events = EventRecorder(server, clock=clock)  # type: ignore[arg-type]
    events.warning(A, "Lost", "1")
    events.start()
    wait_for(lambda: clock.waiters() == 1, what="the writer to wait for the server")
    events.stop(timeout=5)
    assert events._thread is not None and not events._thread.is_alive()
    assert len(server.written()) == 2, "the first try, and one more at stop: no loop"


def test_stop_before_start_does_nothing() -> None:
    events = EventRecorder(FakeKube(), clock=FakeClock())  # type: ignore[arg-type]
    events.warning(A, "Never", "1")  # a standby that never led: its recorder never started
    events.stop(timeout=5)
    assert events.pending() == 1


def remembering(max_remembered: int) -> tuple[EventRecorder, FakeKube]:
    server = FakeKube()
    events = EventRecorder(server, max_remembered=max_remembered,  # type: ignore[arg-type]
                           clock=FakeClock())
    return events, server


def write_all(events: EventRecorder, *warnings: tuple[ObjectRef, str]) -> None:
    events.start()
    for ref, reason in warnings:
        events.warning(ref, reason, "m")
    events.stop(timeout=5)


def test_the_recorder_remembers_the_most_recently_used_events_up_to_its_limit() -> None:
    c = ObjectRef("ConfigMap", "src", "c", "uid-c", "1")
    events, server = remembering(2)
    # A and B are written; A is repeated (used last), then C evicts the least recent: B.
    write_all(events, (A, "R"), (B, "R"), (A, "R"), (c, "R"), (A, "R"), (B, "R"))
    assert [(verb, body["involvedObject"]["name"] if verb == "create" else body["count"])
            for verb, _, body, _ in server.written()] == [
        ("create", "a"), ("create", "b"), ("patch", 2), ("create", "c"),
        ("patch", 3),      # A was kept: the most recently used
        ("create", "b")]   # forgotten: written anew


def test_a_repeat_whose_patch_meets_an_unavailable_server_is_patched_again_not_recreated(
        ) -> None:
    events, server = remembering(10)
    server.failures += [None, unavailable()]
    clock = events._clock
    events.start()
    try:
        events.warning(A, "R", "m")
        events.warning(A, "R", "m")
        wait_for(lambda: len(server.written()) == 2 and isinstance(clock, FakeClock)
                 and clock.waiters() == 1, what="the patch to wait for the server")
        assert isinstance(clock, FakeClock)
        clock.step(RETRY_MIN)
        wait_for(lambda: events.pending() == 0, what="the patch written")
    finally:
        events.stop(timeout=5)
    assert server.verbs() == ["create", "patch", "patch"]


def test_an_event_is_named_after_its_object_and_16_hex_digits() -> None:
    events, server = remembering(10)
    write_all(events, (A, "R"))
    assert re.fullmatch(r"a\.[0-9a-f]{16}", server.written()[0][2]["metadata"]["name"])


@pytest.mark.parametrize("repeat", [False, True], ids=["create", "patch"])
def test_a_failure_after_a_success_is_logged_again(
        caplog: pytest.LogCaptureFixture, repeat: bool) -> None:
    events, server = remembering(10)
    clock = events._clock
    assert isinstance(clock, FakeClock)
    server.failures += [unavailable()]
    events.start()
    try:
        events.warning(A, "R", "m")
        wait_for(lambda: clock.waiters() == 1, what="the first failure")
        clock.step(RETRY_MIN)
        wait_for(lambda: events.pending() == 0, what="the Event written")
        if repeat:
            events.warning(A, "R", "m")  # written by a patch this time
            wait_for(lambda: events.pending() == 0 and len(server.written()) == 3,
                     what="the patch")
        server.failures += [unavailable()]
        events.warning(B, "R", "m")
        wait_for(lambda: clock.waiters() == 1, what="the second failure")
        clock.step(RETRY_MIN)
        wait_for(lambda: events.pending() == 0, what="the second Event written")
    finally:
        events.stop(timeout=5)
    warned = [r for r in caplog.records if "cannot record Event" in r.getMessage()
              and r.levelname == "WARNING"]
    assert len(warned) == 2, "each run of failures after a success is said once"


def test_the_replicated_message_says_released_only_when_some_were() -> None:
    assert replicated_message({"created": 2}) == "created 2, updated 0, deleted 0 replicas"
    assert replicated_message({"deleted": 1, "released": 3}) == (
        "created 0, updated 0, deleted 1, released 3 replicas")
