"""The one retry curve: initial, doubling to a cap, jittered, reset by a success or (the
informer's reflector curve) by two quiet minutes."""

from __future__ import annotations

import random

import pytest

from configmirror.backoff import Backoff
from configmirror.client.informer import reflector_backoff
from configmirror.clock import FakeClock


def first_draw(seed: int) -> float:
    """What a random.Random(seed) given to a Backoff draws first."""
    return random.Random(seed).random()


def test_delays_double_from_the_initial_one_to_the_cap() -> None:
    backoff = Backoff(0.5, 5.0)
    assert [backoff.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_a_factor_other_than_two_grows_by_that_factor() -> None:
    backoff = Backoff(1.0, 100.0, factor=3.0)
    assert [backoff.next() for _ in range(4)] == [1.0, 3.0, 9.0, 27.0]


def test_reset_starts_from_the_initial_delay_again() -> None:
    backoff = Backoff(0.5, 30.0)
    for _ in range(4):
        backoff.next()
    backoff.reset()
    assert backoff.next() == 0.5


def test_jitter_stretches_a_delay_by_at_most_its_share_and_never_past_the_cap() -> None:
    tenth = Backoff(1.0, 30.0, jitter=0.1, rng=random.Random(3))
    assert tenth.next() == pytest.approx(1.0 + 0.1 * first_draw(3))
    whole = Backoff(1.0, 30.0, jitter=1.0, rng=random.Random(4))
    assert whole.next() == pytest.approx(1.0 + first_draw(4))
    assert first_draw(5) > 0.5, "the next delay would pass the cap unless capped"
    assert Backoff(20.0, 30.0, jitter=1.0, rng=random.Random(5)).next() == 30.0


def test_at_is_the_unjittered_delay_of_a_step_and_survives_huge_steps() -> None:
    curve = Backoff(0.005, 1000.0, jitter=1.0)
    assert [curve.at(n) for n in (0, 1, 2)] == [0.005, 0.01, 0.02]
    assert curve.at(5000) == 1000.0


def test_a_factor_of_one_keeps_the_initial_delay() -> None:
    assert [Backoff(2.0, 30.0, factor=1.0).at(n) for n in (0, 1, 5000)] == [2.0, 2.0, 2.0]


def test_a_clock_without_a_quiet_time_never_resets_the_curve() -> None:
    clock = FakeClock()
    backoff = Backoff(1.0, 30.0, clock=clock)
    backoff.next()
    clock.step(10_000)
    assert backoff.next() == 2.0


def test_a_quiet_time_resets_only_with_a_clock() -> None:
    with pytest.raises(ValueError, match="needs a clock"):
        Backoff(1.0, 2.0, reset_after=10.0)


def test_reflector_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    clock = FakeClock()
    backoff = reflector_backoff(clock, rng=random.Random(1))
    for base in [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]:
        delay = backoff.next()
        assert base <= delay < 2 * base and delay <= 30.0
        clock.step(delay)


def test_reflector_backoff_resets_after_two_quiet_minutes_but_not_before() -> None:
    clock = FakeClock()
    backoff = reflector_backoff(clock, rng=random.Random(6))
    twin = random.Random(6)
    for _ in range(5):
        backoff.next()
        twin.random()
    clock.step(120)
    assert backoff.next() == pytest.approx(min(25.6 * (1 + twin.random()), 30.0)), \
        "exactly two minutes is not past them"
    clock.step(120.5)
    assert backoff.next() == pytest.approx(0.8 * (1 + twin.random()))
