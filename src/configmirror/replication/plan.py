"""Desired state and the actions that reach it: pure functions of the caches.

One decision, `decide`, says what one target object (a namespace and a name) must be: which
source owns it, the one write that gets it there (create, update, recreate, delete, release,
or none), when that write may happen (a removal waits out the grace), and which other
sources cannot have it. The workers apply it, one target key at a
time. `plan_source` gathers the decisions of every object one source touches; the `plan`
command prints them and a source reconcile turns them into target keys. Both go through
the same `decide`, so what `plan` says is what `run` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from configmirror.replication.adoption import Mirror
from configmirror.replication.model import (
    CachedObject,
    Caches,
    Namespace,
    Source,
    payload_digest,
    replica_holds,
)
from configmirror.replication.spec import Scope
from configmirror.vocabulary import Kind

ActionKind = Literal["create", "update", "recreate", "delete", "release", "adopt"]
REMOVALS = ("delete", "release")  # the actions that take a replica away: they wait

@dataclass(frozen=True)
class Grace:
    """When a removal may happen: `seconds` after this process first saw its cause.

    `seen_at(ns/name)` is when that was, by the clock `now` is read from; None: only now (a
    removal this process has not seen before, or the `plan` command, which remembers nothing,
    so it says how long the grace is from now). The state is memory.Removals: after a
    restart the grace starts again.
    """

    seconds: float
    now: float
    seen_at: Callable[[str], float | None]

    def due_in(self, key: str) -> float:
        seen = self.seen_at(key)
        return max((self.now if seen is None else seen) + self.seconds - self.now, 0.0)

    @classmethod
    def from_now(cls, seconds: float) -> Grace:
        """The grace of a process that has seen no cause before (`plan`, `status`)."""
        return cls(seconds, 0.0, lambda key: None)


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    namespace: str
    name: str
    resource_version: str  # of the replica now ("" for create): a precondition for the write
    why: str
    source: str            # the key ("ns/name") of the source it is done for
    due_in: float = 0.0    # seconds until it may be done (a removal's grace); 0: now
    # The tool whose mirror this write takes over ("": none): "adopt" is the one merge patch
    # of a mirror with the source's content; an update (or recreate) adopts one without.
    adopts: str = ""


@dataclass(frozen=True)
class Conflict:
    """A source wants a target it cannot have: a foreign object, or another source's place."""

    namespace: str
    name: str
    source: str        # the source that is left out
    owner: str | None  # the source whose replica is (or is to be) there; None: foreign
    message: str


@dataclass(frozen=True)
class Decision:
    """What one target object must become, and for which source."""

    namespace: str
    name: str
    action: Action | None = None
    owner: CachedObject | None = None  # the source the replica is (to be) a copy of
    conflicts: tuple[Conflict, ...] = ()
    # The create that follows a delete, for the oldest source that wants the place (its
    # replica goes in once the watch has brought the delete): shown by `plan`, applied by
    # the next decision.
    then: Action | None = None


@dataclass(frozen=True)
class ReplicationPlan:
    """What reconciling one source would change: the decisions of the objects it touches,
    as far as they concern it."""

    kind: str
    source: str
    actions: tuple[Action, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    invalid: str | None = None
    not_allowed: str | None = None  # why its namespace may not hold sources
    targets: tuple[str, ...] = ()
    content: dict[str, Any] | None = None  # key names, sizes and hash: never values
    pullers: tuple[str, ...] = ()  # namespaces that pull it (consented or not)

    @property
    def in_sync(self) -> bool:
        return (not self.actions and not self.conflicts and self.invalid is None
                and self.not_allowed is None)

    @property
    def targets_in_sync(self) -> int:
        """Targets that hold this source's replica as it must be: no write pending there for
        it, and no conflict keeping it out."""
        busy = {a.namespace for a in self.actions} | {c.namespace for c in self.conflicts}
        return sum(1 for t in self.targets if t not in busy)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "source": self.source, "targets": list(self.targets),
            "invalid": self.invalid,
            "not_allowed": self.not_allowed, "content": self.content,
            "actions": [{"action": a.kind, "namespace": a.namespace, "name": a.name,
                         "why": a.why, "due_in": round(a.due_in, 1),
                         **({"adopts": a.adopts} if a.adopts else {})}
                        for a in self.actions],
            "conflicts": [{"namespace": c.namespace, "name": c.name, "owner": c.owner,
                           "message": c.message} for c in self.conflicts],
        }


