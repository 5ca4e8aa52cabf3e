"""List-then-watch one resource kind into a Store, and tell a handler what changed.

What it does that the official client's Watch and SharedInformer do not: a watch that went
silent is noticed in seconds (`WatchLiveness`), reconnecting from the last resourceVersion
without relisting when a stream ends, a relist diffed against the cache after 410 Gone (with
delete notifications for objects that vanished in the gap), backoff with jitter, one log line
per outage instead of one per retry, and resync from the cache without any API call.

Two threads, both its own: the reader lists and watches and is the only writer of the store;
the dispatcher calls the handler, in order, for every change and for the periodic resync
(client-go's processorListener), so a handler never runs on two threads at once and never
holds up the watch. The owner's own writes are the exception (`OwnWrites`): a watch event of
exactly the version a write of its own was answered with is stored as the owner holds it,
with nothing to transform and no handler to wake.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from configmirror.backoff import Backoff
from configmirror.client.kube import ApiError, Kube, WatchSilent, WatchStream
from configmirror.client.outage import Outage, no_answer
from configmirror.client.store import Store
from configmirror.clock import Clock, RealClock
from configmirror.lifecycle import OwnedThread, join
from configmirror.metrics import Metrics

T = TypeVar("T")
log = logging.getLogger(__name__)

# Called with (old, new): (None, obj) added, (obj, obj') updated or resynced, (obj, None) deleted.
Handler = Callable[[T | None, T | None], None]



class OwnWrites(Protocol[T]):
    """What the informer's owner wrote itself and still expects the watch to deliver
    (memory.Expectations)."""

    def delivered(self, key: str, resource_version: str) -> T | None:
        """The object the owner holds for `key` at exactly `resource_version`, when it is
        what the transform makes of the server's object and no handler need hear of it."""

    def settled(self, key: str, obj: T) -> None:
        """The store holds `obj` (what `delivered` gave) now."""


MIN_WATCH_TIMEOUT = 300  # client-go: a server-side timeout in [5, 10) minutes, randomized


def reflector_backoff(clock: Clock, rng: random.Random | None = None) -> Backoff:
    """client-go's reflector backoff: 0.8 s doubling to 30 s, jittered by up to itself, and
    from the start again after 2 minutes without a failure."""
    return Backoff(0.8, 30.0, jitter=1.0, reset_after=120.0, clock=clock, rng=rng)
READ_TIMEOUT_MARGIN = 30.0  # past its timeout, a watch the server has not ended is dead

# How often kube-apiserver sends a bookmark, from its source (k8s.io/apiserver v0.36.3,
# pkg/storage/cacher): the watch cache sends a watcher that asked for bookmarks one every
# minute (cacher.go, defaultBookmarkFrequency = time.Minute; watchers are filed in 1-second
# buckets and the bookmark timer ticks every 1-1.25 s, so 58.75-62.25 s apart), and one 2 s
# before the watch's timeout. It sends only a bookmark whose resourceVersion is newer than the
# one the watch started from (cache_watcher.go, process()), and that resourceVersion is
# whatever the cache last saw of the resource (an event, or etcd's progress notify): so on a
# resource where nothing happened since the watch started, none may come for minutes; once
# one came, the next follows a minute later for the rest of the watch. Without the watch
# cache (--watch-cache=false) none come at all (etcd3/watcher.go: progress notifications
# are not passed to clients).
BOOKMARK_PERIOD = 60.0
BOOKMARK_BOUND = BOOKMARK_PERIOD + 5.0  # 2.25 s of the server's own jitter, and the trip
# A watch silent this long is checked with a probe (below); client-go's HTTP/2 health check
# likewise pings a connection after 30 s without a frame.
SILENCE_CHECK = 30.0
PROBE_GRACE = 5.0  # after a probe saw events, how long the watch has to deliver them too
PROBE_READ_TIMEOUT = 10.0
# A probe goes out on an idle pooled connection when there is one (a new TLS connection every
# 30 s per silent watch was most of the idle CPU of an operator with many kinds on, issue 40),
# and on a new connection when that one does not answer within this: a probe must not be
# fooled by a silent connection any more than the watch it checks.
PROBE_HEAD_TIMEOUT = 2.0
VERY_SHORT_WATCH = "VeryShortWatch"  # the reason of a watch that ended at once, eventless


