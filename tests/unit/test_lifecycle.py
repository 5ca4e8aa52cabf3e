"""The components' lifecycle: started in order, stopped in reverse, all within one deadline;
one that does not stop in time is named in one log line and the rest are stopped all the same.
The budgets are checked on a FakeClock; the bound on the whole, with real threads that ignore
being told to stop, on the real one."""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from configmirror.clock import FakeClock
from configmirror.lifecycle import Components, Deadline, OwnedThread, join, lingering
from configmirror.operator.probes import Probes
from configmirror_testing.wait import wait_for


class Recorded:
    """A component that notes its start and stop in `calls`, and takes `takes` seconds of the
    clock to stop (all of its timeout at most), ending in time unless `stuck`."""

    def __init__(self, name: str, calls: list[tuple[str, str, float]], clock: FakeClock,
                 takes: float = 0.0, stuck: bool = False, fails: bool = False) -> None:
        self.name = name
        self.calls = calls
        self.clock = clock
        self.takes = takes
        self.stuck = stuck
        self.fails = fails

    def start(self) -> None:
        self.calls.append(("start", self.name, self.clock.now()))

    def stop(self, timeout: float) -> bool:
        self.calls.append(("stop", self.name, timeout))
        if self.fails:
            raise RuntimeError("a bug in stop")
        if self.stuck:
            self.clock.step(timeout)  # waits out all it was given, to no end
            return False
        self.clock.step(min(self.takes, timeout))
        return self.takes <= timeout


def started(clock: FakeClock, calls: list[tuple[str, str, float]],
            *parts: Recorded | tuple[Recorded, float]) -> Components:
    components = Components(clock)
    for part in parts:
        component, leave = part if isinstance(part, tuple) else (part, 0.0)
        components.start(component.name, component, leave=leave)
    return components


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_components_start_in_order_and_stop_in_reverse() -> None:
    clock, calls = FakeClock(), []
    components = started(clock, calls, *(Recorded(n, calls, clock) for n in "abc"))
    assert components.names() == ["a", "b", "c"]
    assert components.stop(30) == []
    assert [(verb, name) for verb, name, _ in calls] == [
        ("start", "a"), ("start", "b"), ("start", "c"),
        ("stop", "c"), ("stop", "b"), ("stop", "a")]
    assert components.names() == [], "each is stopped once"
    assert components.stop(30) == []
    assert len(calls) == 6


def test_each_stop_gets_what_is_left_of_the_one_deadline() -> None:
    clock, calls = FakeClock(), []
    components = started(clock, calls, Recorded("probes", calls, clock, takes=1),
                         Recorded("informers", calls, clock, takes=2),
                         (Recorded("workers", calls, clock, takes=20), 10.0))
    begun = clock.now()
    assert components.stop(35) == []
    budgets = {name: timeout for verb, name, timeout in calls if verb == "stop"}
    # The drain gets the deadline but what it leaves; the rest, what is left after it.
    assert budgets == {"workers": 25, "informers": 15, "probes": 13}
    assert clock.now() - begun == 23


def test_one_that_does_not_stop_is_named_in_one_line_and_the_rest_still_stop(
        caplog: pytest.LogCaptureFixture) -> None:
    clock, calls = FakeClock(), []
    components = started(clock, calls, Recorded("probes", calls, clock),
                         Recorded("lease", calls, clock, stuck=True),
                         Recorded("events", calls, clock, fails=True),
                         Recorded("workers", calls, clock, stuck=True))
    begun = clock.now()
    with caplog.at_level(logging.ERROR, "configmirror.lifecycle"):
        late = components.stop(12)
    assert late == ["workers", "events", "lease"]
    assert [(name, timeout) for verb, name, timeout in calls if verb == "stop"] == [
        ("workers", 12), ("events", 0), ("lease", 0), ("probes", 0)], \
        "told to stop even with nothing of the deadline left"
    assert clock.now() - begun == 12, "never longer than the deadline"
    lines = [line for line in errors(caplog) if line.startswith("shutdown:")]
    assert len(lines) == 1, errors(caplog)
    assert lines[0].startswith("shutdown: workers, events, lease did not stop within 12 s "
                               "(no time was left to wait for events, lease;")
    assert "stopping events failed" in caplog.text, "a stop that raised keeps its traceback"


def test_what_a_component_leaves_is_kept_for_the_rest_even_when_it_is_stuck() -> None:
    clock, calls = FakeClock(), []
    components = started(clock, calls, Recorded("lease", calls, clock, takes=3),
                         (Recorded("workers", calls, clock, stuck=True), 10.0))
    assert components.stop(35) == ["workers"]
    budgets = [(name, timeout) for verb, name, timeout in calls if verb == "stop"]
    assert budgets == [("workers", 25), ("lease", 10)]