# -- where replicas belong ------------------------------------------------------------------


def honoured(source: CachedObject | None, home: Namespace | None, scope: Scope) -> bool:
    """A source the operator acts on: annotated, and its namespace (`home`) may hold sources."""
    return (source is not None and source.compiled is not None and home is not None
            and scope.honours(home))


def wants(source: CachedObject, namespace: Namespace, scope: Scope) -> bool:
    """Whether an honoured `source` must have a replica in `namespace`: the targeting rule.
    It pushes there, or the namespace pulls it and it allows that namespace to."""
    compiled = source.compiled
    return (compiled is not None and compiled.spec is not None
            and scope.reaches(compiled.spec)
            and scope.may_target(source.namespace, namespace)
            and (compiled.spec.wants(namespace)
                 or (bool(namespace.pulls.entries)  # the common case: no pulls at all
                     and (compiled.pull_name or compiled.kind, source.key)
                     in namespace.pulls.entries
                     and compiled.spec.admits(namespace))))


def pull_entry(kind: str, key: str) -> str:
    """How a `configmirror.io/pull` entry names source `key` of `kind` (a kind's name): with
    no prefix for a ConfigMap, `secret/` for a Secret."""
    return key if kind == "ConfigMap" else f"{kind.lower()}/{key}"


def pulls_of(kind: Kind, namespace: Namespace) -> list[str]:
    """The sources of `kind` ("ns/name") that `namespace` pulls."""
    return sorted(key for k, key in namespace.pulls.entries if k == kind.pull_name)


@dataclass(frozen=True)
class Refusal:
    """A pull that gets nothing, and why: reported on the Namespace (PullNotAllowed)."""

    namespace: str
    entry: str   # as the annotation names it: "secret/platform/creds", or the raw text
    reason: str

    @property
    def message(self) -> str:
        return f"configmirror.io/pull entry {self.entry!r}: {self.reason}; nothing is replicated"


def pull_refusals(namespace: Namespace, caches: Caches, scope: Scope,
                  names: tuple[str, ...]) -> list[Refusal]:
    """The pulls of `namespace` for `caches.kind` that get nothing, each with why.

    `names` are the only names of that kind the operator watches (its --secret-names; ()
    for every object): a pull of another name can never be served. Fail closed: no consent,
    no such source, a source that is not honoured or whose spec does not parse.
    """
    kind = caches.kind
    refusals = []
    for key in pulls_of(kind, namespace):
        entry = pull_entry(kind.pull_name, key)
        source = caches.source(key)
        compiled = source.compiled if source is not None else None
        home = caches.source_namespace(source.namespace) if source is not None else None
        if names and key.partition("/")[2] not in names:
            reason = (f"the operator replicates only the {kind.name}s named in "
                      f"--secret-names ({', '.join(names)})")
        elif source is None:
            reason = f"there is no {kind.name} {key}"
        elif compiled is None:
            reason = (f"{kind.name} {key} is not a source (it has no configmirror.io/"
                      f"replicate-to or pull-allowed annotation)")
        elif home is None or not scope.honours(home):
            reason = (scope.refusal(home) if home is not None
                      else f"namespace {source.namespace} is not known yet")
        elif compiled.spec is None:
            reason = f"its source has an invalid spec: {compiled.invalid}"
        elif not scope.reaches(compiled.spec):
            reason = (f"{key} does not reach cluster {scope.cluster} (its configmirror.io/"
                      f"replicate-to-clusters and replicate-to-clusters-matching)")
        elif not scope.may_target(source.namespace, namespace):
            reason = (f"namespace {namespace.name} never receives replicas (the source's own "
                      f"namespace, the operator's, labelled configmirror.io/ignore=true, "
                      f"excluded by --exclude-namespaces, or terminating)")
        elif not compiled.spec.admits(namespace):
            reason = (f"{key} does not allow namespace {namespace.name} to pull it (its "
                      f"configmirror.io/pull-allowed and pull-allowed-matching)")
        else:
            continue
        refusals.append(Refusal(namespace.name, entry, reason))
    return refusals


