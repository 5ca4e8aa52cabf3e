"""When the informer checks a silent watch and when it gives it up (informer.WatchLiveness),
on made-up times: the bounds come from kube-apiserver's bookmark cadence, not from guesses."""

from __future__ import annotations

from configmirror.client.informer import (
    BOOKMARK_BOUND,
    BOOKMARK_PERIOD,
    SILENCE_CHECK,
    WatchLiveness,
)

START = 1000.0
DEADLINE = START + 330.0  # a 300 s watch and its margin


def test_the_bounds_follow_the_servers_cadence() -> None:
    assert BOOKMARK_PERIOD == 60.0  # cacher.go: defaultBookmarkFrequency = time.Minute
    assert BOOKMARK_PERIOD + 2.25 < BOOKMARK_BOUND <= BOOKMARK_PERIOD + 5.0
    assert SILENCE_CHECK == 30.0
    # After a silent drop, a missed event is found within one check and its probe: well
    # inside the minute docs/reliability.md allows, with the bookmark bound the backstop.
    assert SILENCE_CHECK + 10.0 + 5.0 < 60.0


def test_a_watch_without_bookmarks_is_never_dead_by_its_silence_alone() -> None:
    live = WatchLiveness(START, DEADLINE)
    for silence in (SILENCE_CHECK, BOOKMARK_BOUND, 5 * BOOKMARK_BOUND):
        assert live.dead(START + silence) is None


def test_a_watch_past_its_own_timeout_is_dead() -> None:
    live = WatchLiveness(START, DEADLINE)
    assert live.dead(DEADLINE - 0.01) is None
    assert live.dead(DEADLINE) == "past its timeout"


def test_a_watch_that_had_a_bookmark_is_dead_when_the_next_is_overdue() -> None:
    live = WatchLiveness(START, DEADLINE)
    live.saw(START + 60, bookmark=True)
    assert live.dead(START + 60 + BOOKMARK_BOUND - 0.01) is None
    reason = live.dead(START + 60 + BOOKMARK_BOUND)
    assert reason is not None and "no bookmark for 65 s" in reason
    live.saw(START + 70, bookmark=False)  # an event is no bookmark: the bound still counts
    assert live.dead(START + 60 + BOOKMARK_BOUND) is not None
    live.saw(START + 120, bookmark=True)
    assert live.dead(START + 60 + BOOKMARK_BOUND) is None


def test_a_silent_watch_is_probed_after_the_check_period_and_again_after_each() -> None:
    live = WatchLiveness(START, DEADLINE)
    assert not live.probe_due(START + SILENCE_CHECK - 0.01)
    assert live.probe_due(START + SILENCE_CHECK)
    live.probed(START + SILENCE_CHECK)
    assert not live.probe_due(START + 2 * SILENCE_CHECK - 0.01)
    assert live.probe_due(START + 2 * SILENCE_CHECK), "no bookmarks: every check period"


def test_an_event_restarts_the_silence() -> None:
    live = WatchLiveness(START, DEADLINE)
    live.saw(START + 20, bookmark=False)
    assert not live.probe_due(START + SILENCE_CHECK)
    assert live.probe_due(START + 20 + SILENCE_CHECK)


def test_with_bookmarks_coming_a_silence_is_probed_once() -> None:
    live = WatchLiveness(START, DEADLINE)
    live.saw(START + 60, bookmark=True)
    assert live.probe_due(START + 60 + SILENCE_CHECK)
    live.probed(START + 60 + SILENCE_CHECK)
    assert not live.probe_due(START + 60 + 2 * SILENCE_CHECK), "the bound decides from here"
    live.saw(START + 120, bookmark=True)
    assert live.probe_due(START + 120 + SILENCE_CHECK), "a new silence, a new probe"


def test_the_next_check_is_the_earliest_of_what_can_happen() -> None:
    live = WatchLiveness(START, START + 20)
    assert live.next_check() == START + 20, "the watch's own end first"
    live = WatchLiveness(START, DEADLINE)
    assert live.next_check() == START + SILENCE_CHECK
    live.probed(START + SILENCE_CHECK)
    assert live.next_check() == START + 2 * SILENCE_CHECK
    live.saw(START + 50, bookmark=True)
    assert live.next_check() == START + 50 + SILENCE_CHECK
    live.probed(START + 50 + SILENCE_CHECK)
    assert live.next_check() == START + 50 + BOOKMARK_BOUND, "the bookmark is due first"
