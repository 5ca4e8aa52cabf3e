"""Reconciling keys: plan from the caches, write the difference, report what happened.

A source key plans the source (`plan.plan_source`) and returns the target keys that need work;
it writes nothing itself, so one source fanned out to thousands of namespaces keeps every
worker busy. A target key decides one object (`plan.decide`, the decision `plan` shows too)
and writes at most once.
API failures become the reconcile contract's errors here, with the source to tell about them;
the controller decides what to do about each. Events go to the recorder, which writes them
off the worker threads.

Our own writes reach the cache only through the watch, a few milliseconds later. Until then
`Expectations` remembers what we wrote, so a reconcile in that gap neither writes again nor
conflicts with itself. It is the reconciler's memory, not the informer's cache.

The server may keep something other than what we wrote: a mutating admission webhook or a
policy engine that labels every ConfigMap. Writing the source's content again would be
changed again, forever. So the replicator also remembers, per replica, what the server
stored of its last write (`plan.in_sync` takes that as in sync until the source changes or
someone else edits the replica) and says so once per source version, with a Warning Event
`ReplicaMutated`. That memory is lost with the process: after a restart each such replica
is written once more, and then remembered again.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from configmirror.clock import Clock, RealClock
from configmirror.events import EventRecorder, ObjectRef
from configmirror.kube import ApiError, Failure, Kube
from configmirror.metrics import Metrics
from configmirror.model import (
    CONTENT_HASH,
    MANAGED_BY,
    PULL_ROLE,
    RELEASED_FROM,
    REPLICA_LABEL,
    REPLICA_OF,
    SOURCE,
    CachedObject,
    Caches,
    Key,
    Namespace,
    admission_changes,
    kept_as_written,
    pull_key,
    replica_hash,
    target_key,
)
from configmirror.plan import (
    REMOVALS,
    Action,
    Conflict,
    Grace,
    Refusal,
    ReplicationPlan,
    decide,
    desired_body,
    plan_source,
    pull_refusals,
    unserved_pulls,
)
from configmirror.reconcile import (
    CacheBehind,
    Forbidden,
    ReconcileError,
    Result,
    RetryableError,
    ServerUnavailable,
    TerminalError,
)
from configmirror.spec import ON_DELETE, Scope

log = logging.getLogger(__name__)

REPLICATED = "Replicated"
MUTATED = "ReplicaMutated"
PULL_NOT_ALLOWED = "PullNotAllowed"
_ACTIONS = ("created", "updated", "deleted")
_DONE = {"create": "created", "update": "updated", "recreate": "updated", "delete": "deleted",
         "release": "released"}


def replicated_message(counts: dict[str, int]) -> str:
    """The one `Replicated` Event per source change: "created 3, updated 1, deleted 0 replicas"
    (and how many were released, when some were)."""
    done = [f"{action} {counts.get(action, 0)}" for action in _ACTIONS]
    if counts.get("released"):
        done.append(f"released {counts['released']}")
    return ", ".join(done) + " replicas"


@dataclass(frozen=True)
class _Expected:
    obj: CachedObject | None  # what we wrote (None: we deleted it)
    resource_version: int     # write: the version written; delete: the version deleted


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

    def wrote(self, obj: CachedObject) -> None:
        version = _version(obj.resource_version)
        if version is not None:
            with self._lock:
                self._pending[obj.key] = _Expected(obj, version)

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


class Replicator:
    """Reconciles source and target keys from the caches."""

    def __init__(self, kube: Kube, caches: Caches, scope: Scope, recorder: EventRecorder,
                 expectations: Expectations, metrics: Metrics | None = None,
                 dry_run: bool = False,
                 watching: Callable[[str], bool] = lambda key: True, *,
                 delete_grace: float, clock: Clock | None = None,
                 names: tuple[str, ...] = (),
                 unserved: frozenset[str] | None = None) -> None:
        """`names`: the only names of this kind that are watched (() for every object);
        `unserved`: when given, the kinds any replicator serves, and this one also reports
        the pulls none can (entries that do not parse, kinds not replicated)."""
        self._kube = kube
        self._caches = caches
        self._kind = caches.kind
        self.scope = scope
        self._recorder = recorder
        self._expectations = expectations
        self._watching = watching  # whether the informer of an object key is watching now
        self._metrics = metrics
        self.dry_run = dry_run
        self._lock = threading.Lock()
        # What has been reported already, so a resync or a repeat reconcile writes no Event:
        # source key -> (its version, its namespace's version, reason) last reported;
        # target key -> the conflicts reported for the object version there.
        self._problem_reported: dict[str, tuple[str, str, str]] = {}
        self._conflicts_reported: dict[Key, tuple[str, frozenset[str]]] = {}
        # Replica key -> (the source digest we wrote, the digest the server stored), for the
        # writes admission changed (plan.Admitted); source key -> the digest reported for.
        self._admitted: dict[str, tuple[str, str]] = {}
        self._mutation_reported: dict[str, str] = {}
        # Replica key -> when this process first saw the cause of its removal (plan.Grace):
        # the removal waits `delete_grace` from then, and is forgotten once the cause goes.
        self._delete_grace = delete_grace
        self._clock: Clock = clock or RealClock()
        self._removals: dict[str, float] = {}
        # Pulls: this kind's watched names, and namespace -> the refusals reported for it.
        self._names = names
        self._unserved = unserved
        self._refusals_reported: dict[str, frozenset[tuple[str, str]]] = {}

    def plans(self) -> list[ReplicationPlan]:
        """The plan of every source (and of every source a replica still names), from the
        cache and this process's memory: what `status` and --source-metrics show."""
        keys = {s.key for s in self._caches.sources()} | set(self._caches.replicated_sources())
        grace = self._grace()
        return [plan_source(key, self._caches, self._current, self.scope, self._admitted.get,
                            grace) for key in sorted(keys)]

    def pending_removals(self) -> int:
        """Replicas whose removal waits out the grace now."""
        return len(self._removals)

    def _grace(self) -> Grace:
        return Grace(self._delete_grace, self._clock.now(), self._removals.get)

    def echo(self, obj: CachedObject) -> bool:
        """Whether a watch event's object is the echo of our own write (Expectations.echo)."""
        return obj.compiled is None and obj.replica_of is not None and \
            self._expectations.echo(obj)

    def reconcile(self, key: Key) -> Result:
        if key.role == SOURCE:
            return self.reconcile_source(key)
        if key.role == PULL_ROLE:
            return self.reconcile_pulls(key)
        return self.reconcile_target(key)

    # -- a source: plan, and hand the work to target keys ------------------------------------

    def reconcile_source(self, key: Key) -> Result:
        """Plan one source and return the target keys whose object must change."""
        plan = plan_source(key.object_key, self._caches, self._current, self.scope,
                           self._admitted.get, self._grace())
        source = self._caches.get(key.object_key)
        if (source is None or source.compiled is None) and key.object_key in \
                self._mutation_reported:
            with self._lock:  # no longer a source: its next version reports afresh
                self._mutation_reported.pop(key.object_key, None)
        problem = ("InvalidSpec", plan.invalid) if plan.invalid is not None else (
            "SourceNotAllowed", plan.not_allowed) if plan.not_allowed is not None else None
        if problem is not None:
            self._report_problem(key, source, *problem)
        else:
            with self._lock:
                self._problem_reported.pop(key.object_key, None)
        if plan.invalid is not None:
            return Result()
        if self._removals:  # rarely: only while some removal waits out its grace
            # A removal whose cause is gone (the source is back) is called off now, not when
            # its delayed key comes round.
            removing = {f"{a.namespace}/{a.name}" for a in plan.actions if a.kind in REMOVALS}
            for replica in self._caches.replicas_of(key.object_key):
                if replica.key not in removing:
                    self._forget_removal(replica.key)
        kind = self._kind
        follow_up = {target_key(kind, a.namespace, a.name) for a in plan.actions}
        follow_up |= {target_key(kind, c.namespace, c.name) for c in plan.conflicts}
        # Whether what they pull gets to them may have changed with the source.
        follow_up |= {pull_key(kind, ns) for ns in plan.pullers}
        return Result(follow_up=tuple(sorted(follow_up)))

    def _report_problem(self, key: Key, source: CachedObject | None, reason: str,
                        message: str) -> None:
        """A Warning on the source, once per version of the source and of its namespace."""
        if source is None:
            return
        home = self._caches.namespace(source.namespace)
        seen = (source.resource_version, home.resource_version if home else "", reason)
        with self._lock:
            if self._problem_reported.get(key.object_key) == seen:
                return  # reported already; resyncs and repeats stay quiet
            self._problem_reported[key.object_key] = seen
        done = "nothing is changed" if reason == "InvalidSpec" else "it is not replicated"
        log.warning("source %s: %s; %s", key.object_key, message, done)
        if not self.dry_run:
            self._recorder.warning(self._ref(source), reason, message)

    # -- a namespace's pulls: say which get nothing -------------------------------------------

    def reconcile_pulls(self, key: Key) -> Result:
        """Report each pull of namespace `key.namespace` that gets nothing, with why, once per
        change: a Warning `PullNotAllowed` on the Namespace. The replicas themselves are the
        targets' work (a pulled source's plan includes the namespaces it admits)."""
        namespace = self._caches.namespace(key.namespace)
        if namespace is None:
            with self._lock:
                self._refusals_reported.pop(key.namespace, None)
            return Result()
        refusals = pull_refusals(namespace, self._caches, self.scope, self._names)
        if self._unserved is not None:
            refusals += unserved_pulls(namespace, self._unserved)
        now = frozenset((r.entry, r.reason) for r in refusals)
        with self._lock:
            before = self._refusals_reported.get(key.namespace, frozenset())
            if now:
                self._refusals_reported[key.namespace] = now
            else:
                self._refusals_reported.pop(key.namespace, None)
        for refusal in refusals:
            if (refusal.entry, refusal.reason) not in before:
                self._refuse(namespace, refusal)
        return Result()

    def _refuse(self, namespace: Namespace, refusal: Refusal) -> None:
        log.warning("namespace %s: %s", namespace.name, refusal.message)
        if not self.dry_run:
            self._recorder.warning(ObjectRef("Namespace", "", namespace.name, namespace.uid,
                                             namespace.resource_version),
                                   PULL_NOT_ALLOWED, refusal.message)

    # -- a target: decide one object, write at most once ------------------------------------

    def reconcile_target(self, key: Key) -> Result:
        current = self._current(key.object_key)
        if current is None:
            self._forget_admitted(key.object_key)  # gone (with its namespace, say)
        grace = self._grace()
        plan = decide(key.namespace, key.name, current, self._caches, self.scope,
                      self._admitted.get, grace)
        self._report_conflicts(key, plan.conflicts)
        if plan.action is None or plan.action.kind not in REMOVALS:
            self._forget_removal(key.object_key)  # its cause is gone, if it had one
        elif plan.action.due_in > 0:
            with self._lock:
                self._removals.setdefault(key.object_key, grace.now)
            return Result(requeue_after=plan.action.due_in)  # nothing written until then
        if plan.action is None:
            return Result()
        owner = self._ref(plan.owner) if plan.owner is not None else None
        if self.dry_run:
            log.info("dry-run: would %s replica %s/%s of %s (%s)", plan.action.kind,
                     key.namespace, key.name, plan.action.source, plan.action.why)
            return Result()
        try:
            self._apply(plan.action, plan.owner)
        except ApiError as err:
            failure = self._failed(plan.action, err, owner, plan.owner)
            if failure is None:
                return Result()
            raise failure from None
        self._forget_removal(key.object_key)
        if owner is not None:
            self._recorder.tally(owner, REPLICATED, _DONE[plan.action.kind], key.namespace,
                                 replicated_message)
        return Result(changed=True)

    def _forget_removal(self, key: str) -> None:
        if key in self._removals:  # rarely: only during a removal's grace (no lock)
            with self._lock:
                self._removals.pop(key, None)

    def _report_conflicts(self, key: Key, conflicts: tuple[Conflict, ...]) -> None:
        if not conflicts and key not in self._conflicts_reported:
            return  # the common case: no conflict now, none reported before (no lock)
        current = self._caches.get(key.object_key)
        version = current.resource_version if current is not None else ""
        reported = (version, frozenset(c.source for c in conflicts))
        with self._lock:
            if self._conflicts_reported.get(key) == reported:
                return
            if conflicts:
                self._conflicts_reported[key] = reported
            else:
                self._conflicts_reported.pop(key, None)
        if self.dry_run:
            return
        for conflict in conflicts:
            source = self._caches.get(conflict.source)
            if source is not None:
                self._recorder.warning(self._ref(source), "TargetConflict", conflict.message)

    def _current(self, key: str) -> CachedObject | None:
        return self._expectations.view(key, self._caches.get)

    def _ref(self, obj: CachedObject) -> ObjectRef:
        return ObjectRef.of(obj, self._kind.name)

    # -- writes ---------------------------------------------------------------------------------

    def _apply(self, action: Action, owner: CachedObject | None) -> None:
        if action.kind == "delete":
            self._delete(action)
            return
        if action.kind == "release":
            self._release(action)
            return
        assert owner is not None  # decide names the source of every create and update
        body = desired_body(owner, action.namespace)
        resource = self._kind.resource
        if action.kind == "update":
            body["metadata"] = {**body["metadata"], "resourceVersion": action.resource_version}
            self._write("update", resource.item(action.namespace, action.name), body, owner)
            return
        if action.kind == "recreate":
            self._delete(action)
        self._write("create", resource.collection(action.namespace), body, owner)

    def _write(self, verb: str, path: str, body: dict[str, object],
               owner: CachedObject) -> None:
        written = self._kube.request(verb, path, body=body)
        if self._metrics is not None:
            self._metrics.child(self._metrics.replica_writes, verb, self._kind.plural).inc()
        meta = written.get("metadata") or {}
        assert owner.compiled is not None
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        want = owner.compiled.content_hash
        stored = want if kept_as_written(owner.compiled, written, self._kind) else \
            replica_hash(written, self._kind)
        if stored != want:
            self._admission_changed(owner, f"{namespace}/{name}", want, stored, written)
        else:
            self._forget_admitted(f"{namespace}/{name}")
        # What the informer will make of it: what the server stored.
        self._expectations.wrote(CachedObject(
            namespace=namespace, name=name,
            uid=str(meta.get("uid", "")), resource_version=str(meta.get("resourceVersion", "")),
            replica_of=owner.key, immutable=bool(written.get("immutable")),
            content_hash=stored, compiled=None, type=str(written.get("type") or "")))

    def _admission_changed(self, owner: CachedObject, key: str, want: str, stored: str,
                           written: dict[str, object]) -> None:
        """The server stored our write of `want` at `key` as `stored`: remember it, so the
        replica is not written again for it, and say so once per version of the source."""
        assert owner.compiled is not None
        with self._lock:
            self._admitted[key] = (want, stored)
            if self._mutation_reported.get(owner.key) == want:
                return
            self._mutation_reported[owner.key] = want
        message = (f"the API server stored replica {key} other than it was written "
                   f"({admission_changes(owner.compiled, written, self._kind)}): an admission "
                   f"webhook or policy changes replicas. configmirror keeps what the server "
                   f"stores, and writes a replica again only when the source changes or the "
                   f"replica is edited")
        log.warning("source %s: %s", owner.key, message)
        if not self.dry_run:
            self._recorder.warning(self._ref(owner), MUTATED, message)

    def _forget_admitted(self, key: str) -> None:
        if key in self._admitted:  # rarely: only where admission changed a write (no lock)
            with self._lock:
                self._admitted.pop(key, None)

    def _release(self, action: Action) -> None:
        """Take our marks off a replica (on-delete: retain): from then on it is its
        namespace's own object. A merge patch of the marks only, on the version planned from
        (a replica edited meanwhile gets a 409 and is planned again); we never hold its data."""
        patch = {"metadata": {
            "resourceVersion": action.resource_version,
            "labels": {REPLICA_LABEL: None, MANAGED_BY: None},
            "annotations": {REPLICA_OF: None, CONTENT_HASH: None, ON_DELETE: None,
                            RELEASED_FROM: action.source}}}
        written = self._kube.request(
            "patch", self._kind.resource.item(action.namespace, action.name), body=patch,
            content_type="application/merge-patch+json")
        if self._metrics is not None:
            self._metrics.child(self._metrics.replica_writes, "release", self._kind.plural).inc()
        self._forget_admitted(f"{action.namespace}/{action.name}")
        # Until the watch brings it, the cache still holds our replica: what we made of it
        # is no replica any more.
        meta = written.get("metadata") or {}
        self._expectations.wrote(CachedObject(
            namespace=action.namespace, name=action.name, uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")), replica_of=None,
            immutable=bool(written.get("immutable")), content_hash="", compiled=None,
            type=str(written.get("type") or "")))

    def _delete(self, action: Action) -> None:
        # Precondition on the version we planned from: a replica edited meanwhile gets a 409
        # and is planned again, never deleted blindly.
        options = {"kind": "DeleteOptions", "apiVersion": "v1",
                   "preconditions": {"resourceVersion": action.resource_version}}
        try:
            self._kube.request("delete", self._kind.resource.item(action.namespace, action.name),
                               body=options)
        except ApiError as err:
            if err.failure is not Failure.NOT_FOUND:  # already gone is what we wanted
                raise
        if self._metrics is not None:
            self._metrics.child(self._metrics.replica_writes, "delete", self._kind.plural).inc()
        self._expectations.deleted(f"{action.namespace}/{action.name}",
                                   action.resource_version)
        self._forget_admitted(f"{action.namespace}/{action.name}")

    def _failed(self, action: Action, err: ApiError, owner: ObjectRef | None,
                source: CachedObject | None) -> ReconcileError | None:
        """The reconcile contract's error for a failed write, naming what and where; None
        when there is nothing to retry or report. Never a value of the source: a server's
        message may echo a field, so the source's values are cut out of it."""
        if source is not None and source.compiled is not None:
            err = redacted(err, source.compiled.payload.get("data") or {})
        where = f"{action.kind} {self._kind.name} {action.namespace}/{action.name}"
        if err.failure is Failure.UNAVAILABLE:
            return ServerUnavailable(f"{where}: {err}", owner, err.retry_after)
        if err.failure in (Failure.CONFLICT, Failure.NOT_FOUND):
            stale = f"{where}: {err}"
            if not self._watching(f"{action.namespace}/{action.name}"):
                # The watch is down (an outage, or its backoff after one): the cache cannot
                # catch up until it is back, so this waits for the watch, uncounted. Not for
                # the server: it answered (issue 42: as an outage's probe, such a key could not
                # succeed before the watch was back, and held every other key back with it).
                return CacheBehind(f"{stale} (the cache is behind until the watch "
                                   f"reconnects)", owner)
            # Our view was stale (edited, created or deleted by someone else): the watch
            # brings the new state, and the retry plans from it.
            return RetryableError(stale, owner)
        if err.namespace_terminating:
            # It became Terminating after the cache said otherwise: its objects go with it.
            log.info("%s skipped: namespace is terminating", where)
            return None
        refused = err.status in (401, 403)
        if err.status == 403:
            message = f"{where} forbidden: {err.message}"
        else:
            message = f"{where} rejected by the API server: {err.message}"
        if owner is not None:
            self._recorder.warning(owner, "ReplicationFailed", message)
        # A refusal is the permission's fault, except from a server just back (servergate).
        return Forbidden(message) if refused else TerminalError(message)



def redacted(err: ApiError, data: dict[str, str]) -> ApiError:
    """`err` with every value of `data` (as sent, base64, and decoded) cut out of its message.

    The rest of an error is ours (verb, path: namespace and name) or the server's reason.
    """
    message = err.message
    for value in _forms(data):
        message = message.replace(value, "[redacted]")
    if message == err.message:
        return err
    return ApiError(err.status, err.reason, message, err.verb, err.path, err.retry_after)


def _forms(data: dict[str, str]) -> list[str]:
    forms: set[str] = set()
    for value in data.values():
        if len(value) >= 4:  # shorter ones would cut ordinary words out of messages
            forms.add(value)
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                decoded = base64.b64decode(value, validate=True).decode()
                if len(decoded) >= 4:
                    forms.add(decoded)
    return sorted(forms, key=len, reverse=True)
