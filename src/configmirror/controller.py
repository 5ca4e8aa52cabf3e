"""A fixed pool of workers draining the work queue: get -> reconcile -> forget | retry -> done.

Read it like sample-controller's controller.go: event handlers put keys in the queue (the
manager wires those), workers take one key at a time, and the reconciler compares desired
with actual. The machinery here owns requeue, forget and backoff; the reconciler only returns
a Result or raises (controller-runtime's reconcileHandler).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from configmirror.metrics import Metrics
from configmirror.workqueue import WorkQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    """What a reconcile asks of the machinery: nothing, or to see the key again after a delay."""

    requeue_after: float | None = None


class TerminalError(Exception):
    """A failure that retrying cannot fix (bad input, forbidden): reported, never retried."""


Reconcile = Callable[[str], Result]
GiveUp = Callable[[str, BaseException], None]


class Controller:
    """Runs `reconcile` for queued keys on `workers` threads, never two for one key."""

    def __init__(self, name: str, queue: WorkQueue[str], reconcile: Reconcile, workers: int = 4,
                 metrics: Metrics | None = None, on_give_up: GiveUp | None = None,
                 expected_errors: tuple[type[Exception], ...] = ()) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.name = name
        self.queue = queue
        self._reconcile = reconcile
        self._workers = workers
        self._metrics = metrics or Metrics()
        self._on_give_up = on_give_up
        # Failures that come from the cluster (logged briefly); anything else is a bug.
        self._expected_errors = expected_errors
        self._threads: list[threading.Thread] = []
        self._started = False
        self._stopping = threading.Event()
        self._metrics.max_concurrent_reconciles.labels(name).set(workers)
        self._metrics.active_workers.labels(name).set(0)

    def start(self) -> None:
        """Start the worker threads (once)."""
        if self._started:
            raise RuntimeError(f"controller {self.name} was already started")
        self._started = True
        for i in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"{self.name}-worker-{i}")
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
        return drained

    def alive_workers(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    # -- one worker ---------------------------------------------------------------------------

    def _work(self) -> None:
        while (key := self.queue.get(timeout=None)) is not None:
            if self._stopping.is_set():
                # Stopping: finish what is in flight, start nothing new. Keys still queued
                # are not lost: the next leader lists everything at start-up.
                self.queue.done(key)
                return
            self._process(key)

    def _process(self, key: str) -> None:
        active = self._metrics.active_workers.labels(self.name)
        active.inc()
        started = time.monotonic()
        try:
            self._handle(key)
        finally:
            self._metrics.reconcile_time.labels(self.name).observe(time.monotonic() - started)
            active.dec()
            self.queue.done(key)

    def _handle(self, key: str) -> None:
        counted = self._metrics.reconcile_total
        try:
            result = self._reconcile(key)
        except TerminalError as err:
            log.warning("reconcile %s: %s (not retried)", key, err)
            self._metrics.reconcile_errors.labels(self.name).inc()
            counted.labels(self.name, "error").inc()
            self.queue.forget(key)
            return
        except Exception as err:
            self._metrics.reconcile_errors.labels(self.name).inc()
            counted.labels(self.name, "error").inc()
            if not isinstance(err, self._expected_errors):
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
            if self._on_give_up is not None:
                try:
                    self._on_give_up(key, err)
                except Exception:
                    log.exception("reconcile %s: reporting the give-up failed", key)
            return
        self.queue.forget(key)
        if result.requeue_after is not None and result.requeue_after > 0:
            counted.labels(self.name, "requeue_after").inc()
            self.queue.add_after(key, result.requeue_after)
        else:
            counted.labels(self.name, "success").inc()

