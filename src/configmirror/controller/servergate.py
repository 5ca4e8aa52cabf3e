"""Waiting out an API server that does not answer, without giving any key up.

A reconcile that meets an unavailable server (no answer, 429, 5xx: `ServerUnavailable`) has
done nothing wrong, so its key must not spend its retries. `ServerGate` wraps a reconciler:

- A server that said when to retry (Retry-After: API Priority and Fairness's 429, a 503)
  answered, overloaded: that key alone is retried after that long (at least
  RETRY_AFTER_FLOOR), as client-go retries each request. No outage opens, so no probe, no
  waiting keys and no log lines: a storm of 429s paces each key by the server's word.
- A server that does not answer holds such keys back: one of them, the probe, is tried again
  with backoff capped at 30 s; the others wait, out of the queue. The first sign that the
  server answers (a write, any API answer, an informer that reconnects, the operator's
  `outage.Outage` ending) puts every waiting key back in the queue at once, so an outage of
  seconds delays replicas by seconds.
- A server that answered with a conflict the cache cannot explain yet (`CacheBehind`: its
  watch is down, so our own write whose answer an outage cut off looks like someone else's)
  answered: that ends an outage, and the key alone is tried again after 0.25 s doubling to
  30 s, until the watch is back. It is never the probe: it cannot succeed before the watch
  does, and a probe that cannot succeed would hold every other key back with it (issue 42).
- A refusal (`Forbidden`: 401, 403) met while keys wait, or while the operator's outage goes
  on, is held like no answer: a kube-apiserver that has just started answers before its
  authorizer has read the RBAC objects back, and for a moment refuses what they allow (seen
  on 1.36: the first writes after a restart, a second before /readyz says ready). Forgotten
  as terminal, such a key would keep its old content until the next resync (issue 42). A
  refusal is no sign that the server serves, so it ends no outage; outside one it is terminal.

To the controller a held key is an ordinary result (the probe a requeue-after, the others a
success), so its handling stays controller-runtime's four cases.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from configmirror.backoff import Backoff
from configmirror.client.outage import Outage
from configmirror.clock import Clock, RealClock
from configmirror.controller.reconcile import (
    CacheBehind,
    Forbidden,
    ReconcileError,
    Result,
    ServerUnavailable,
)

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
RETRY_AFTER_FLOOR = 1.0  # seconds: a Retry-After of 0 is no reason for a hot loop
# A CacheBehind key's waits: a quarter second doubling to 30 s, counted per key.
CACHE_WAIT = Backoff(0.25, 30.0)


def server_backoff(rng: random.Random | None = None) -> Backoff:
    """How long the probe waits after each failed attempt: 0.25 s doubling to 30 s, jittered
    by up to a tenth so that many operators do not knock in step."""
    return Backoff(0.25, 30.0, jitter=0.1, rng=rng)


class ServerGate(Generic[K]):
    """A reconciler that holds back the keys that met an unavailable server."""

    def __init__(self, name: str, reconcile: Callable[[K], Result],
                 enqueue: Callable[[K], None], clock: Clock | None = None,
                 backoff: Backoff | None = None, outage: Outage | None = None) -> None:
        """`outage`: the operator's one view of whether the API server answers. The gate
        tells it of every answer it sees, and releases its keys whenever an outage ends,
        whoever saw the answer (an informer, the Event recorder, the outage's probe)."""
        self._name = name
        self._outage = outage
        self._reconcile = reconcile
        self._enqueue = enqueue  # puts a released key back in the queue
        self._clock = clock or RealClock()
        self._backoff = backoff or server_backoff()
        self._lock = threading.Lock()
        # The keys that met the outage and wait for the server to answer, and the one of
        # them that probes it. Both are empty, and _outage_since None, outside an outage.
        self._waiting: set[K] = set()
        self._probe: K | None = None
        self._outage_since: float | None = None
        # Keys whose cache is behind (CacheBehind) -> their next wait; each key's alone.
        self._behind: dict[K, int] = {}  # CacheBehind waits so far, per key
        if outage is not None:
            outage.listen(self._release)

    def reconcile(self, key: K) -> Result:
        probing = False
        if self._outage_since is not None:  # keys wait, and a probe exists, only in an outage
            with self._lock:
                self._waiting.discard(key)  # it is being tried now; a failure puts it back
                probing = key == self._probe
        try:
            result = self._reconcile(key)
        except CacheBehind:
            self.answered()  # a conflict is an answer: whatever waited for one, goes now
            return Result(requeue_after=self._wait_for_cache(key))
        except ServerUnavailable as err:
            if err.retry_after is not None:
                # The server answered, overloaded, and said when: an outage's probe, and a
                # release of every waiting key at its first success, would ignore that.
                return Result(requeue_after=max(err.retry_after, RETRY_AFTER_FLOOR))
            return self._hold(key, err)
        except Forbidden as err:
            self._caught_up(key)
            if self.in_outage() or (self._outage is not None and self._outage.active()):
                # A server just back refuses what its RBAC allows until its authorizer has
                # read it back (issue 42): forgotten, the key would wait for a resync.
                return self._hold(key, err)
            raise
        except ReconcileError:
            self._caught_up(key)
            self.answered()  # these come from an answer, or from the cache
            raise
        self._caught_up(key)
        if result.changed or probing:
            # A write got through, or the probe found nothing left to write: either way the
            # keys that wait have no reason to wait longer.
            self.answered()
        return result

    def answered(self) -> None:
        """The API server answers (an informer reconnected, a request got through): every key
        that waited for it goes back in the queue now."""
        if self._outage is not None:
            self._outage.answered()  # its listener, _release, is told when it ends one
        self._release()

    def _release(self) -> None:
        if self._outage_since is None:
            return  # no outage, the common case: no lock
        with self._lock:
            since = self._outage_since
            if since is None:
                return  # another thread's answer ended the outage first
            keys, self._waiting, self._probe = self._waiting, set(), None
            self._backoff.reset()
            self._outage_since = None
        log.info("%s: the API server answers again after %.1f s; retrying %d key(s)",
                 self._name, self._clock.now() - since, len(keys))
        for key in keys:
            self._enqueue(key)

    def in_outage(self) -> bool:
        """Whether keys wait for the API server now."""
        return self._outage_since is not None

    def waiting(self) -> int:
        """Keys waiting for the API server to answer again."""
        with self._lock:
            return len(self._waiting)

    def _wait_for_cache(self, key: K) -> float:
        with self._lock:
            step = self._behind.get(key, 0)
            self._behind[key] = step + 1
        return CACHE_WAIT.at(step)

    def _caught_up(self, key: K) -> None:
        if key in self._behind:  # rarely: only after a CacheBehind (no lock: a lookup)
            with self._lock:
                self._behind.pop(key, None)

    def _hold(self, key: K, err: ReconcileError) -> Result:
        with self._lock:
            self._waiting.add(key)
            if self._probe is not None and self._probe != key:
                return Result()  # another key probes; this one waits for its answer
            self._probe = key
            first = self._outage_since is None
            if first:
                self._outage_since = self._clock.now()
            delay = self._backoff.next()
        if first:
            log.warning("%s: the API server does not answer (%s); waiting for it (logged "
                        "once until it answers)", self._name, err)
        return Result(requeue_after=delay)