def unserved_pulls(namespace: Namespace, kinds: frozenset[str]) -> list[Refusal]:
    """The pulls of `namespace` no kind can serve: entries that do not parse, and sources of
    a kind the operator does not replicate (Secrets without --secret-names, a kind --kinds
    does not name)."""
    refusals = [Refusal(namespace.name, entry, why) for entry, why in namespace.pulls.faults]
    for kind, key in sorted(namespace.pulls.entries):
        if kind not in kinds:
            why = ("the operator replicates no Secrets (it runs without --secret-names)"
                   if kind == "Secret" else f"the operator replicates no {kind} objects (its "
                   f"--kinds does not name {kind.lower()}"
                   + (" as GROUP/VERSION/Kind)" if "." in kind else ")"))
            refusals.append(Refusal(namespace.name, pull_entry(kind, key), why))
    return refusals


def seniority(source: CachedObject) -> tuple[str, str]:
    """Of two sources with one name that both want a place no replica holds yet, the older
    (creationTimestamp, then namespace name) gets it, so the outcome is known in advance."""
    return (source.created, source.namespace)


def in_sync(current: CachedObject, source: Source) -> bool:
    """Whether replica `current` holds what `source` asks: the same digest, or, where
    admission stored it otherwise, every field configmirror writes but those admission owns
    (model.replica_holds: read from the replica, so a command and a restart see the same).
    Anything else, such as an edit by hand of a field we write, is drift."""
    return current.content_hash == source.content_hash or replica_holds(source, current)


def desired_body(source: CachedObject, namespace: str) -> dict[str, Any]:
    """The replica of `source` in `namespace` as it is written (without resourceVersion)."""
    compiled = source.compiled
    if compiled is None:
        raise ValueError(f"{source.key} is not a source")
    body: dict[str, Any] = {
        "apiVersion": compiled.api_version, "kind": compiled.kind,
        "metadata": {"name": source.name, "namespace": namespace, "labels": compiled.labels,
                     "annotations": compiled.annotations},
    }
    body.update(compiled.written or {})  # the payload's fields, as the kind writes them
    return body


# -- one target: the decision ------------------------------------------------------------------


def decide(namespace: str, name: str, current: CachedObject | None, caches: Caches,
           scope: Scope, grace: Grace) -> Decision:
    """Decide what object `namespace/name` must be, given every source called `name`.

    `current` is the object there now (None: nothing); `grace` says when a removal may
    happen. The replica already there
    keeps its source (its replica-of wins); with none there, the oldest source that wants
    the place gets it (`seniority`); every other source that wants it is in conflict.
    Nothing is ever written over a foreign object, or into a namespace that is gone or going.
    A replica whose source went away with `on-delete: retain` is released, not deleted; one
    whose source says `sync: once` is never updated.
    """
    ns = caches.namespace(namespace)
    candidates = [] if ns is None else [
        s for s in _contenders(caches.sources_named(name), caches, scope) if wants(s, ns, scope)]
    return _decide(namespace, name, current, ns, candidates, caches, scope, grace)


def _contenders(sources: Iterable[CachedObject], caches: Caches, scope: Scope
                ) -> list[CachedObject]:
    """The honoured sources among `sources` (of one name), oldest first."""
    return sorted((s for s in sources if honoured(s, caches.source_namespace(s.namespace),
                                                  scope)),
                  key=seniority)


