"""What the operator remembers between reconciles, and what a command without it assumes.

The caches say what the cluster holds; a reconcile also needs a little of its own past. Each
thing remembered is a type of its own here, with its own lock, and none is needed to decide
right, only to decide without waste or repetition. `plan`, `status` and `wait` run without
any of it, so each says what a process that remembers nothing assumes:

- `Expectations`: our writes the watch has not delivered yet. A command reads a freshly
  listed cache, with nothing of its own in flight: it expects nothing.
- `Removals`: when this process first saw the cause of a removal, so the removal waits
  `--delete-grace` from then. A command shows each removal with the whole grace left
  (`plan.Grace.from_now`), the most it can take; after a restart the grace starts again.
- `Reported`: what was said already (an Event per problem, conflict, mutation or refused
  pull), so a resync says nothing twice. A command writes no Events.

What admission made of our writes is NOT process memory: `run` would rewrite a replica it
cannot call in sync, so whatever calls it in sync must be seen by the commands too, and hold
across a restart. It is on the replica itself (model.py: fields configmirror does not write
are not drift, and the `configmirror.io/admitted` mark names those that admission changed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

from configmirror.clock import Clock
from configmirror.replication.model import CachedObject
from configmirror.replication.plan import Grace

K = TypeVar("K")
V = TypeVar("V")


class _Expected(NamedTuple):  # a tuple: one per write, built cheaper than a frozen dataclass
    obj: CachedObject | None  # what we wrote (None: we deleted it)
    resource_version: int     # write: the version written; delete: the version deleted
    exact: bool = False       # obj is what the informer's transform makes of the stored object


class Expectations:
    """Writes of ours that the watch has not delivered yet.

    A create or update is expected until the informer's watermark (the newest resourceVersion
    it has applied) reaches the version we wrote; a delete until the cache no longer holds
    the version we deleted. Read the watermark before the cache, so a cache read after it
    is at least that new.
    """

    def __init__(self, watermark: Callable[[str], int]) -> None:
        self._watermark = watermark
        self._pending: dict[str, _Expected] = {}
        self._lock = threading.Lock()

    def wrote(self, obj: CachedObject, exact: bool = False) -> None:
        """`exact`: `obj` is what the informer's transform makes of the object the server
        answered the write with (not only what decides as it does), so the watch delivering
        that version may store `obj` as it is (`delivered`)."""
        version = _version(obj.resource_version)
        if version is not None:
            with self._lock:
                self._pending[obj.key] = _Expected(obj, version, exact)

    def deleted(self, key: str, resource_version: str) -> None:
        version = _version(resource_version)
        if version is not None:
            with self._lock:
                self._pending[key] = _Expected(None, version)

    def echo(self, obj: CachedObject) -> bool:
        """Whether `obj`, just delivered by the watch, is our own last write to its key, as
        we wrote it (same resourceVersion, same content): then nothing has happened to it
        since, the worker that wrote it has reconciled it already, and the entry is done
        with. Anything else (another version, other content, a delete) is not an echo."""
        version = _version(obj.resource_version)
        with self._lock:
            expected = self._pending.get(obj.key)
            if expected is None or expected.obj is None or version is None \
                    or expected.resource_version != version \
                    or expected.obj.content_hash != obj.content_hash:
                return False
            del self._pending[obj.key]
            return True

    def delivered(self, key: str, resource_version: str) -> CachedObject | None:
        """What we hold of our own last write to `key` when the watch delivers exactly its
        version and we hold it as the informer's transform would make it (`wrote(exact=True)`):
        the object at one resourceVersion is the one the write was answered with, so the
        informer stores this instead of transforming the event again, and tells no handler
        (the worker that wrote it has reconciled the key; `echo` would say so). None for
        anything else. The entry stays until `settled`: until the cache holds it, `view`
        must still see our write."""
        expected = self._pending.get(key)  # an atomic lookup; checked again under the lock
        if expected is None or not expected.exact:
            return None
        version = _version(resource_version)
        with self._lock:
            expected = self._pending.get(key)
            if expected is None or not expected.exact or expected.resource_version != version:
                return None
            return expected.obj

    def settled(self, key: str, obj: CachedObject) -> None:
        """The cache holds `obj`, which `delivered` gave: its entry is done with (unless a
        newer write of ours replaced it meanwhile)."""
        with self._lock:
            expected = self._pending.get(key)
            if expected is not None and expected.obj is obj:
                del self._pending[key]

    def view(self, key: str, cached: Callable[[str], CachedObject | None]) -> CachedObject | None:
        """The object at `key` as it is after our own writes."""
        if key not in self._pending:  # nothing of ours in flight there (an atomic lookup)
            return cached(key)
        watermark = self._watermark(key)  # read before the cache: the cache is at least as new
        current = cached(key)
        with self._lock:
            expected = self._pending.get(key)
            if expected is None:
                return current
            if expected.obj is None:
                if current is not None and _version(current.resource_version) == \
                        expected.resource_version:
                    return None  # the delete has not come through the watch yet
            elif watermark < expected.resource_version:
                return expected.obj  # the write has not come through the watch yet
            del self._pending[key]
            return current

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


def _version(resource_version: str) -> int | None:
    """etcd revisions are integers; anything else makes expectations step aside."""
    try:
        return int(resource_version)
    except ValueError:
        return None


class Removals:
    """Replicas whose removal waits out the grace: object key -> when this process first saw
    the cause. A removal waits `seconds` from then; once its cause is gone it is forgotten,
    so a cause that comes back waits the whole grace again."""

    def __init__(self, seconds: float, clock: Clock) -> None:
        self.seconds = seconds
        self._clock = clock
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def grace(self) -> Grace:
        """The grace as `plan.decide` reads it, now."""
        return Grace(self.seconds, self._clock.now(), self._seen.get)

    def waiting(self, key: str, since: float) -> None:
        """The removal of `key` waits, since `since` (kept if it waited already)."""
        with self._lock:
            self._seen.setdefault(key, since)

    def forget(self, key: str) -> None:
        """Its cause is gone, or it is done."""
        if key in self._seen:  # rarely: only during a removal's grace (an atomic lookup)
            with self._lock:
                self._seen.pop(key, None)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._seen)

    def __len__(self) -> int:
        return len(self._seen)


class Reported(Generic[K, V]):
    """What was said about each key last (an Event's cause), so the same is never said twice:
    `first` is true once per change of what there is to say."""

    def __init__(self) -> None:
        self._said: dict[K, V] = {}
        self._lock = threading.Lock()

    def first(self, key: K, value: V) -> bool:
        """Whether `value` is news for `key` (and remember it as said)."""
        with self._lock:
            if key in self._said and self._said[key] == value:
                return False
            self._said[key] = value
            return True

    def replace(self, key: K, value: V | None) -> V | None:
        """Remember `value` as said for `key` (None: nothing to say now); the value before."""
        with self._lock:
            before = self._said.pop(key, None)
            if value is not None:
                self._said[key] = value
            return before

    def forget(self, key: K) -> None:
        """Nothing is said about `key` now: the next thing to say is news."""
        if key in self._said:  # the common case: nothing said before (an atomic lookup)
            with self._lock:
                self._said.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._said

    def __len__(self) -> int:
        return len(self._said)


class Memory:
    """Everything one kind's replicator remembers, each part under its own lock."""

    def __init__(self, watermark: Callable[[str], int], delete_grace: float,
                 clock: Clock) -> None:
        self.expectations = Expectations(watermark)
        self.removals = Removals(delete_grace, clock)
        # source key -> (its version, its namespace's version, reason) last warned about
        self.problems: Reported[str, tuple[str, str, str]] = Reported()
        # target object key -> (its version, the sources in conflict there) last warned about
        self.conflicts: Reported[str, tuple[str, frozenset[str]]] = Reported()
        # source key -> the content digest whose admission was last warned about
        self.mutations: Reported[str, str] = Reported()
        # namespace -> the refused pulls (entry, reason) last warned about
        self.refusals: Reported[str, frozenset[tuple[str, str]]] = Reported()
