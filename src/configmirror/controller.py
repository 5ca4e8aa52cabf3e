"""A fixed pool of workers draining the work queue: get -> reconcile -> forget | retry -> done.

Read it like sample-controller's controller.go: event handlers put keys in the queue (the
manager wires those), workers take one key at a time, and the reconciler compares desired
with actual. The reconciler returns a Result or raises one of `configmirror.reconcile`'s
errors; everything the queue does about it is decided here (controller-runtime's
reconcileHandler):

- success: forget the key's failures; queue its follow-up keys; requeue after a delay if asked.
- RetryableError (a conflict): retry with per-key backoff; after --max-retries, give it up
  until its next change (a Warning Event says so).
- TerminalError (forbidden, invalid): forget it; it was reported where it happened.
- ServerUnavailable (no answer, 429, 5xx): not the key's fault, so it never counts toward
  giving up. One the server said when to retry (Retry-After: API Priority and Fairness's
  429, a 503) is an answer: that key alone is retried after that long, as client-go retries
  each request. Otherwise the key waits, with every other key that met the outage, while one
  of them probes the server with backoff capped at 30 s. The first sign that the server
  answers again (a write, any API answer, an informer that reconnects) releases them all.
- anything else is a bug: traceback in the log, a counted panic, and a retry like a conflict.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from configmirror.clock import Clock, RealClock
from configmirror.events import EventRecorder
from configmirror.metrics import Metrics
from configmirror.reconcile import (
    ReconcileError,
    Result,
    RetryableError,
    ServerUnavailable,
    TerminalError,
)
from configmirror.workqueue import WorkQueue

log = logging.getLogger(__name__)
RETRY_AFTER_FLOOR = 1.0  # seconds: a Retry-After of 0 is no reason for a hot loop

K = TypeVar("K", bound=Hashable)
Reconcile = Callable[[K], Result]


class ServerBackoff:
    """How long the probe waits after each failed attempt: 0.25 s doubling to `cap` (30 s),
    jittered by up to a tenth so that many operators do not knock in step."""

    def __init__(self, initial: float = 0.25, cap: float = 30.0,
                 rng: random.Random | None = None) -> None:
        self._initial = initial
        self._cap = cap
        self._rng = rng or random.Random()
        self._next = initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        return min(delay * (1 + self._rng.random() / 10), self._cap)

    def reset(self) -> None:
        self._next = self._initial


class Controller(Generic[K]):
    """Runs `reconcile` for queued keys on `workers` threads, never two for one key."""

    def __init__(self, name: str, queue: WorkQueue[K], reconcile: Reconcile[K],
                 workers: int = 4, metrics: Metrics | None = None,
                 recorder: EventRecorder | None = None, clock: Clock | None = None,
                 server_backoff: ServerBackoff | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.name = name
        self.queue = queue
        self._reconcile = reconcile
        self._workers = workers
        self._metrics = metrics or Metrics()
        self._recorder = recorder
        self._clock = clock or RealClock()
        self._threads: list[threading.Thread] = []
        self._started = False
        self._stopping = threading.Event()
        # Keys that met an unavailable server, waiting for it to answer. One of them, the
        # probe, is retried with backoff; the others are released when it (or anything else)
        # gets an answer.
        self._lock = threading.Lock()
        self._waiting: set[K] = set()
        self._probe: K | None = None
        self._backoff = server_backoff or ServerBackoff()
        self._outage_since: float | None = None
        self._metrics.max_concurrent_reconciles.labels(name).set(workers)
        # Active workers are the queue's keys in flight, read at scrape time rather than
        # counted up and down (two locks) around every reconcile.
        self._metrics.active_workers.labels(name).set_function(queue.in_flight)
        # The labelled series every reconcile touches, looked up once (labels() costs more
        # than the increment) and present from the start, as controller-runtime has them.
        self._reconcile_time = self._metrics.reconcile_time.labels(name)
        self._outcomes = {result: self._metrics.reconcile_total.labels(name, result)
                          for result in ("success", "error", "requeue_after")}
        self._changes = {str(i): self._metrics.worker_changes.labels(name, str(i))
                         for i in range(workers)}

    def start(self) -> None:
        """Start the worker threads (once)."""
        if self._started:
            raise RuntimeError(f"controller {self.name} was already started")
        self._started = True
        for i in range(self._workers):
            thread = threading.Thread(target=self._work, args=(str(i),),
                                      name=f"{self.name}-worker-{i}")
            thread.start()
            self._threads.append(thread)

    def stop(self, drain_timeout: float) -> bool:
        """Take no new keys, let in-flight reconciles finish (up to `drain_timeout`), join.

        Returns True when every in-flight reconcile finished in time.
        """
        self._stopping.set()
        drained = self.queue.shutdown_with_drain(drain_timeout)
        if not drained:
            log.warning("controller %s: in-flight work did not finish within %.0f s",
                        self.name, drain_timeout)
            self.queue.shutdown()
        for thread in self._threads:
            thread.join(timeout=max(drain_timeout, 1.0))
            if thread.is_alive():
                log.error("controller %s: %s did not stop", self.name, thread.name)
        return drained

    def alive_workers(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    def waiting_for_server(self) -> int:
        """Keys waiting for the API server to answer again."""
        with self._lock:
            return len(self._waiting)

    def server_answered(self) -> None:
        """The API server answers (an informer reconnected, a request got through): every key
        that waited for it goes back in the queue now."""
        if self._outage_since is None:
            return  # no outage, the common case: no lock (keys wait only during one)
        with self._lock:
            if self._outage_since is None:
                return
            keys, self._waiting, self._probe = self._waiting, set(), None
            self._backoff.reset()
            since, self._outage_since = self._outage_since, None
        took = self._clock.now() - since if since is not None else 0.0
        log.info("controller %s: the API server answers again after %.1f s; retrying %d "
                 "key(s)", self.name, took, len(keys))
        for key in keys:
            self.queue.add(key)

    # -- one worker ---------------------------------------------------------------------------

    def _work(self, worker: str) -> None:
        while (key := self.queue.get(timeout=None)) is not None:
            if self._stopping.is_set():
                # Stopping: finish what is in flight, start nothing new. Keys still queued
                # are not lost: the next leader lists everything at start-up.
                self.queue.done(key)
                return
            self._process(key, worker)

    def _process(self, key: K, worker: str) -> None:
        started = time.monotonic()
        try:
            self._handle(key, worker)
        finally:
            self._reconcile_time.observe(time.monotonic() - started)
            self.queue.done(key)

    def _handle(self, key: K, worker: str) -> None:
        counted = self._outcomes
        probing = False
        if self._outage_since is not None:  # keys wait, and a probe exists, only in an outage
            with self._lock:
                self._waiting.discard(key)  # it is being tried now; a failure puts it back
                probing = key == self._probe
        try:
            result = self._reconcile(key)
        except ServerUnavailable as err:
            self._metrics.reconcile_errors.labels(self.name).inc()
            counted["error"].inc()
            if err.retry_after is not None:
                # The server answered, overloaded, and said when: an outage's probe and a
                # release of every waiting key at its first success would ignore that.
                self.queue.add_after(key, max(err.retry_after, RETRY_AFTER_FLOOR))
                return
            self._wait_for_server(key, err)
            return
        except Exception as err:
            self._metrics.reconcile_errors.labels(self.name).inc()
            counted["error"].inc()
            if isinstance(err, ReconcileError):
                self.server_answered()  # these come from an answer, or from the cache
            self._failed(key, err)
            return
        self.queue.forget(key)
        if result.changed:
            self._changes[worker].inc()
        if result.changed or probing:
            # A write got through, or the probe found nothing left to write: either way the
            # keys that waited have no reason to wait longer.
            self.server_answered()
        for follow_up in result.follow_up:
            self.queue.add(follow_up)  # type: ignore[arg-type]
        if result.requeue_after is not None and result.requeue_after > 0:
            counted["requeue_after"].inc()
            self.queue.add_after(key, result.requeue_after)
        else:
            counted["success"].inc()

    def _failed(self, key: K, err: Exception) -> None:
        if isinstance(err, TerminalError):
            log.warning("reconcile %s: %s (not retried until it changes)", key, err)
            self._metrics.terminal_errors.labels(self.name).inc()
            self.queue.forget(key)
            return
        if not isinstance(err, RetryableError):
            # A bug, not the cluster: keep the traceback, keep the worker.
            self._metrics.reconcile_panics.labels(self.name).inc()
            log.exception("reconcile %s: unexpected error", key)
        if self.queue.retry(key):
            log.debug("reconcile %s failed (attempt %d), retrying: %s", key,
                      self.queue.num_requeues(key), err)
            return
        log.error("reconcile %s: giving up after %d attempts: %s", key,
                  self.queue.num_requeues(key), err)
        self._metrics.given_up.labels(self.name).inc()
        self.queue.forget(key)
        subject = err.subject if isinstance(err, ReconcileError) else None
        if subject is not None and self._recorder is not None:
            self._recorder.warning(subject, "ReplicationFailed",
                                   f"giving up until the next change or resync: {err}")

    def _wait_for_server(self, key: K, err: ServerUnavailable) -> None:
        with self._lock:
            self._waiting.add(key)
            if self._probe is not None and self._probe != key:
                return  # another key is probing; this one waits for its answer
            self._probe = key
            first = self._outage_since is None
            if first:
                self._outage_since = self._clock.now()
            delay = max(self._backoff.next(), err.retry_after or 0.0)
        if first:
            log.warning("controller %s: the API server does not answer (%s); waiting for it "
                        "(logged once until it answers)", self.name, err)
        self.queue.add_after(key, delay)
