"""Kubernetes Events on the objects we act for, written off the worker threads.

Modelled on client-go's broadcaster: callers queue an Event and return at once; one thread
of the recorder's own writes them. It aggregates (one Event per distinct object, type, reason
and message; a repeat patches its count, as client-go's EventCorrelator does), tallies (counts
that many reconciles add to, written as one Event once the object has been quiet for a moment:
one `Replicated` per source change, not one per replica), retries while the server does not
answer (until the operator's `outage.Outage` ends, not the whole backoff), and drops an Event
only when its queue is full (counted, logged once).
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from configmirror.backoff import Backoff
from configmirror.client.kube import ApiError, Failure, Kube
from configmirror.client.outage import Outage, no_answer, served
from configmirror.clock import Clock, RealClock
from configmirror.lifecycle import OwnedThread
from configmirror.vocabulary import EVENTS, ObjectRef

log = logging.getLogger(__name__)
MAX_MESSAGE = 1024
QUIET = 2.0          # seconds without a new count before a tally is written
MAX_TALLY_AGE = 60.0  # a tally that keeps growing is written at least this often
RETRY_MIN, RETRY_MAX = 0.5, 30.0


def _event_namespace(ref: ObjectRef) -> str:
    """Where an Event about `ref` lives: its namespace, or (a Namespace, or any other
    cluster-scoped object) "default", as client-go's recorder puts it."""
    return ref.namespace or "default"


@dataclass(frozen=True)
class _Event:
    ref: ObjectRef
    type: str
    reason: str
    message: str


@dataclass
class _Tally:
    ref: ObjectRef
    render: Callable[[dict[str, int]], str]
    first: float
    last: float
    items: dict[str, set[str]] = field(default_factory=dict)

    def message(self) -> str:
        return self.render({kind: len(items) for kind, items in self.items.items()})


class Tallies:
    """Counts per (object, reason), due once quiet for `quiet` seconds or `max_age` old.

    Not thread-safe by itself: the recorder holds its lock around every call.
    """

    def __init__(self, clock: Clock, quiet: float = QUIET, max_age: float = MAX_TALLY_AGE):
        self._clock = clock
        self._quiet = quiet
        self._max_age = max_age
        self._open: dict[tuple[str, str], _Tally] = {}

    def add(self, ref: ObjectRef, reason: str, kind: str, item: str,
            render: Callable[[dict[str, int]], str]) -> bool:
        """Count `item`; True when this opened a new tally (the only kind of count that can
        make a tally due sooner: one more count only moves its own due time later)."""
        now = self._clock.now()
        tally = self._open.get((ref.uid, reason))
        opened = tally is None
        if tally is None:
            tally = self._open[(ref.uid, reason)] = _Tally(ref, render, now, now)
        tally.ref, tally.render, tally.last = ref, render, now
        tally.items.setdefault(kind, set()).add(item)
        return opened

    def due(self, flush_all: bool = False) -> list[_Event]:
        """Take the tallies that are due (all of them with `flush_all`) as Events."""
        now = self._clock.now()
        done = [key for key, t in self._open.items() if flush_all or now - t.last >= self._quiet
                or now - t.first >= self._max_age]
        return [_Event(t.ref, "Normal", reason, t.message())
                for (_, reason), t in ((k, self._open.pop(k)) for k in done)]

    def next_due_in(self) -> float | None:
        """Seconds until the next tally is due, or None with none open."""
        now = self._clock.now()
        return min((max(min(t.last + self._quiet, t.first + self._max_age) - now, 0.0)
                    for t in self._open.values()), default=None)

    def __len__(self) -> int:
        return len(self._open)


@dataclass
class _Recorded:
    name: str
    count: int


class Recorder(Protocol):
    """What the controller and the replicator tell about objects (an EventRecorder)."""

    def warning(self, ref: ObjectRef, reason: str, message: str) -> None: ...

    def tally(self, ref: ObjectRef, reason: str, kind: str, item: str,
              render: Callable[[dict[str, int]], str]) -> None: ...