class WatchLiveness:
    """When a silent watch is checked, and when it is dead. Times are the informer's clock's.

    Silence alone proves nothing before a watch's first bookmark (see BOOKMARK_PERIOD), so
    a watch silent for SILENCE_CHECK seconds is checked by a probe: a short watch from the
    same resourceVersion on another connection. If the server has events the watch did not
    deliver, and it does not deliver them within PROBE_GRACE either, the watch is dead. A
    watch that has had a bookmark is dead when the next is BOOKMARK_BOUND late (then it is
    probed once per silence only); any watch is dead once well past its own timeout.
    """

    def __init__(self, started: float, deadline: float) -> None:
        self.deadline = deadline  # the watch's timeoutSeconds + READ_TIMEOUT_MARGIN
        self.last_event = started
        self.last_bookmark: float | None = None
        self.last_probe = started

    def saw(self, now: float, bookmark: bool) -> None:
        self.last_event = now
        if bookmark:
            self.last_bookmark = now

    def probed(self, now: float) -> None:
        self.last_probe = now

    def next_check(self) -> float:
        """When to look again if nothing arrives before."""
        checks = [self.deadline]
        if self._may_probe():
            checks.append(max(self.last_event, self.last_probe) + SILENCE_CHECK)
        if self.last_bookmark is not None:
            checks.append(self.last_bookmark + BOOKMARK_BOUND)
        return min(checks)

    def dead(self, now: float) -> str | None:
        """Why the watch is dead by the clock alone, or None."""
        if now >= self.deadline:
            return "past its timeout"
        if self.last_bookmark is not None and now - self.last_bookmark >= BOOKMARK_BOUND:
            return (f"with no bookmark for {now - self.last_bookmark:.0f} s (the server sends "
                    f"one every {BOOKMARK_PERIOD:.0f} s)")
        return None

    def probe_due(self, now: float) -> bool:
        return self._may_probe() and \
            now - max(self.last_event, self.last_probe) >= SILENCE_CHECK

    def _may_probe(self) -> bool:
        # With bookmarks coming, the bound decides; one probe per silence catches a missed
        # event sooner.
        return self.last_bookmark is None or self.last_probe <= self.last_event


class _Gone(Exception):
    """The resourceVersion we watch from has been compacted away: relist."""


