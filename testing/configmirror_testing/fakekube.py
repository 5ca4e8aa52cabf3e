"""The one stand-in for configmirror.client.kube.Kube in unit tests of pure logic and error paths.

`FakeKube.request` answers as the API server would for one resource's objects (`resource`,
ConfigMaps by default) held in `objects` by "namespace/name": create (409 if it exists),
update and delete with their resourceVersion preconditions (409; an update that names no
resourceVersion is unconditional, as the API server allows for these), update of an immutable
object (422), a JSON merge patch of metadata and top-level fields (releasing, marking or
adopting a replica), 404 for what is not there. Requests for other resources (Events)
succeed with an empty answer. Every request is recorded with its options (`requests`); a
test queues the failures the next requests get (`failures`, None for one that succeeds), and
reads each write with what it replaced and when (`writes`, on `clock`). A server slow to
answer: with `held` an unset Event, each request is recorded, sets `holding`, and waits (up
to HOLD_LIMIT seconds) until the test sets `held` before it is answered.

`admission` is what the server's mutating admission (a MutatingAdmissionPolicy, a webhook)
does to each object written in a namespace, before it is stored: every create, update and
patch there is stored (and answered) as it changed it, as the API server does.

    kube = FakeKube(admission={"a": adds_labels({"team": "x"}), "b": sets_data({"k": "v"})})

An informer lists and watches it: a list answers the objects stored (in one namespace, or
in all) at the current revision; each watch opened (`opened_watches`) is a `FakeWatch` the
test feeds (`send`, `end`) or leaves silent. A silent watch's read ends when `clock` reaches
its timeout, as a socket's would in real seconds: a test makes a watch silent for exactly as
long as it steps a FakeClock, and no longer.

Tests that talk to a real API server use configmirror_testing.controlplane instead.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from configmirror.client.kube import ApiError, WatchSilent
from configmirror.clock import Clock, FakeClock

HOLD_LIMIT = 10.0
"""The longest a held request waits for its release (a test that forgets it still ends)."""

Admission = Callable[[dict[str, Any]], None]
"""What mutating admission does to an object being written (in place)."""


def adds_labels(labels: Mapping[str, str]) -> Admission:
    """Admission that sets these labels on every object written (a policy's ownership label)."""
    def admit(body: dict[str, Any]) -> None:
        body["metadata"]["labels"] = {**(body["metadata"].get("labels") or {}), **labels}
    return admit


def sets_data(data: Mapping[str, str]) -> Admission:
    """Admission that sets these data keys on every object written (a policy rewriting one)."""
    def admit(body: dict[str, Any]) -> None:
        body["data"] = {**(body.get("data") or {}), **data}
    return admit


class Request(NamedTuple):
    """One request the fake was sent: verb, path, body, and its other options
    (content_type, ...)."""

    verb: str
    path: str
    body: Any
    options: dict[str, Any]


@dataclass(frozen=True)
class Write:
    """One write the fake stored: its verb, the object's key, the object before and after
    (None where there was none), and when (the clock's time)."""

    verb: str
    key: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    at: float


class FakeWatch:
    """One watch FakeKube opened, in place of a WatchStream: what the test sends it is read
    in order; `end` ends it as the server ends a watch; `close` (the informer's) ends it too."""

    def __init__(self, clock: Clock, path: str, query: dict[str, Any],
                 read_timeout: float) -> None:
        self.path = path
        self.query = query
        self.read_timeout = read_timeout
        self.connection = "fake"  # what a log line names the connection by
        self._clock = clock
        self._cond = threading.Condition()
        self._events: deque[dict[str, Any]] = deque()
        self._ended = False
        self._closed = False

    def send(self, *events: dict[str, Any]) -> None:
        """Events for the reader, as the server sends them."""
        with self._cond:
            self._events.extend(copy.deepcopy(list(events)))
            self._cond.notify_all()

    def end(self) -> None:
        """The server ends the watch: the reader gets what was sent, then the end."""
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def closed(self) -> bool:
        """Whether its reader closed it (gave it up, or stopped)."""
        with self._cond:
            return self._closed

    def next_event(self, timeout: float) -> dict[str, Any] | None:
        """The next event, None at the end, or WatchSilent once `timeout` of the clock has
        passed with nothing (a real stream's read times out in real seconds)."""
        with self._cond:
            until = self._clock.now() + timeout
            while not self._events and not self._ended and not self._closed:
                if self._clock.now() >= until:
                    raise WatchSilent(f"watch {self.path}: no event for {timeout:g} s")
                self._clock.wait(self._cond, until, None)
            return self._events.popleft() if self._events and not self._closed else None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every event to the end; a silence of its read timeout fails, as WatchStream's."""
        while True:
            try:
                event = self.next_event(self.read_timeout)
            except WatchSilent as err:
                raise ApiError(0, "ConnectionError", str(err), "watch", self.path) from None
            if event is None:
                return
            yield event

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


@dataclass
class FakeKube:
    """A Kube's request() over a store of objects; thread-safe (the recorder's writer thread
    and a test read it at once)."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    clock: Clock = field(default_factory=FakeClock)
    resource: str = "configmaps"
    revision: int = 1
    requests: list[Request] = field(default_factory=list)
    failures: list[ApiError | None] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    admission: Mapping[str, Admission] = field(default_factory=dict)  # namespace -> admission
    held: threading.Event | None = None
    holding: threading.Event = field(default_factory=threading.Event)
    watches: list[FakeWatch] = field(default_factory=list)
    discarded: int = 0  # discard_idle_connections() calls (a silent watch was given up)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def request(self, verb: str, path: str, query: Any = None, body: Any = None,
                **options: Any) -> dict[str, Any]:
        with self._lock:
            self.requests.append(Request(verb, path, copy.deepcopy(body), options))
            held = self.held
        if held is not None:  # waits unlocked: the test reads the requests meanwhile
            self.holding.set()
            held.wait(HOLD_LIMIT)
        with self._lock:
            if self.failures and (failure := self.failures.pop(0)) is not None:
                raise failure
            # api v1 namespaces NS RESOURCE [NAME], or apis GROUP v1 namespaces NS ...
            parts = path.strip("/").split("/")
            parts = parts[1:] if parts[:1] == ["apis"] else parts
            if verb == "list" and parts[-1] == self.resource:
                return self._list(parts[3] if len(parts) == 5 else None)
            if len(parts) < 5 or parts[4] != self.resource:
                return {}
            name = parts[5] if len(parts) > 5 else body["metadata"]["name"]
            return self._answer(verb, path, f"{parts[3]}/{name}", body)

    def watch(self, path: str, query: dict[str, Any], read_timeout: float,
              reuse: float | None = None) -> FakeWatch:
        """Open a watch (recorded as a "watch" request with its query, read_timeout and
        reuse; a queued failure fails it), for the test to feed."""
        with self._lock:
            self.requests.append(Request("watch", path, None, {
                "query": dict(query), "read_timeout": read_timeout, "reuse": reuse}))
            if self.failures and (failure := self.failures.pop(0)) is not None:
                raise failure
            watch = FakeWatch(self.clock, path, dict(query), read_timeout)
            self.watches.append(watch)
            return watch

    def opened_watches(self) -> list[FakeWatch]:
        """Every watch opened so far, in order (a copy)."""
        with self._lock:
            return list(self.watches)

    def discard_idle_connections(self) -> int:
        with self._lock:
            self.discarded += 1
        return 0

    def written(self) -> list[Request]:
        """Every request so far (a copy)."""
        with self._lock:
            return list(self.requests)

    def verbs(self) -> list[str]:
        """The verb of every request so far, in order."""
        return [r.verb for r in self.written()]

    def forget(self) -> None:
        """Forget the requests so far (what the server stores stays)."""
        with self._lock:
            self.requests.clear()

    def _list(self, namespace: str | None) -> dict[str, Any]:
        """The objects in `namespace` (None: all), at the current revision, in one page."""
        items = [copy.deepcopy(obj) for key, obj in sorted(self.objects.items())
                 if namespace is None or key.split("/", 1)[0] == namespace]
        return {"items": items, "metadata": {"resourceVersion": str(self.revision)}}

    def _answer(self, verb: str, path: str, key: str, body: Any) -> dict[str, Any]:
        stored = self.objects.get(key)
        if verb == "create":
            if stored is not None:
                raise ApiError(409, "AlreadyExists", f"{key} exists", verb, path)
            return self._store(verb, key, None, body)
        if stored is None:
            raise ApiError(404, "NotFound", f"{key} not found", verb, path)
        version = stored["metadata"]["resourceVersion"]
        if verb == "get":
            return copy.deepcopy(stored)
        if verb == "update":
            if body["metadata"].get("resourceVersion") not in (None, "", version):
                raise ApiError(409, "Conflict", "the object has been modified", verb, path)
            if stored.get("immutable"):
                raise ApiError(422, "Invalid", "field is immutable", verb, path)
            return self._store(verb, key, stored, body)
        if verb == "patch":  # a JSON merge patch of metadata
            changes = copy.deepcopy(body["metadata"])
            if changes.pop("resourceVersion", version) != version:
                raise ApiError(409, "Conflict", "the object has been modified", verb, path)
            patched = copy.deepcopy(stored)
            for top, value in body.items():  # a field beside metadata: adoption's immutable
                if top != "metadata":
                    patched[top] = copy.deepcopy(value)
            for field_name, values in changes.items():
                into = patched["metadata"].setdefault(field_name, {})
                for k, v in values.items():
                    if v is None:
                        into.pop(k, None)
                    else:
                        into[k] = v
            return self._store(verb, key, stored, patched)
        if verb != "delete":
            raise ApiError(405, "MethodNotAllowed", f"{verb} is not served here", verb, path)
        precondition = ((body or {}).get("preconditions") or {}).get("resourceVersion")
        if precondition not in (None, version):
            raise ApiError(409, "Conflict", "precondition failed", verb, path)
        del self.objects[key]
        self.revision += 1
        self.writes.append(Write(verb, key, stored, None, self.clock.now()))
        return {}

    def _store(self, verb: str, key: str, before: dict[str, Any] | None,
               body: dict[str, Any]) -> dict[str, Any]:
        self.revision += 1
        stored = copy.deepcopy(body)
        if (admit := self.admission.get(key.split("/", 1)[0])) is not None:
            admit(stored)
        # An update or a patch keeps the object (its uid), as the API server does.
        uid = before["metadata"].get("uid") if before is not None else None
        stored["metadata"].update(uid=uid or f"w-{self.revision}",
                                  resourceVersion=str(self.revision))
        self.objects[key] = stored
        self.writes.append(Write(verb, key, before, copy.deepcopy(stored), self.clock.now()))
        return copy.deepcopy(stored)