def test_a_start_that_fails_half_way_is_stopped_too() -> None:
    clock, calls = FakeClock(), []

    class Breaks(Recorded):
        def start(self) -> None:
            super().start()
            raise OSError("address in use")

    components = Components(clock)
    components.start("a", Recorded("a", calls, clock))
    with pytest.raises(OSError):
        components.start("b", Breaks("b", calls, clock))
    assert components.stop(5) == []
    assert [(verb, name) for verb, name, _ in calls if verb == "stop"] == [
        ("stop", "b"), ("stop", "a")]


def test_the_deadline_counts_down_on_its_clock() -> None:
    clock = FakeClock()
    deadline = Deadline(10, clock)
    clock.step(4)
    assert deadline.left() == 6
    clock.step(7)
    assert deadline.left() == 0


# -- real threads --------------------------------------------------------------------------------


class Deaf:
    """A component whose thread ignores being told to stop until the test releases it."""

    def __init__(self, name: str, release: threading.Event) -> None:
        self.thread = OwnedThread(name, lambda: release.wait(30))

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float) -> bool:
        return self.thread.join(timeout)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    released = threading.Event()
    yield released
    released.set()


def test_the_whole_shutdown_never_takes_longer_than_its_deadline(
        release: threading.Event, caplog: pytest.LogCaptureFixture) -> None:
    deaf = [Deaf(f"deaf-{i}", release) for i in range(5)]
    components = Components()
    for i, component in enumerate(deaf):
        components.start(f"part {i}", component)
    begun = time.monotonic()
    late = components.stop(0.3)
    took = time.monotonic() - begun
    assert late == [f"part {i}" for i in reversed(range(5))]
    # Five joins of 0.3 s each would take 1.5 s: the deadline is one for all of them.
    assert 0.3 <= took < 0.6, took
    (line,) = [m for m in errors(caplog) if m.startswith("shutdown:")]
    assert "threads still running: " in line and "deaf-0" in line and "deaf-4" in line
    release.set()
    assert join((component.thread for component in deaf), 10)
    assert not any(name.startswith("deaf-") for name in lingering())


def test_an_owned_thread_is_no_daemon_and_one_never_started_has_ended(
        release: threading.Event) -> None:
    thread = OwnedThread("owned", lambda: release.wait(30))
    assert thread.join(0), "never started: nothing to wait for"
    thread.start()
    assert "owned" in lingering(), "no daemon: its owner joins it, or the exit names it"
    assert not thread.join(0.01)
    release.set()
    assert thread.join(5) and not thread.is_alive()


def test_lingering_names_neither_the_caller_nor_a_daemon(release: threading.Event) -> None:
    daemon = threading.Thread(target=lambda: release.wait(30), name="a-daemon", daemon=True)
    daemon.start()
    try:
        names = lingering()
        assert threading.current_thread().name not in names
        assert "a-daemon" not in names, "a daemon does not hold the interpreter's exit"
    finally:
        release.set()
        daemon.join(5)


def test_join_waits_for_every_thread_within_one_timeout(release: threading.Event) -> None:
    ended = OwnedThread("ends", lambda: None)
    stuck = OwnedThread("stuck", lambda: release.wait(30))
    ended.start()
    stuck.start()
    begun = time.monotonic()
    assert join([stuck, None, stuck, ended], 0.2) is False
    assert time.monotonic() - begun < 0.5
    assert ended.join(0)
    release.set()
    assert join([stuck], 10)


# -- the probes' server as a component -----------------------------------------------------------


def get(address: str, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_the_probes_serve_until_stopped_and_their_thread_is_joined() -> None:
    ready = threading.Event()
    probes = Probes("127.0.0.1:0", "0", lambda: True, ready.is_set, registry=None)
    probes.start()
    try:
        (address,) = probes.addresses
        assert get(address, "/healthz") == (200, b"ok")
        assert get(address, "/readyz") == (500, b"not ok")
        ready.set()
        assert get(address, "/readyz") == (200, b"ok")
        assert get(address, "/metrics")[0] == 404, "metrics are off ('0')"
    finally:
        begun = time.monotonic()
        assert probes.stop(5)
    assert time.monotonic() - begun < 1.0, "the serving thread sees stop within its poll"
    assert not any(name.startswith("http-") for name in lingering())
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{address}/healthz", timeout=1)


def test_one_address_for_both_serves_probes_and_metrics_on_one_server() -> None:
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    Counter("lifecycle_test", "a counter", registry=registry).inc()
    probes = Probes("127.0.0.1:0", "127.0.0.1:0", lambda: True, lambda: True, registry)
    probes.start()
    try:
        assert len(probes.addresses) == 1
        status, body = get(probes.addresses[0], "/metrics")
        assert status == 200 and b"lifecycle_test_total 1.0" in body
    finally:
        assert probes.stop(5)


def test_the_probes_stopped_with_no_time_left_are_told_and_end_soon_after() -> None:
    probes = Probes("127.0.0.1:0", "0", lambda: True, lambda: True, registry=None)
    probes.start()
    probes.stop(0)
    wait_for(lambda: not any(name.startswith("http-") for name in lingering()),
             what="the serving thread to see the stop")
    assert probes.stop(1)
