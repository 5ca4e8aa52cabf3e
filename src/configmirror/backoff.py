"""The one retry curve every loop uses (client-go's `wait.Backoff`).

A delay starts at `initial` and grows by `factor` per failed attempt up to `cap`; each delay
is stretched by a random share of itself up to `jitter` (so that many clients do not knock in
step) and never exceeds `cap`. A success calls `reset`; with `reset_after`, a failure that
comes that long after the previous one starts from `initial` again (client-go's reflector).
"""

from __future__ import annotations

import random

from configmirror.clock import Clock


class Backoff:
    """Delays between attempts: initial * factor**step, capped, jittered, reset by a success."""

    def __init__(self, initial: float, cap: float, *, factor: float = 2.0, jitter: float = 0.0,
                 reset_after: float | None = None, clock: Clock | None = None,
                 rng: random.Random | None = None) -> None:
        if reset_after is not None and clock is None:
            raise ValueError("a Backoff that resets after a quiet time needs a clock")
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self._reset_after = reset_after
        self._clock = clock
        self._rng = rng or random.Random()
        # Failed attempts since the last reset; the next delay is at(_step).
        self._step = 0
        self._last_failure: float | None = None

    def at(self, step: int) -> float:
        """The delay after `step` earlier failures, without jitter (a pure function)."""
        try:
            return min(self.initial * self.factor ** step, self.cap)
        except OverflowError:  # a float power past 1e308: long past any cap
            return self.cap

    def next(self) -> float:
        """The wait before the next attempt, after a failure."""
        if self._clock is not None and self._reset_after is not None:
            now = self._clock.now()
            if self._last_failure is not None and now - self._last_failure > self._reset_after:
                self._step = 0
            self._last_failure = now
        delay = self.at(self._step)
        self._step += 1
        if self.jitter:
            delay *= 1 + self.jitter * self._rng.random()
        return min(delay, self.cap)

    def reset(self) -> None:
        """Start again from `initial` (an attempt succeeded: the failures before it say
        nothing about the next one)."""
        self._step = 0
        self._last_failure = None