class _Stop(threading.Event):
    """The informer's stop flag. Setting it also ends a `pause`: a backoff waits on the
    clock, so that a FakeClock drives it, and must still end at once on stop."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self._clock = clock
        self._woken = threading.Condition()

    def set(self) -> None:
        super().set()
        with self._woken:
            self._woken.notify_all()

    def pause(self, seconds: float) -> bool:
        """Wait `seconds` of the clock, or until set; whether it is set."""
        with self._woken:
            until = self._clock.now() + seconds
            while not self.is_set() and self._clock.now() < until:
                self._clock.wait(self._woken, until, None)
        return self.is_set()


class Informer(Generic[T]):
    """Keeps `store` equal to the cluster's objects at `path` and reports every change."""

    def __init__(self, kube: Kube, path: str, transform: Callable[[dict[str, Any]], T],
                 store: Store[T], handler: Handler[T], name: str,
                 metrics: Metrics | None = None, clock: Clock | None = None,
                 page_size: int = 500, min_watch_timeout: int = MIN_WATCH_TIMEOUT,
                 resync_period: float = 0.0,
                 on_recovered: Callable[[], None] | None = None,
                 query: dict[str, str] | None = None, outage: Outage | None = None,
                 rng: random.Random | None = None) -> None:
        """`outage`: the operator's one view of whether the API server answers: a failure
        with no answer is told to it, every list and watch that gets through too, and a
        backoff begun in an outage ends with it. `rng` draws the backoff's jitter and each
        watch's timeout (a test seeds it to know them).

        Every time it keeps, and every wait of its own threads, is `clock`'s (a socket read
        waits real seconds, until a time of the clock): a FakeClock drives its backoff, resync
        and watch liveness."""
        self.name = name
        self._outage_view = outage
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
        self._stopped = _Stop(self._clock)
        self._synced = threading.Event()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._probe: WatchStream | None = None
        self._thread: OwnedThread | None = None
        # Changes waiting for the dispatcher, in the order the reader saw them.
        self._changes: deque[tuple[T | None, T | None] | None] = deque()  # None: synced
        self._changed = threading.Condition()
        self._dispatcher: OwnedThread | None = None
        self._outage: str | None = None  # the error being retried, logged once
        self._failures = 0
        self._rng = rng or random.Random()
        # The reader's, between failed attempts.
        self._backoff = reflector_backoff(self._clock, self._rng)
        self._own_writes: OwnWrites[T] | None = None
        self.resource_version = ""
        # On the clock, not the wall: the gauge is an age, and stays one when the wall
        # clock is set.
        self.last_event_at = self._clock.now()
        if metrics is not None:
            metrics.informer_last_event_age.labels(name).set_function(
                lambda: self._clock.now() - self.last_event_at)

    # -- lifecycle (owned by the manager) ---------------------------------------------------

    def start(self) -> None:
        """Start the list/watch thread and the dispatcher."""
        self._dispatcher = OwnedThread(f"informer-{self.name}-dispatch", self._dispatch)
        self._dispatcher.start()
        self._thread = OwnedThread(f"informer-{self.name}", self._run)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop watching, unblock a pending read, and join both threads within `timeout`
        seconds; True once both have ended (a list in flight ends only with its request)."""
        self._stopped.set()
        if self._outage_view is not None:
            self._outage_view.interrupt()  # a backoff waiting for the server ends now
        with self._lock:
            streams = (self._stream, self._probe)
        for stream in streams:
            if stream is not None:
                stream.close()
        with self._changed:
            self._changed.notify()
        return join((self._thread, self._dispatcher), timeout)

    def recognise(self, own_writes: OwnWrites[T]) -> None:
        """Before `start`: the owner's own writes, whose watch events need no transform and
        no handler (a fan-out's every write comes back as one; this is the reader's and the
        dispatcher's work for it)."""
        self._own_writes = own_writes

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

    def failing(self) -> bool:
        """Whether a failed list or watch is being retried now (an outage, logged once)."""
        return self._outage is not None

    def pending(self) -> int:
        """Changes the handler has not been told about yet."""
        with self._changed:
            return len(self._changes)

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = self._backoff
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
                resumable = not isinstance(err, ApiError) or err.status in (0, 429)
                need_list = need_list or not resumable
                told = err.retry_after if isinstance(err, ApiError) else None
                self._failed(err, max(backoff.next(), told or 0.0))  # a Retry-After holds
            except Exception:  # a bug: log it whole, keep the informer alive
                log.exception("informer %s: unexpected error; relisting", self.name)
                need_list = True
                self._stopped.pause(backoff.next())

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
        if self._outage_view is not None:
            self._outage_view.answered()
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
        timeout = self._rng.randint(self._min_watch_timeout, 2 * self._min_watch_timeout - 1)
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
        liveness = WatchLiveness(started, started + timeout + READ_TIMEOUT_MARGIN)
        try:
            while True:
                try:
                    # The read waits real seconds, until the clock's next check is due;
                    # whatever ends it, the clock decides whether the watch is dead (_dead).
                    event = stream.next_event(max(liveness.next_check() - self._clock.now(),
                                                  0.01))
                except WatchSilent:
                    if self._stopped.is_set():
                        break
                    if self._dead(stream, liveness):
                        self._count_watch_restart()
                        return
                    continue
                if event is None:
                    break
                events += 1
                liveness.saw(self._clock.now(), event.get("type") == "BOOKMARK")
                self._apply(event)
        finally:
            with self._lock:
                self._stream = None
            stream.close()
        if events == 0 and self._clock.now() - started < 1.0 and not self._stopped.is_set():
            raise ApiError(0, VERY_SHORT_WATCH, "watch closed at once with no events", "watch",
                           self._path)
        self._count_watch_restart()

    def _dead(self, stream: WatchStream, liveness: WatchLiveness) -> bool:
        """A silent watch: whether it is dead (then said once in the log). May probe."""
        now = self._clock.now()
        reason = liveness.dead(now)
        if reason is None and liveness.probe_due(now):
            liveness.probed(now)
            if self._probe_finds_events():
                # The server has news: a live watch delivers it too, within PROBE_GRACE.
                grace = self._clock.now() + PROBE_GRACE
                while True:
                    try:
                        event = stream.next_event(max(grace - self._clock.now(), 0.01))
                    except WatchSilent:
                        if self._clock.now() < grace and not self._stopped.is_set():
                            continue  # a read ended early: only the clock ends the grace
                        reason = "although the server has events it did not deliver"
                        break
                    if event is not None:
                        liveness.saw(self._clock.now(), event.get("type") == "BOOKMARK")
                        self._apply(event)
                        return False
                    return True  # it ended just now: a normal end, the caller re-watches
        if reason is None or self._stopped.is_set():
            return False
        log.warning("informer %s: the watch connection %s carried nothing for %.0f s %s; "
                    "closing it and watching again from resourceVersion %s", self.name,
                    stream.connection, self._clock.now() - liveness.last_event, reason,
                    self.resource_version)
        if self._metrics is not None:
            self._metrics.informer_silent_watches.labels(self.name).inc()
        # What silenced this one (a NAT or load balancer that forgot the flow, a stuck
        # proxy) usually silenced every connection open with it.
        self._kube.discard_idle_connections()
        return True

    def _probe_finds_events(self) -> bool:
        """Whether a short watch from our resourceVersion, on another connection (a pooled
        one that answers within PROBE_HEAD_TIMEOUT, else a new one), gets any
        event (so ours should have had it too). False when the probe fails: an unreachable
        server says nothing about this connection."""
        result = "error"
        try:
            probe = self._kube.watch(self._path, {
                **self._query, "resourceVersion": self.resource_version, "timeoutSeconds": 1},
                read_timeout=PROBE_READ_TIMEOUT, reuse=PROBE_HEAD_TIMEOUT)
        except ApiError as err:
            found = err.status == 410  # our version is too old: ours should have said so
            result = "missed" if found else result
        else:
            with self._lock:
                self._probe = probe
            try:
                found = any(e.get("type") != "BOOKMARK" for e in probe)
                result = "missed" if found else "nothing missed"
            except (ApiError, ValueError):
                found = False
            finally:
                with self._lock:
                    self._probe = None
                probe.close()
        if self._metrics is not None:
            self._metrics.child(self._metrics.informer_watch_probes, self.name, result).inc()
        return found

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
        self.last_event_at = self._clock.now()
        if kind == "BOOKMARK":
            self.resource_version = version
            return
        key = _key(raw)
        if kind in ("ADDED", "MODIFIED"):
            own = self._own_writes
            if own is not None and (known := own.delivered(key, version)) is not None:
                self.store.upsert(key, known)  # before the owner lets its entry go
                own.settled(key, known)
                self.resource_version = version
                return
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
                    # On the clock: a FakeClock's step is what brings the resync due.
                    self._clock.wait(self._changed, next_resync if period > 0 else None, None)
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
        outage = self._outage_view
        # A watch the server ended at once answered: an outage's end says nothing about it.
        answered = not no_answer(err) or getattr(err, "reason", "") == VERY_SHORT_WATCH
        if outage is None or answered:
            self._stopped.pause(delay)  # the server answered (429, 5xx): its pace, not ours
        elif outage.wait(outage.failed(), delay, self._stopped.is_set):
            # The server answers again (whoever saw it first): watch now, and let the next
            # failure back off from the start.
            self._backoff.reset()

    def _recovered(self) -> None:
        if self._outage_view is not None:
            self._outage_view.answered()
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