class ClusterRecorder:
    """The home cluster's recorder as a member cluster's replicator and workers use it: a
    Warning on a source names the cluster; one about the member's own objects (a Namespace's
    pulls) is logged, not written (it is not the home cluster's object); a tally counts into
    the source's one Replicated Event with the home cluster's."""

    def __init__(self, recorder: Recorder, cluster: str) -> None:
        self._recorder = recorder
        self.cluster = cluster

    def warning(self, ref: ObjectRef, reason: str, message: str) -> None:
        if ref.kind == "Namespace":
            log.warning("cluster %s: %s %s: %s", self.cluster, reason, ref.name, message)
            return
        self._recorder.warning(ref, reason, f"cluster {self.cluster}: {message}")

    def tally(self, ref: ObjectRef, reason: str, kind: str, item: str,
              render: Callable[[dict[str, int]], str]) -> None:
        self._recorder.tally(ref, reason, kind, f"{self.cluster}/{item}", render)


class EventRecorder:
    """Queues Events and writes them from its own thread, which its owner starts and stops."""

    def __init__(self, kube: Kube, component: str = "configmirror",
                 instance: str | None = None, max_queued: int = 1024,
                 max_remembered: int = 4096, clock: Clock | None = None,
                 on_dropped: Callable[[], None] | None = None,
                 outage: Outage | None = None) -> None:
        """`outage`: the operator's one view of whether the API server answers; a retry
        waiting for it ends when it does (without one, each retry waits its whole delay)."""
        self._kube = kube
        self._outage = outage
        self._component = component
        self._instance = instance or socket.gethostname()
        self._max_queued = max_queued
        self._max_remembered = max_remembered
        self._clock = clock or RealClock()
        self._on_dropped = on_dropped
        self._cond = threading.Condition()
        self._queue: deque[_Event] = deque()
        self._tallies = Tallies(self._clock)
        self._writing = 0  # an Event taken from the queue and not yet written
        # (uid, type, reason, message) -> the Event written for it, to patch its count.
        self._recorded: OrderedDict[tuple[str, str, str, str], _Recorded] = OrderedDict()
        self._stopping = False
        self._dropping = False
        self._failing = False
        self._unanswered = False  # the last write got no answer at all (an outage)
        self._thread: OwnedThread | None = None

    # -- what callers use (never blocks on the API) ----------------------------------------

    def warning(self, ref: ObjectRef, reason: str, message: str) -> None:
        self._put(_Event(ref, "Warning", reason, message[:MAX_MESSAGE]))

    def tally(self, ref: ObjectRef, reason: str, kind: str, item: str,
              render: Callable[[dict[str, int]], str]) -> None:
        """Count `item` under `kind` for `ref`; one Normal `reason` Event, rendered from the
        counts, follows once `ref` has had no new count for a moment."""
        with self._cond:
            # Only a new tally can be due before the writer's current wait ends; waking it
            # for every count (a fan-out counts thousands a second) would cost a thread
            # switch per replica written, for nothing.
            if self._tallies.add(ref, reason, kind, item, render):
                self._cond.notify()

    def pending(self) -> int:
        """Events queued or being written, and tallies not yet written."""
        with self._cond:
            return len(self._queue) + len(self._tallies) + self._writing

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread."""
        self._thread = OwnedThread("event-recorder", self._run)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Write what is queued (tallies too) for up to `timeout` seconds, then stop; True
        once the writer has ended within it."""
        with self._cond:
            self._stopping = True  # the writer flushes every tally and ends once it is empty
            self._cond.notify()
        if self._outage is not None:
            self._outage.interrupt()  # a retry waiting for the server ends now
        if self._thread is None or self._thread.join(timeout):
            return True
        # The server is too slow: drop the rest; the writer ends after the write it is in
        # (which has its own timeout), which the process need not wait for.
        with self._cond:
            lost = len(self._queue)
            self._queue.clear()
        log.warning("stopped with %d Events unwritten", lost)
        return False

    # -- the writer thread --------------------------------------------------------------------

    def _put(self, event: _Event) -> None:
        with self._cond:
            if len(self._queue) >= self._max_queued:
                if not self._dropping:
                    log.warning("Event queue full (%d): dropping Events until it drains",
                                self._max_queued)
                    self._dropping = True
                if self._on_dropped is not None:
                    self._on_dropped()
                return
            self._dropping = False
            self._queue.append(event)
            self._cond.notify()

    def _run(self) -> None:
        backoff = Backoff(RETRY_MIN, RETRY_MAX)
        while True:
            with self._cond:
                while True:
                    self._queue.extend(self._tallies.due(flush_all=self._stopping))
                    if self._queue:
                        break
                    if self._stopping:
                        return
                    due_in = self._tallies.next_due_in()
                    self._clock.wait(self._cond, None if due_in is None
                                     else self._clock.now() + due_in, None)
                event = self._queue.popleft()
                self._writing = 1
            try:
                written = self._write(event)
            finally:
                with self._cond:
                    self._writing = 0
            if written:
                backoff.reset()
                continue
            # The server does not answer: keep the Event first in line and wait a while.
            with self._cond:
                if self._stopping:
                    return  # no server to flush to
                self._queue.appendleft(event)
            # The outage's end (whoever sees it) ends the wait: a fresh start, not the rest of
            # a backoff begun while the server was away.
            if self._wait_out(backoff.next()):
                backoff.reset()

    def _wait_out(self, delay: float) -> bool:
        """Wait `delay` before the next try, or until the outage this failure met ends
        (True). New Events do not cut it short: a request per Event to a server that does
        not answer."""
        if self._outage is not None and self._unanswered:
            return self._outage.wait(self._outage.failed(), delay, lambda: self._stopping)
        with self._cond:
            until = self._clock.now() + delay
            while not self._stopping and self._clock.now() < until:
                self._clock.wait(self._cond, until, None)
        return False

    def _write(self, event: _Event) -> bool:
        """Write one Event; False when the server did not answer (worth another try)."""
        ref = event.ref
        key = (ref.uid, event.type, event.reason, event.message)
        seen = self._recorded.get(key)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        path = EVENTS.collection(_event_namespace(ref))
        try:
            if seen is not None:
                try:
                    self._kube.request("patch", f"{path}/{seen.name}",
                                       body={"count": seen.count + 1, "lastTimestamp": now},
                                       content_type="application/merge-patch+json")
                    seen.count += 1
                    self._recorded.move_to_end(key)
                    self._answered()
                    return True
                except ApiError as err:
                    if err.failure is not Failure.NOT_FOUND:  # expired (TTL): write anew
                        raise
            name = f"{ref.name}.{secrets.token_hex(8)}"
            self._kube.request("create", path, body=self._body(event, name, now))
            self._recorded[key] = _Recorded(name, 1)
            while len(self._recorded) > self._max_remembered:
                self._recorded.popitem(last=False)
            self._answered()
            return True
        except ApiError as err:
            self._unanswered = no_answer(err)
            if served(err) and self._outage is not None:
                self._outage.answered()  # not written, but the server serves
            if not self._failing:
                log.warning("cannot record Event %s on %s/%s: %s (further failures are "
                            "logged at debug level)", event.reason, ref.namespace, ref.name, err)
                self._failing = True
            else:
                log.debug("cannot record Event %s on %s/%s: %s", event.reason, ref.namespace,
                          ref.name, err)
            return err.failure is not Failure.UNAVAILABLE  # anything else: drop it

    def _answered(self) -> None:
        self._failing = self._unanswered = False
        if self._outage is not None:
            self._outage.answered()

    def _body(self, event: _Event, name: str, now: str) -> dict[str, Any]:
        ref = event.ref
        return {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": _event_namespace(ref)},
            "involvedObject": {"kind": ref.kind, "apiVersion": ref.api_version,
                               "namespace": ref.namespace, "name": ref.name, "uid": ref.uid,
                               "resourceVersion": ref.resource_version},
            "type": event.type, "reason": event.reason, "message": event.message, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": self._component},
            "reportingComponent": self._component, "reportingInstance": self._instance,
        }
