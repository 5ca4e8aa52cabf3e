"""The informer's reconnect backoff: client-go's 0.8 s doubling to 30 s, jittered, reset."""

from __future__ import annotations

import random

from configmirror.clock import FakeClock
from configmirror.informer import Backoff


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    clock = FakeClock()
    backoff = Backoff(clock, rng=random.Random(1))
    bases = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    for base in bases:
        delay = backoff.next()
        assert base <= delay < 2 * base
        clock.step(delay)


def test_backoff_resets_after_two_quiet_minutes() -> None:
    clock = FakeClock()
    backoff = Backoff(clock, rng=random.Random(2))
    for _ in range(5):
        backoff.next()
    clock.step(121)
    assert backoff.next() < 1.6
