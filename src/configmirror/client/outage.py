"""Whether the API server answers: one answer for every part of the operator that waits for it.

Each part that talks to the API server backs off on its own when it gets no answer: the
workers (`servergate.ServerGate`), the informers (client-go's reflector backoff, up to 30 s),
the Event recorder (up to 30 s), the leader elector. Left alone, each would finish a backoff
it began during an outage long after the server is back: an Event queued during a 20 s outage
could wait 30 s more. So they share one `Outage`. Each tells it when a request got no answer
(`failed`) and when one got an answer (`answered`), and waits out its backoff in `wait`,
which ends the moment the outage does, whoever saw the answer.

While an outage lasts, its own probe (`GET /readyz`, which the apiserver answers 200 once its
storage is ready, and lets every client read) asks every PROBE_INTERVAL, so its end is seen
within about that long even when every part is deep in its backoff: one cheap request a
second, to a server that is not there.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from configmirror.client.kube import ApiError, Kube
from configmirror.clock import Clock, RealClock
from configmirror.lifecycle import OwnedThread

log = logging.getLogger(__name__)
PROBE_INTERVAL = 0.5  # seconds between two probes of an outage (jittered by up to a tenth)
PROBE_TIMEOUT = 2.0   # one probe's request: a server that answers, answers /readyz at once


def no_answer(err: BaseException) -> bool:
    """Whether a failed request got no answer at all (refused, reset, timed out): what
    begins an outage. A 429 or a 5xx is an answer: the server is there, and paces us."""
    return not isinstance(err, ApiError) or err.status == 0


def served(err: BaseException) -> bool:
    """Whether a failed request was served all the same: the server authorized it and said
    why not (400, 404, 409, 422: its state is ours to act on), which ends an outage. No answer,
    429, 5xx and refusals (401, 403) do not: a server just back refuses what its RBAC allows
    until its authorizer has read it back."""
    return isinstance(err, ApiError) and 400 <= err.status < 500 and \
        err.status not in (401, 403, 429)


def readyz(kube: Kube) -> Callable[[], bool]:
    """A probe: whether the API server says it is ready (/readyz 200, which every client may
    read: system:public-info-viewer). Anything else is not yet: a cluster that refuses it to
    us leaves the outage to end by the other parts' answers."""

    def probe() -> bool:
        try:
            kube.request("get", "/readyz", timeout=PROBE_TIMEOUT)
        except ApiError:
            return False
        return True

    return probe


class Outage:
    """The API server's outage as the whole operator sees it: begun by the first request
    that got no answer, ended by the first that got one (or by the probe)."""

    def __init__(self, probe: Callable[[], bool] | None = None, clock: Clock | None = None,
                 interval: float = PROBE_INTERVAL, rng: random.Random | None = None) -> None:
        self._probe = probe
        self._clock = clock or RealClock()
        self._interval = interval
        self._rng = rng or random.Random()
        self._cond = threading.Condition()
        # Outages that have ended so far: a waiter marks the one it is in by this count, and
        # is woken when it grows. _since is when the current outage began (None: no outage).
        self._ended = 0
        self._since: float | None = None
        self._listeners: list[Callable[[], None]] = []
        self._stopping = False
        self._thread: OwnedThread | None = None

    # -- what every part that talks to the API server uses ---------------------------------

    def failed(self) -> int:
        """A request got no answer: an outage begins if none has. Returns the mark of the
        outage now going on, for `wait`."""
        with self._cond:
            if self._since is None:
                self._since = self._clock.now()
                self._cond.notify_all()  # the probe starts
            return self._ended

    def answered(self) -> None:
        """A request got an answer: the outage, if one is going on, ends now; every `wait` for
        it returns, and every listener is told."""
        if self._since is None:
            return  # no outage, the common case: no lock
        with self._cond:
            if self._since is None:
                return  # another answer ended it first
            lasted = self._clock.now() - self._since
            self._since = None
            self._ended += 1
            self._cond.notify_all()
            listeners = list(self._listeners)
        log.debug("the API server answers again after %.1f s", lasted)
        for listener in listeners:
            listener()

    def wait(self, mark: int, seconds: float, stopped: Callable[[], bool]) -> bool:
        """Wait `seconds` of the clock, or less: until the outage `mark` names has ended
        (True), or until `stopped()` holds after an `interrupt`."""
        with self._cond:
            until = self._clock.now() + seconds
            while self._ended == mark and not stopped() and self._clock.now() < until:
                self._clock.wait(self._cond, until, None)
            return self._ended != mark

    def interrupt(self) -> None:
        """Wake every `wait`, so that its caller, stopping, sees `stopped()`."""
        with self._cond:
            self._cond.notify_all()

    def listen(self, listener: Callable[[], None]) -> None:
        """Call `listener` (on the thread that saw the answer) each time an outage ends."""
        with self._cond:
            self._listeners.append(listener)

    def active(self) -> bool:
        """Whether an outage is going on now."""
        return self._since is not None

    # -- the probe's thread (a component of the manager) ---------------------------------------

    def start(self) -> None:
        """Start the probe's thread (which sleeps until an outage begins)."""
        if self._probe is None:
            raise RuntimeError("an outage without a probe has no thread to start")
        self._thread = OwnedThread("outage-probe", self._run)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the probe; True once its thread has ended, within `timeout` seconds (a probe
        in flight ends within its own PROBE_TIMEOUT)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        return self._thread is None or self._thread.join(timeout)

    def _run(self) -> None:
        assert self._probe is not None
        while True:
            with self._cond:
                while self._since is None and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                mark = self._ended
                until = self._clock.now() + self._interval * (1 + self._rng.random() / 10)
                while self._ended == mark and not self._stopping and self._clock.now() < until:
                    self._clock.wait(self._cond, until, None)
                if self._ended != mark or self._stopping:
                    continue  # someone else saw the answer first
            if self._probe():
                self.answered()
