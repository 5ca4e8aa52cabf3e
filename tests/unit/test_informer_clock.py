"""The informer keeps time only by its clock: on a FakeClock, a test decides when a watch is
silent, when it is probed, when it is given up, and how long a failed list waits, by stepping
the clock. FakeKube's watches wait on the same clock, as a socket waits real seconds, so a
watch is silent for exactly as long as the test steps it, and nothing sleeps."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from configmirror.client.informer import (
    BOOKMARK_BOUND,
    PROBE_GRACE,
    PROBE_HEAD_TIMEOUT,
    SILENCE_CHECK,
    Informer,
    reflector_backoff,
)
from configmirror.client.kube import ApiError
from configmirror.client.store import Store
from configmirror.clock import FakeClock
from configmirror.metrics import Metrics
from configmirror_testing.fakekube import FakeKube, FakeWatch
from configmirror_testing.wait import wait_for

NAME = "configmaps"
PATH = "/api/v1/configmaps"
START = 1000.0
LISTED = "5"  # the resourceVersion the informer's list answers
SEED = 7


def bookmark(version: str) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": version}}}


def added(version: str) -> dict[str, Any]:
    return {"type": "ADDED", "object": {"metadata": {
        "namespace": "a", "name": "cfg", "resourceVersion": version}}}


class Watched:
    """An informer of ConfigMaps on FakeKube, both on one FakeClock, its jitter seeded."""

    def __init__(self) -> None:
        self.clock = FakeClock(START)
        self.kube = FakeKube(clock=self.clock, revision=int(LISTED))
        self.metrics = Metrics()
        self.informer: Informer[dict[str, Any]] = Informer(
            self.kube, PATH, lambda raw: raw, Store(), lambda old, new: None, NAME,
            metrics=self.metrics, clock=self.clock, rng=random.Random(SEED))
        self.started = False

    def start(self) -> None:
        self.informer.start()
        self.started = True

    def stop(self) -> None:
        """Stop the informer, once."""
        if self.started:
            self.started = False
            self.informer.stop()

    def watch(self, n: int) -> FakeWatch:
        """The n-th watch opened (0: the first), once it is."""
        return wait_for(lambda: (opened := self.kube.opened_watches())[n:] and opened[n],
                        what=f"watch {n} to be opened")

    def reading_until(self, at: float) -> None:
        """Wait until the informer's one wait on the clock is for `at` (a watch's read, or
        a backoff): the time it acts next, unless something arrives first."""
        wait_for(lambda: self.clock.wake_times() == [pytest.approx(at)],
                 what=f"the informer to wait on the clock until {at}")

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, {"resource": NAME, **labels})
        return value or 0.0

    def lists(self) -> int:
        return self.kube.verbs().count("list")


@pytest.fixture
def watched() -> Iterator[Watched]:
    w = Watched()
    yield w
    w.stop()


def test_a_watch_whose_bookmarks_stop_is_replaced_once_the_next_is_overdue_on_the_fake_clock(
        watched: Watched) -> None:
    watched.start()
    first = watched.watch(0)
    first.send(bookmark("9"))
    wait_for(lambda: watched.informer.resource_version == "9"
             and watched.clock.wake_times() == [START + SILENCE_CHECK],
             what="the bookmark applied, and the watch read again")
    watched.clock.step(BOOKMARK_BOUND)  # the silence bound, and not one event
    second = watched.watch(1)
    assert first.closed(), "the silent watch is given up"
    assert second.query["resourceVersion"] == "9", "re-opened from the last bookmark"
    assert watched.metric("configmirror_informer_silent_watches_total") == 1
    assert watched.lists() == 1, "a silent watch needs no relist, only a new watch"
    assert watched.kube.discarded == 1, "the idle connections it may share go with it"


def test_a_silent_watch_is_probed_once_silent_for_the_check_period_on_the_fake_clock(
        watched: Watched) -> None:
    watched.start()
    watched.watch(0)
    watched.reading_until(START + SILENCE_CHECK)
    watched.clock.step(SILENCE_CHECK)
    probe = watched.watch(1)
    assert probe.query["resourceVersion"] == LISTED, "from the version the watch is at"
    assert probe.query["timeoutSeconds"] == 1 and "allowWatchBookmarks" not in probe.query
    assert watched.kube.written()[-1].options["reuse"] == PROBE_HEAD_TIMEOUT, \
        "on an idle pooled connection first"


def test_a_probe_that_finds_nothing_missed_keeps_the_silent_watch(watched: Watched) -> None:
    watched.start()
    first = watched.watch(0)
    watched.reading_until(START + SILENCE_CHECK)
    watched.clock.step(SILENCE_CHECK)
    watched.watch(1).end()  # the probe: no event since the watch's version
    watched.reading_until(START + 2 * SILENCE_CHECK)  # the same watch, checked again later
    assert watched.metric("configmirror_informer_watch_probes_total",
                          result="nothing missed") == 1
    assert not first.closed() and len(watched.kube.opened_watches()) == 2
    assert watched.metric("configmirror_informer_silent_watches_total") == 0


def probed_into_its_grace(watched: Watched) -> FakeWatch:
    """Start, let the first watch go silent until it is probed, have the probe find an event
    the watch has not delivered, and read on until the grace ends on the clock; the first
    watch."""
    watched.start()
    first = watched.watch(0)
    watched.reading_until(START + SILENCE_CHECK)
    watched.clock.step(SILENCE_CHECK)
    probe = watched.watch(1)
    probe.send(added("6"))
    probe.end()
    watched.reading_until(START + SILENCE_CHECK + PROBE_GRACE)
    return first


def test_a_watch_that_delivers_what_its_probe_found_within_the_grace_is_kept(
        watched: Watched) -> None:
    first = probed_into_its_grace(watched)
    first.send(added("6"))
    watched.reading_until(START + 2 * SILENCE_CHECK)  # a new silence from the event on
    assert watched.informer.resource_version == "6"
    assert watched.metric("configmirror_informer_watch_probes_total", result="missed") == 1
    assert not first.closed() and len(watched.kube.opened_watches()) == 2
    assert watched.metric("configmirror_informer_silent_watches_total") == 0


def test_a_watch_that_does_not_deliver_what_its_probe_found_within_the_grace_is_replaced(
        watched: Watched) -> None:
    first = probed_into_its_grace(watched)
    watched.clock.step(PROBE_GRACE)
    second = watched.watch(2)
    assert first.closed()
    assert second.query["resourceVersion"] == LISTED, "from where the dead one was"
    assert watched.metric("configmirror_informer_silent_watches_total") == 1


def test_a_failing_list_is_retried_after_exactly_each_backoff_delay_on_the_fake_clock(
        watched: Watched) -> None:
    failures = 3
    watched.kube.failures += [ApiError(500, "InternalError", "down", "list", PATH)] * failures
    twin = reflector_backoff(FakeClock(), random.Random(SEED))  # the informer's, drawn alike
    delays = [twin.next() for _ in range(failures)]
    assert delays[0] < delays[1] < delays[2], "it backs off"
    watched.start()
    for attempt, delay in enumerate(delays, 1):
        wait_for(lambda attempt=attempt, delay=delay: watched.lists() == attempt
                 and watched.clock.wake_times() == [watched.clock.now() + delay],
                 what=f"list {attempt} to fail and wait {delay} s")
        watched.clock.step(delay)
    watched.watch(0)
    assert watched.lists() == failures + 1
    wait_for(watched.informer.has_synced, what="the informer to sync")


def test_stop_ends_a_backoff_wait_on_the_fake_clock_at_once(watched: Watched) -> None:
    watched.kube.failures.append(ApiError(500, "InternalError", "down", "list", PATH))
    watched.start()
    wait_for(lambda: watched.lists() == 1 and watched.clock.waiters() == 1,
             what="the failed list's backoff")
    watched.stop()  # the clock never moves: only stop can end the wait
    assert watched.clock.waiters() == 0, "the reader no longer waits"
    assert watched.lists() == 1, "and tried nothing more"


def test_the_last_event_age_is_the_clocks_seconds_since_the_last_event(
        watched: Watched) -> None:
    watched.start()
    watched.watch(0).send(bookmark("9"))
    wait_for(lambda: watched.informer.resource_version == "9", what="the bookmark")
    watched.clock.step(12.0)
    assert watched.metric("configmirror_informer_last_event_age_seconds") == 12.0