def _decide(namespace: str, name: str, current: CachedObject | None, ns: Namespace | None,
            candidates: list[CachedObject], caches: Caches, scope: Scope,
            grace: Grace) -> Decision:
    """`decide`, given `candidates`: the honoured sources that want the place, oldest first."""
    if ns is None or ns.terminating:
        return Decision(namespace, name)
    if current is None:
        if not candidates:
            return Decision(namespace, name)
        winner, *others = candidates
        return Decision(namespace, name, Action("create", namespace, name, "", "missing",
                                                winner.key), winner, tuple(
            Conflict(namespace, name, c.key, winner.key,
                     f"{namespace}/{name} goes to {winner.key}, the older source of that "
                     f"name; this one is left out") for c in others))
    if current.replica_of is None:
        if current.mirror is not None and candidates:
            adopted = _adoption(namespace, name, current, current.mirror, candidates, scope)
            if adopted is not None:
                return adopted
        return Decision(namespace, name, conflicts=tuple(
            Conflict(namespace, name, c.key, None,
                     f"{namespace}/{name} exists and is not a replica; it is left untouched "
                     f"(delete it to let the replica be created{_adoptable(current, c)})")
            for c in candidates))

    owner_key = current.replica_of
    conflicts = tuple(Conflict(namespace, name, c.key, owner_key,
                               f"{namespace}/{name} is already a replica of {owner_key}; it "
                               f"is left as it is")
                      for c in candidates if c.key != owner_key)
    owner = next((c for c in candidates if c.key == owner_key), None)
    if owner is not None:
        assert owner.compiled is not None
        if owner.compiled.lifecycle.once or in_sync(current, owner.compiled):
            return Decision(namespace, name, owner=owner, conflicts=conflicts)
        return Decision(namespace, name, Action(
            _change(current, owner), namespace, name, current.resource_version,
            "differs from the source", owner_key), owner, conflicts)
    source = caches.source(owner_key)
    home = caches.source_namespace(source.namespace) if source is not None else None
    if source is not None and source.compiled is not None and (
            home is None  # its namespace is not cached yet: decide nothing
            or (scope.honours(home) and source.compiled.invalid is not None)):  # a typo
        return Decision(namespace, name, conflicts=conflicts)  # never deletes data
    why = _orphaned_because(source, home, scope)
    due_in = grace.due_in(current.key)
    if _released(current, source, why):
        # Released, it is its namespace's own object: every source that wants the place is
        # in conflict with it, as with any other.
        return Decision(namespace, name, Action(
            "release", namespace, name, current.resource_version, why, owner_key, due_in),
            source, tuple(Conflict(namespace, name, c.key, None,
                                   f"{namespace}/{name} is released from {owner_key} "
                                   f"(on-delete: retain) and is its namespace's own object "
                                   f"then; it is left untouched") for c in candidates))
    then: Action | None = None
    after: tuple[Conflict, ...] = ()
    if candidates:
        heir, *others = candidates
        then = Action("create", namespace, name, "", f"replaces the replica of {owner_key} "
                      f"({why}) once it is deleted", heir.key, due_in)
        after = tuple(Conflict(namespace, name, c.key, heir.key,
                               f"{namespace}/{name} goes to {heir.key}, the older source of "
                               f"that name, once the replica of {owner_key} is deleted; this "
                               f"one is left out") for c in others)
    return Decision(namespace, name, Action(
        "delete", namespace, name, current.resource_version, why, owner_key, due_in), source,
        after, then)


def _adoption(namespace: str, name: str, current: CachedObject, mirror: Mirror,
              candidates: list[CachedObject], scope: Scope) -> Decision | None:
    """Who takes over another tool's mirror, and how; None: no one (it is foreign).

    A mirror that names its source (kubernetes-reflector's `reflects`, kubernetes-replicator's
    `replicate-from`) goes to that source, when it adopts from that tool. A copy that names
    none (kubernetes-replicator's pushes) goes to the one source of its name that wants the
    place and adopts from that tool, and only when no other source of that name wants the
    place (either could have made it): otherwise none has it, and each is told why.
    """
    takers = [c for c in candidates if c.compiled is not None
              and scope.adopts(c.compiled.adopt) == mirror.tool]
    if mirror.names is not None:
        owner = next((c for c in takers if c.key == mirror.names), None)
    elif takers and len(candidates) > 1:
        could = ", ".join(c.key for c in candidates)
        return Decision(namespace, name, conflicts=tuple(
            Conflict(namespace, name, c.key, None,
                     f"{namespace}/{name} is a {mirror.tool} copy, which does not name its "
                     f"source, and {could} could each have made it: none adopts it, and it is "
                     f"left untouched (let one source alone target {namespace}, or delete "
                     f"it to let the replica be created)") for c in candidates))
    else:
        owner = takers[0] if takers else None
    if owner is None:
        return None
    assert owner.compiled is not None
    conflicts = tuple(Conflict(namespace, name, c.key, owner.key,
                               f"{namespace}/{name} is {mirror.tool}'s mirror of {owner.key}, "
                               f"which adopts it; this one is left out")
                      for c in candidates if c is not owner)
    payload = owner.compiled.payload
    if mirror.payload == payload_digest(payload) and (payload.get("immutable")
                                                       or not mirror.immutable):
        action = Action("adopt", namespace, name, current.resource_version,
                        f"{mirror.tool}'s mirror, with the source's content: one patch, its "
                        f"marks out, ours in", owner.key, adopts=mirror.tool)
    else:
        # A mirror someone made immutable cannot change: it is recreated, as is one whose
        # fixed field (a Secret's type, a RoleBinding's roleRef) is not the source's; any other
        # is updated (turning `immutable` on, when the source is, is allowed).
        change: ActionKind = ("recreate" if mirror.immutable
                              or current.type != owner.compiled.fixed else "update")
        action = Action(change, namespace, name, current.resource_version,
                        f"adopts {mirror.tool}'s mirror, whose content differs from the "
                        f"source", owner.key, adopts=mirror.tool)
    return Decision(namespace, name, action, owner, conflicts)


