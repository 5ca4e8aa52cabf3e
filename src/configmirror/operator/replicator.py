"""Reconciling keys: decide from the caches, write the difference, report what happened.

A source key plans the source (`plan.plan_source`) and returns the target keys that need work;
it writes nothing itself, so one source fanned out to thousands of namespaces keeps every
worker busy. A target key decides one object (`plan.decide`, the decision `plan` shows too)
and writes at most once.
API failures become the reconcile contract's errors here, with the source to tell about them;
the controller decides what to do about each. Events go to the recorder, which writes them
off the worker threads.

What a reconcile remembers of earlier ones (our writes in flight, removals in their grace,
what was reported) is `memory.Memory`. What admission made of our writes is not remembered
here: it is on the replica (model.py), so `plan`, `status`, `wait` and a restarted operator
judge it as this process does. Where the server stores a write otherwise than it was sent
(a mutating webhook or policy engine), the replicator says so once per source version, with
a Warning Event `ReplicaMutated`, and when admission changed fields configmirror writes,
names them on the replica (`configmirror.io/admitted`) with one merge patch.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import sys
from collections.abc import Callable
from typing import Any

from configmirror.client.events import Recorder
from configmirror.client.kube import ApiError, Failure, Kube
from configmirror.controller.reconcile import (
    CacheBehind,
    Forbidden,
    ReconcileError,
    Result,
    RetryableError,
    ServerUnavailable,
    TerminalError,
)
from configmirror.metrics import Metrics
from configmirror.operator.memory import Memory
from configmirror.replication.admission import ADMITTED, admitted_mark
from configmirror.replication.adoption import Mirror, adoption_patch
from configmirror.replication.model import (
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
    admitted_fields,
    fixed_of,
    kept_as_written,
    pull_key,
    replica_object,
    source_key,
    target_key,
)
from configmirror.replication.plan import (
    REMOVALS,
    Action,
    Conflict,
    Refusal,
    ReplicationPlan,
    decide,
    desired_body,
    plan_source,
    pull_refusals,
    unserved_pulls,
)
from configmirror.replication.spec import ON_DELETE, Scope
from configmirror.vocabulary import ObjectRef

log = logging.getLogger(__name__)

REPLICATED = "Replicated"
# How the API server's RBAC escalation check words its refusal (k8s.io/kubernetes,
# pkg/registry/rbac/validation: ConfirmNoEscalation).
_ESCALATION = "is attempting to grant RBAC permissions not currently held"
MUTATED = "ReplicaMutated"
PULL_NOT_ALLOWED = "PullNotAllowed"
_ACTIONS = ("created", "updated", "deleted")
_DONE = {"create": "created", "update": "updated", "recreate": "updated", "delete": "deleted",
         "release": "released", "adopt": "adopted"}


def replicated_message(counts: dict[str, int]) -> str:
    """The one `Replicated` Event per source change: "created 3, updated 1, deleted 0 replicas"
    (and how many were released, or adopted from another tool, when some were)."""
    done = [f"{action} {counts.get(action, 0)}" for action in _ACTIONS]
    done += [f"{action} {counts[action]}" for action in ("released", "adopted")
             if counts.get(action)]
    return ", ".join(done) + " replicas"


class Replicator:
    """Reconciles source and target keys from the caches."""

    def __init__(self, kube: Kube, caches: Caches, scope: Scope, recorder: Recorder,
                 memory: Memory, *, metrics: Metrics | None = None, dry_run: bool = False,
                 watching: Callable[[str], bool] = lambda key: True,
                 names: tuple[str, ...] = (), unserved: frozenset[str] | None = None,
                 reports_sources: bool = True, cluster: str = "") -> None:
        """`watching(ns/name)`: whether the informer of that object is watching now;
        `names`: the only names of this kind that are watched (() for every object);
        `unserved`: when given, the kinds any replicator serves, and this one also reports
        the pulls none can (entries that do not parse, kinds not replicated);
        `reports_sources`: whether it reports a source's own problems (InvalidSpec,
        SourceNotAllowed): a member cluster's leaves them to the home cluster's, which
        plans every source too; `cluster`: a member's name, whose writes are also counted
        under it."""
        self._kube = kube
        self._caches = caches
        self._kind = caches.kind
        self.scope = scope
        self._recorder = recorder
        self._memory = memory
        self._metrics = metrics
        self.dry_run = dry_run
        self._watching = watching
        self._names = names
        self._unserved = unserved
        self._reports_sources = reports_sources
        self._cluster = cluster

    def plans(self) -> list[ReplicationPlan]:
        """The plan of every source (and of every source a replica still names), from the
        cache and this process's memory: what `status` and --source-metrics show."""
        keys = {s.key for s in self._caches.sources()} | set(self._caches.replicated_sources())
        grace = self._memory.removals.grace()
        return [plan_source(key, self._caches, self._current, self.scope, grace)
                for key in sorted(keys)]

    def pending_removals(self) -> int:
        """Replicas whose removal waits out the grace now."""
        return len(self._memory.removals)

    def echo(self, obj: CachedObject) -> bool:
        """Whether a watch event's object is the echo of our own write (Expectations.echo)."""
        return obj.compiled is None and obj.replica_of is not None and \
            self._memory.expectations.echo(obj)

    def reconcile(self, key: Key) -> Result:
        if key.role == SOURCE:
            return self.reconcile_source(key)
        if key.role == PULL_ROLE:
            return self.reconcile_pulls(key)
        return self.reconcile_target(key)

    # -- a source: plan, and hand the work to target keys ------------------------------------

    def reconcile_source(self, key: Key) -> Result:
        """Plan one source and return the target keys whose object must change."""
        removals = self._memory.removals
        plan = plan_source(key.object_key, self._caches, self._current, self.scope,
                           removals.grace())
        source = self._caches.source(key.object_key)
        if source is None or source.compiled is None:
            self._memory.mutations.forget(key.object_key)  # its next version reports afresh
        problem = ("InvalidSpec", plan.invalid) if plan.invalid is not None else (
            "SourceNotAllowed", plan.not_allowed) if plan.not_allowed is not None else None
        if problem is not None and self._reports_sources:
            self._report_problem(key, source, *problem)
        else:
            self._memory.problems.forget(key.object_key)
        if plan.invalid is not None:
            return Result()
        if len(removals):  # rarely: only while some removal waits out its grace
            # A removal whose cause is gone (the source is back) is called off now, not when
            # its delayed key comes round.
            removing = {f"{a.namespace}/{a.name}" for a in plan.actions if a.kind in REMOVALS}
            for replica in self._caches.replicas_of(key.object_key):
                if replica.key not in removing:
                    removals.forget(replica.key)
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
        home = self._caches.source_namespace(source.namespace)
        seen = (source.resource_version, home.resource_version if home else "", reason)
        if not self._memory.problems.first(key.object_key, seen):
            return  # reported already; resyncs and repeats stay quiet
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
            self._memory.refusals.forget(key.namespace)
            return Result()
        refusals = pull_refusals(namespace, self._caches, self.scope, self._names)
        if self._unserved is not None:
            refusals += unserved_pulls(namespace, self._unserved)
        now = frozenset((r.entry, r.reason) for r in refusals)
        before = self._memory.refusals.replace(key.namespace, now or None) or frozenset()
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
        removals = self._memory.removals
        grace = removals.grace()
        plan = decide(key.namespace, key.name, current, self._caches, self.scope, grace)
        self._report_conflicts(key, plan.conflicts)
        if plan.action is None or plan.action.kind not in REMOVALS:
            removals.forget(key.object_key)  # its cause is gone, if it had one
        elif plan.action.due_in > 0:
            removals.waiting(key.object_key, grace.now)
            return Result(requeue_after=plan.action.due_in)  # nothing written until then
        if plan.action is None:
            return Result()
        owner = self._ref(plan.owner) if plan.owner is not None else None
        if self.dry_run:
            log.info("dry-run: would %s replica %s/%s of %s (%s)", plan.action.kind,
                     key.namespace, key.name, plan.action.source, plan.action.why)
            return Result()
        try:
            self._apply(plan.action, plan.owner,
                        current.admitted if current is not None else frozenset(),
                        current.mirror if current is not None else None)
        except ApiError as err:
            failure = self._failed(plan.action, err, owner, plan.owner)
            if failure is None:
                return Result()
            raise failure from None
        removals.forget(key.object_key)
        if owner is not None:
            self._recorder.tally(owner, REPLICATED,
                                 "adopted" if plan.action.adopts else _DONE[plan.action.kind],
                                 key.namespace, replicated_message)
        return Result(changed=True)

    def _report_conflicts(self, key: Key, conflicts: tuple[Conflict, ...]) -> None:
        reported = self._memory.conflicts
        if not conflicts:
            reported.forget(key.object_key)  # the common case: none now, none before
            return
        current = self._caches.get(key.object_key)
        version = current.resource_version if current is not None else ""
        if not reported.first(key.object_key, (version, frozenset(c.source for c in conflicts))):
            return
        if self.dry_run:
            return
        for conflict in conflicts:
            source = self._caches.source(conflict.source)
            if source is not None:
                self._recorder.warning(self._ref(source), "TargetConflict", conflict.message)

    def _current(self, key: str) -> CachedObject | None:
        return self._memory.expectations.view(key, self._caches.get)

    def _ref(self, obj: CachedObject) -> ObjectRef:
        return ObjectRef.of(obj, self._kind.name, self._kind.resource.api_version)

    # -- writes ---------------------------------------------------------------------------------

    def _apply(self, action: Action, owner: CachedObject | None,
               admitted: frozenset[str], mirror: Mirror | None = None) -> None:
        """Do `action`; `admitted`: the fields the replica there gives admission now (its
        mark, which a rewrite keeps); `mirror`: the other tool's mirror there, if any."""
        if action.kind == "adopt":
            assert owner is not None and mirror is not None  # decide adopts only a mirror
            self._adopt(action, owner, mirror)
            return
        if action.kind == "delete":
            self._delete(action)
            return
        if action.kind == "release":
            self._release(action)
            return
        assert owner is not None  # decide names the source of every create and update
        body = desired_body(owner, action.namespace)
        if admitted:  # rarely: admission changes fields we write here, as it will again
            body["metadata"]["annotations"] = {**body["metadata"]["annotations"],
                                               ADMITTED: admitted_mark(admitted)}
        resource = self._kind.resource
        if action.kind == "update":
            body["metadata"] = {**body["metadata"], "resourceVersion": action.resource_version}
            self._write("update", resource.item(action.namespace, action.name), body, owner,
                        admitted)
            return
        if action.kind == "recreate":
            self._delete(action)
        self._write("create", resource.collection(action.namespace), body, owner, admitted)

    def _adopt(self, action: Action, owner: CachedObject, mirror: Mirror) -> None:
        """Take over another tool's mirror that holds the source's content: one merge patch of
        its labels and annotations (ours in, the tool's out) on the version decided from; the
        object, its uid and its data stay as they are."""
        compiled = owner.compiled
        assert compiled is not None
        patch = adoption_patch(mirror, compiled.labels, compiled.annotations,
                               bool(compiled.payload.get("immutable")), action.resource_version)
        written = self._kube.request(
            "patch", self._kind.resource.item(action.namespace, action.name), body=patch,
            content_type="application/merge-patch+json")
        self._count("adopt")
        self._written(written, owner, frozenset())

    def _write(self, verb: str, path: str, body: dict[str, object], owner: CachedObject,
               carried: frozenset[str]) -> None:
        written = self._kube.request(verb, path, body=body)
        self._count(verb)
        self._written(written, owner, carried)

    def _written(self, written: dict[str, Any], owner: CachedObject,
                 carried: frozenset[str]) -> None:
        """Remember what the server stored of a write from `owner` (and mark on it what
        admission changed)."""
        compiled = owner.compiled
        assert compiled is not None
        as_written = kept_as_written(compiled, written, self._kind)
        if as_written and not carried:  # the common case: a few comparisons, no hashing
            meta = written.get("metadata") or {}
            # Stored exactly as written, so this is what the informer makes of it (the same
            # digest, the same interned names: tests/unit/test_expectations.py holds the two
            # equal), unless the server's object carries an admitted mark we did not write.
            self._memory.expectations.wrote(CachedObject(
                namespace=sys.intern(str(meta.get("namespace", ""))),
                name=sys.intern(str(meta.get("name", ""))),
                uid=str(meta.get("uid", "")),
                resource_version=str(meta.get("resourceVersion", "")), replica_of=owner.key,
                immutable=bool(written.get("immutable")), content_hash=compiled.content_hash,
                compiled=None, type=fixed_of(written, self._kind), retain=compiled.lifecycle
                .retain), exact=ADMITTED not in (meta.get("annotations") or {}))
            return
        admitted = frozenset[str]() if as_written else admitted_fields(compiled, written,
                                                                       self._kind)
        if not as_written:
            self._admission_changed(owner, written)
        if admitted != carried:
            written = self._mark(written, admitted)
        # What the informer will make of it: what the server stored.
        self._memory.expectations.wrote(replica_object(written, self._kind, owner.key))

    def _mark(self, written: dict[str, Any], admitted: frozenset[str]) -> dict[str, Any]:
        """Name on the replica the fields admission changed (None: there are none any more),
        so whoever reads it (`plan`, `status`, a restarted operator) calls it in sync. A
        merge patch of that one annotation, on the version just written."""
        meta = written.get("metadata") or {}
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": {
            ADMITTED: admitted_mark(admitted) if admitted else None}}}
        marked = self._kube.request(
            "patch", self._kind.resource.item(str(meta.get("namespace", "")),
                                              str(meta.get("name", ""))),
            body=patch, content_type="application/merge-patch+json")
        self._count("admitted")
        return marked

    def _count(self, action: str) -> None:
        if self._metrics is not None:
            self._metrics.child(self._metrics.replica_writes, action, self._kind.plural).inc()
            if self._cluster:
                self._metrics.child(self._metrics.cluster_replica_writes, self._cluster,
                                    action).inc()

    def _admission_changed(self, owner: CachedObject, written: dict[str, Any]) -> None:
        """The server stored our write other than we sent it: say so once per version of
        the source."""
        compiled = owner.compiled
        assert compiled is not None
        if not self._memory.mutations.first(owner.key, compiled.content_hash):
            return
        meta = written.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        message = (f"the API server stored replica {key} other than it was written "
                   f"({admission_changes(compiled, written, self._kind)}): an admission "
                   f"webhook or policy changes replicas. configmirror keeps what the server "
                   f"stores: fields it does not write are not drift, and those it writes "
                   f"that admission changes are named in {ADMITTED} on the replica; it "
                   f"writes a replica again only when the source changes or the replica is "
                   f"edited")
        log.warning("source %s: %s", owner.key, message)
        if not self.dry_run:
            self._recorder.warning(self._ref(owner), MUTATED, message)

    def _release(self, action: Action) -> None:
        """Take our marks off a replica (on-delete: retain): from then on it is its
        namespace's own object. A merge patch of the marks only, on the version planned from
        (a replica edited meanwhile gets a 409 and is planned again); we never hold its data."""
        patch = {"metadata": {
            "resourceVersion": action.resource_version,
            "labels": {REPLICA_LABEL: None, MANAGED_BY: None},
            "annotations": {REPLICA_OF: None, CONTENT_HASH: None, ON_DELETE: None,
                            ADMITTED: None, RELEASED_FROM: action.source}}}
        written = self._kube.request(
            "patch", self._kind.resource.item(action.namespace, action.name), body=patch,
            content_type="application/merge-patch+json")
        self._count("release")
        # Until the watch brings it, the cache still holds our replica: what we made of it
        # is no replica any more.
        meta = written.get("metadata") or {}
        self._memory.expectations.wrote(CachedObject(
            namespace=action.namespace, name=action.name, uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")), replica_of=None,
            immutable=bool(written.get("immutable")), content_hash="", compiled=None,
            type=fixed_of(written, self._kind)))

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
        self._count("delete")
        self._memory.expectations.deleted(f"{action.namespace}/{action.name}",
                                          action.resource_version)

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
        if err.status == 403 and _ESCALATION in err.message and source is not None:
            # A Role (or RoleBinding) granting what the operator does not hold: the source's
            # fault, not the operator's rights; said once per version of it, never retried.
            self._report_problem(source_key(self._kind, source.namespace, source.name), source,
                                 "InvalidSpec", f"{where}: the API server refuses the operator "
                                 f"a {self._kind.name} that grants permissions it does not "
                                 f"hold itself (RBAC's escalation check): {err.message}")
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
