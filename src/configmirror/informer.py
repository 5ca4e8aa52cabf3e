"""List-then-watch one resource kind into a Store, and tell a handler what changed.

What it does that the official client's Watch and SharedInformer do not: a client-side read
timeout (a dead connection is noticed), bookmarks, reconnecting from the last resourceVersion
without relisting when a stream ends, a relist diffed against the cache after 410 Gone (with
delete notifications for objects that vanished in the gap), backoff with jitter, one log line
per outage instead of one per retry, and resync from the cache without any API call.

Two threads, both its own: the reader lists and watches and is the only writer of the store;
the dispatcher calls the handler, in order, for every change and for the periodic resync
(client-go's processorListener), so a handler never runs on two threads at once and never
holds up the watch.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from configmirror.clock import Clock, RealClock
from configmirror.kube import ApiError, Kube, WatchStream
from configmirror.metrics import Metrics
from configmirror.store import Store

T = TypeVar("T")
log = logging.getLogger(__name__)

# Called with (old, new): (None, obj) added, (obj, obj') updated or resynced, (obj, None) deleted.
Handler = Callable[[T | None, T | None], None]

MIN_WATCH_TIMEOUT = 300  # client-go: a server-side timeout in [5, 10) minutes, randomized
READ_TIMEOUT_MARGIN = 30.0


class Backoff:
    """client-go's reflector backoff: 0.8 s doubling to 30 s, jittered into [d, 2d), and reset
    to the start after 2 minutes without a failure."""

    def __init__(self, clock: Clock, initial: float = 0.8, cap: float = 30.0,
                 reset_after: float = 120.0, rng: random.Random | None = None) -> None:
        self._clock = clock
        self._initial = initial
        self._cap = cap
        self._reset_after = reset_after
        self._rng = rng or random.Random()
        self._delay = initial
        self._last_failure: float | None = None

    def next(self) -> float:
        """The wait before the next attempt after a failure."""
        now = self._clock.now()
        if self._last_failure is not None and now - self._last_failure > self._reset_after:
            self._delay = self._initial
        self._last_failure = now
        delay = self._delay
        self._delay = min(self._delay * 2, self._cap)
        return delay * (1 + self._rng.random())


class _Gone(Exception):
    """The resourceVersion we watch from has been compacted away: relist."""


class Informer(Generic[T]):
    """Keeps `store` equal to the cluster's objects at `path` and reports every change."""

    def __init__(self, kube: Kube, path: str, transform: Callable[[dict[str, Any]], T],
                 store: Store[T], handler: Handler[T], name: str,
                 metrics: Metrics | None = None, clock: Clock | None = None,
                 page_size: int = 500, min_watch_timeout: int = MIN_WATCH_TIMEOUT,
                 resync_period: float = 0.0,
                 on_recovered: Callable[[], None] | None = None,
                 query: dict[str, str] | None = None) -> None:
        self.name = name
        self.store = store
        self._kube = kube
        self._path = path
        self._transform = transform
        self._handler = handler
        self._metrics = metrics
        self._clock = clock or RealClock()
        self._page_size = page_size
        self._min_watch_timeout = min_watch_timeout
        self._resync_period = resync_period
        self._query = dict(query or {})  # e.g. a fieldSelector, on every list and watch
        self._on_recovered = on_recovered
        self._stopped = threading.Event()
        self._synced = threading.Event()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None
        # Changes waiting for the dispatcher, in the order the reader saw them.
        self._changes: deque[tuple[T | None, T | None] | None] = deque()  # None: synced
        self._changed = threading.Condition()
        self._dispatcher: threading.Thread | None = None
        self._outage: str | None = None  # the error being retried, logged once
        self._failures = 0
        self.resource_version = ""
        self.last_event_at = time.time()
        if metrics is not None:
            metrics.informer_last_event_age.labels(name).set_function(
                lambda: time.time() - self.last_event_at)

    # -- lifecycle (owned by the manager) ---------------------------------------------------

    def start(self) -> None:
        """Start the list/watch thread and the dispatcher."""
        self._dispatcher = threading.Thread(target=self._dispatch,
                                            name=f"informer-{self.name}-dispatch")
        self._dispatcher.start()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}")
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop watching, unblock a pending read, and join both threads."""
        self._stopped.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        with self._changed:
            self._changed.notify()
        for thread in (self._thread, self._dispatcher):
            if thread is not None:
                thread.join(timeout)
                if thread.is_alive():
                    log.error("informer %s: %s did not stop within %.0f s", self.name,
                              thread.name, timeout)

    def list_once(self) -> None:
        """One LIST into the store, without watching or telling the handler (for `plan`)."""
        self._list(notify=False)

    def has_synced(self) -> bool:
        """True once the first list is in the store and the handler has been told of it."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def watermark(self) -> int:
        """The newest resourceVersion whose changes are in the store (0 before the first list).

        Read it before the store: what the store holds afterwards is at least this new.
        """
        try:
            return int(self.resource_version)
        except ValueError:
            return 0

    def watching(self) -> bool:
        """Whether a watch is open and no failure is being retried: the cache is current to
        within the watch's delay. False during an outage, when the cache may be far behind."""
        with self._lock:
            return self._stream is not None and self._outage is None

    def pending(self) -> int:
        """Changes the handler has not been told about yet."""
        with self._changed:
            return len(self._changes)

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = Backoff(self._clock)
        need_list = not self._synced.is_set()  # list_once() may have listed already
        while not self._stopped.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
            except _Gone:
                # Events were lost in the gap: only a relist can tell what changed.
                log.info("informer %s: resourceVersion %s expired; relisting", self.name,
                         self.resource_version)
                need_list = True
                self._count_watch_restart()
            except (ApiError, OSError, ValueError) as err:
                if self._stopped.is_set():
                    break
                # No answer or throttled: the server still has our version, so just re-watch.
                no_answer = not isinstance(err, ApiError) or err.status in (0, 429)
                need_list = need_list or not no_answer
                self._failed(err, backoff.next())
            except Exception:  # a bug: log it whole, keep the informer alive
                log.exception("informer %s: unexpected error; relisting", self.name)
                need_list = True
                self._stopped.wait(backoff.next())

    def _list(self, notify: bool = True) -> None:
        items: dict[str, T] = {}
        query: dict[str, Any] = {**self._query, "limit": self._page_size}
        while True:
            try:
                body = self._kube.request("list", self._path, query, timeout=120)
            except ApiError as err:
                if err.status == 410 and "continue" in query:  # the continue token expired
                    items, query = {}, {**self._query, "limit": self._page_size}
                    continue
                raise
            for raw in body.get("items") or ():
                items[_key(raw)] = self._transform(raw)
            meta = body.get("metadata") or {}
            if not meta.get("continue"):
                break
            query["continue"] = meta["continue"]
        deleted, changed = self.store.replace(items)
        self.resource_version = str(meta.get("resourceVersion", ""))
        if self._metrics is not None:
            self._metrics.informer_relists.labels(self.name).inc()
        if notify:
            for gone in deleted.values():
                self._notify(gone, None)
            for before, after in changed.values():
                self._notify(before, after)
        if not notify:
            self._synced.set()
        elif not self._synced.is_set():
            with self._changed:  # synced once the dispatcher has told the handler all of it
                self._changes.append(None)
                self._changed.notify()
        log.debug("informer %s: listed %d objects at %s (%d changed, %d gone)", self.name,
                  len(items), self.resource_version, len(changed), len(deleted))

    def _watch(self) -> None:
        timeout = random.randint(self._min_watch_timeout, 2 * self._min_watch_timeout - 1)
        stream = self._kube.watch(self._path, {
            **self._query, "resourceVersion": self.resource_version, "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout}, read_timeout=timeout + READ_TIMEOUT_MARGIN)
        with self._lock:
            if self._stopped.is_set():
                stream.close()
                return
            self._stream = stream
        self._recovered()
        started, events = self._clock.now(), 0
        try:
            for event in stream:
                events += 1
                self._apply(event)
        finally:
            with self._lock:
                self._stream = None
            stream.close()
        if events == 0 and self._clock.now() - started < 1.0 and not self._stopped.is_set():
            raise ApiError(0, "VeryShortWatch", "watch closed at once with no events", "watch",
                           self._path)
        self._count_watch_restart()

    def _apply(self, event: dict[str, Any]) -> None:
        kind, raw = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if raw.get("code") == 410:
                raise _Gone()
            raise ApiError(int(raw.get("code") or 500), str(raw.get("reason", "")),
                           str(raw.get("message", "")), "watch", self._path)
        version = str((raw.get("metadata") or {}).get("resourceVersion", ""))
        if self._metrics is not None:
            self._metrics.child(self._metrics.informer_events, self.name, str(kind)).inc()
        self.last_event_at = time.time()
        if kind == "BOOKMARK":
            self.resource_version = version
            return
        key = _key(raw)
        if kind in ("ADDED", "MODIFIED"):
            new = self._transform(raw)
            old = self.store.upsert(key, new)
            if old != new:  # equal: an event seen already (a watch resumed just before it)
                self._notify(old, new)
        elif kind == "DELETED":
            last = self.store.delete(key)
            self._notify(last if last is not None else self._transform(raw), None)
        self.resource_version = version

    # -- helpers ------------------------------------------------------------------------------

    def _notify(self, old: T | None, new: T | None) -> None:
        with self._changed:
            self._changes.append((old, new))
            self._changed.notify()

    def _dispatch(self) -> None:
        """The dispatcher: tell the handler every change in order, and resync on schedule."""
        period = self._resync_period
        next_resync = self._clock.now() + period
        while True:
            with self._changed:
                while not self._changes and not self._stopped.is_set():
                    if period > 0 and self._clock.now() >= next_resync:
                        break
                    wait = max(next_resync - self._clock.now(), 0.0) if period > 0 else None
                    self._changed.wait(wait if wait is None else min(wait, 1.0))
                if self._stopped.is_set():
                    return
                batch = list(self._changes)
                self._changes.clear()
            for change in batch:
                if change is None:
                    self._synced.set()
                else:
                    self._call(*change)
            if period > 0 and self._clock.now() >= next_resync and self._synced.is_set():
                # Every cached object as updated (no API call), so its owner re-checks it.
                for obj in self.store.values():
                    self._call(obj, obj)
                next_resync = self._clock.now() + period

    def _call(self, old: T | None, new: T | None) -> None:
        try:
            self._handler(old, new)
        except Exception:
            log.exception("informer %s: event handler failed", self.name)

    def _failed(self, err: Exception, delay: float) -> None:
        self._failures += 1
        message = str(err)
        if self._outage is None:
            log.warning("informer %s: %s; retrying with backoff (logged once until it "
                        "recovers)", self.name, message)
            self._outage = message
        self._count_watch_restart()
        self._stopped.wait(delay)

    def _recovered(self) -> None:
        if self._outage is not None:
            log.info("informer %s: recovered after %d failed attempts", self.name,
                     self._failures)
            self._outage, self._failures = None, 0
            if self._on_recovered is not None:
                self._on_recovered()

    def _count_watch_restart(self) -> None:
        if self._metrics is not None:
            self._metrics.informer_watch_restarts.labels(self.name).inc()


def _key(raw: dict[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))
