"""A fixed pool of workers draining the work queue: get -> reconcile -> forget | retry -> done.

Read it like sample-controller's controller.go: event handlers put keys in the queue (the
manager wires those), workers take one key at a time, and the reconciler compares desired
with actual. The reconciler returns a Result or raises one of `configmirror.controller.reconcile`'s
errors; everything the queue does about it is decided here (controller-runtime's
reconcileHandler):

- success: forget the key's failures; queue its follow-up keys; requeue after a delay if asked.
- RetryableError (a conflict): retry with per-key backoff; after --max-retries, give it up
  until its next change (a Warning Event says so).
- TerminalError (forbidden, invalid): forget it; it was reported where it happened.
- requeue after a delay: forget its failures, see it again then.
- anything else is a bug: traceback in the log, a counted panic, and a retry like a conflict.

An API server that does not answer is not a key's fault: `servergate.ServerGate`, wrapped
around the reconciler, holds such keys back, so they never reach these cases as errors.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from configmirror.client.events import Recorder
from configmirror.controller.reconcile import ReconcileError, Result, RetryableError, TerminalError
from configmirror.controller.workqueue import WorkQueue
from configmirror.lifecycle import Deadline, OwnedThread, join
from configmirror.metrics import Count, Metrics, Observer

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
Reconcile = Callable[[K], Result]


class Controller(Generic[K]):
    """Runs `reconcile` for queued keys on `workers` threads, never two for one key."""

    def __init__(self, name: str, queue: WorkQueue[K], reconcile: Reconcile[K],
                 workers: int = 4, metrics: Metrics | None = None,
                 recorder: Recorder | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.name = name
        self.queue = queue
        self._reconcile = reconcile
        self._workers = workers
        self._metrics = metrics or Metrics()
        self._recorder = recorder
        self._threads: list[OwnedThread] = []
        self._started = False
        self._stopping = threading.Event()
        self._metrics.max_concurrent_reconciles.labels(name).set(workers)
        # Active workers are the queue's keys in flight, read at scrape time rather than
        # counted up and down (two locks) around every reconcile.
        self._metrics.active_workers.labels(name).set_function(queue.in_flight)
        # The labelled series every reconcile touches, looked up once (labels() costs more
        # than the increment) and present from the start, as controller-runtime has them.
        self._reconcile_time = Observer(self._metrics.reconcile_time.labels(name))
        self._outcomes = {result: Count(self._metrics.reconcile_total.labels(name, result))
                          for result in ("success", "error", "requeue_after")}
        # The failure counters too, so an alert's increase() sees their first step from 0.
        for counter in (self._metrics.reconcile_errors, self._metrics.reconcile_panics,
                        self._metrics.terminal_errors, self._metrics.given_up):
            counter.labels(name)
        self._changes = {str(i): Count(self._metrics.worker_changes.labels(name, str(i)))
                         for i in range(workers)}

    def start(self) -> None:
        """Start the worker threads (once)."""
        if self._started:
            raise RuntimeError(f"controller {self.name} was already started")
        self._started = True
        for i in range(self._workers):
            thread = OwnedThread(f"{self.name}-worker-{i}", functools.partial(self._work, str(i)))
            thread.start()
            self._threads.append(thread)

    def stop(self, drain_timeout: float) -> bool:
        """Take no new keys, let in-flight reconciles finish and join the workers, all
        within `drain_timeout` seconds.

        Returns True when every worker ended in time (so every in-flight reconcile finished).
        A worker still in a reconcile then ends once that reconcile does.
        """
        deadline = Deadline(drain_timeout)
        self._stopping.set()
        if not self.queue.shutdown_with_drain(drain_timeout):
            log.warning("controller %s: in-flight work did not finish within %.0f s",
                        self.name, drain_timeout)
            self.queue.shutdown()
        return join(self._threads, deadline.left())

    def alive_workers(self) -> int:
        return sum(t.is_alive() for t in self._threads)

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
        try:
            result = self._reconcile(key)
        except Exception as err:
            self._metrics.reconcile_errors.labels(self.name).inc()
            counted["error"].inc()
            self._failed(key, err)
            return
        self.queue.forget(key)
        if result.changed:
            self._changes[worker].inc()
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