def _adoptable(current: CachedObject, source: CachedObject) -> str:
    """A hint, on a conflict with another tool's mirror that `source` could adopt."""
    mirror = current.mirror
    if mirror is None or mirror.names not in (None, source.key):
        return ""
    return f"; it is {mirror.tool}'s mirror: configmirror.io/adopt: {mirror.tool} takes it over"


def _released(current: CachedObject, source: CachedObject | None, why: str) -> bool:
    """Whether a replica that must go is released instead: its source went away (deleted, or
    no longer a source) and said `on-delete: retain` on the last version seen of it (the
    source itself, or once it is deleted, the mark its replica carries)."""
    if why == "source deleted":
        return current.retain
    return why == "source no longer replicates" and source is not None and source.retain


def _change(current: CachedObject, owner: CachedObject) -> ActionKind:
    assert owner.compiled is not None
    compiled = owner.compiled
    # Kubernetes refuses any change to an immutable object (and immutable only turns on),
    # and any change of the field a kind fixes (a Secret's type, a RoleBinding's roleRef).
    if current.immutable or compiled.payload.get("immutable") or current.type != compiled.fixed:
        return "recreate"
    return "update"


def _orphaned_because(source: CachedObject | None, home: Namespace | None,
                      scope: Scope) -> str:
    if source is None:
        return "source deleted"
    if source.compiled is None:
        return "source no longer replicates"
    if home is not None and not scope.honours(home):
        return "source namespace may not hold sources"
    if source.compiled.spec is not None and not scope.reaches(source.compiled.spec):
        return f"cluster {scope.cluster} no longer selected"
    return "namespace no longer targeted"


# -- one source: the decisions it touches ------------------------------------------------------


def plan_source(key: str, caches: Caches, current: Callable[[str], CachedObject | None],
                scope: Scope, grace: Grace) -> ReplicationPlan:
    """What source `key` ("ns/name") wants, compared with what is there: `decide` for every
    namespace it targets and every replica it has, keeping what concerns this source (its
    writes, its conflicts). `current(ns/name)` is the object there now."""
    kind = caches.kind.name
    source = caches.source(key)
    compiled = source.compiled if source is not None else None
    home = caches.source_namespace(source.namespace) if source is not None else None
    refused = None
    if source is not None and compiled is not None:
        if home is None:
            return ReplicationPlan(kind, key)  # its namespace is not cached yet: wait
        if not scope.honours(home):
            refused = scope.refusal(home)
        elif compiled.invalid is not None:
            return ReplicationPlan(kind, key, invalid=compiled.invalid)  # a typo: no change
    name = key.partition("/")[2]
    honoured_source = source if honoured(source, home, scope) else None
    namespaces = caches.all_namespaces()
    targets = sorted(ns.name for ns in namespaces
                     if honoured_source is not None and wants(honoured_source, ns, scope))
    pullers = tuple(sorted(ns.name for ns in namespaces if ns.pulls.entries
                           and (caches.kind.pull_name, key) in ns.pulls.entries))
    wanted = set(targets)
    touched = wanted | {r.namespace for r in caches.replicas_of(key)}
    contenders = _contenders(caches.sources_named(name), caches, scope)
    actions: list[Action] = []
    conflicts: list[Conflict] = []
    for namespace in sorted(touched):
        ns = caches.namespace(namespace)
        # The same candidates `decide` finds; whether this source wants the place is known.
        candidates = [] if ns is None else [
            s for s in contenders
            if (namespace in wanted if s is honoured_source else wants(s, ns, scope))]
        decision = _decide(namespace, name, current(f"{namespace}/{name}"), ns, candidates,
                           caches, scope, grace)
        actions.extend(a for a in (decision.action, decision.then)
                       if a is not None and a.source == key)
        conflicts.extend(c for c in decision.conflicts if c.source == key)
    return ReplicationPlan(kind, key, tuple(actions), tuple(conflicts), not_allowed=refused,
                           targets=tuple(targets), pullers=pullers,
                           content=compiled.summary() if honoured_source is not None
                           and compiled is not None else None)
