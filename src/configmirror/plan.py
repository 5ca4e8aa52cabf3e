"""Desired state and the actions that reach it: pure functions of a source and the caches.

`plan_source` says what reconciling one source would change; the `plan` command prints it,
and the source reconcile turns its actions into target keys. `plan_target` says the same for
one target object, including which source owns it; a target reconcile applies it. Both decide
where replicas belong with one predicate, `wants`, and whether a replica holds what its source
asks with another, `in_sync`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from configmirror.model import CachedObject, Namespace
from configmirror.spec import Scope

ActionKind = Literal["create", "update", "recreate", "delete"]

Admitted = Callable[[str], tuple[str, str] | None]
"""What the API server kept of our last write to an object key, when its admission (a
mutating webhook, a policy engine) changed it: (the source digest we wrote, the digest of
what the server stored). None when the server kept what we wrote, or we do not know."""


def nothing_admitted(key: str) -> tuple[str, str] | None:
    return None


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    namespace: str
    name: str
    resource_version: str  # of the replica now ("" for create): a precondition for the write
    why: str
    source: str            # the key ("ns/name") of the source it is done for


@dataclass(frozen=True)
class Conflict:
    """A source wants a target it cannot have: a foreign object, or another source's replica."""

    namespace: str
    name: str
    source: str
    owner: str | None  # the source whose replica is (or is being put) there; None: foreign

    @property
    def message(self) -> str:
        if self.owner:
            return (f"{self.namespace}/{self.name} is already a replica of {self.owner}; "
                    f"it is left as it is")
        return (f"{self.namespace}/{self.name} exists and is not a replica; it is left "
                f"untouched (delete it to let the replica be created)")


@dataclass(frozen=True)
class ReplicationPlan:
    """What reconciling one source would change."""

    source: str
    actions: tuple[Action, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    invalid: str | None = None
    not_allowed: str | None = None  # why its namespace may not hold sources
    targets: tuple[str, ...] = ()
    content: dict[str, Any] | None = None  # key names, sizes and hash: never values
    kind: str = "ConfigMap"

    @property
    def in_sync(self) -> bool:
        return (not self.actions and not self.conflicts and self.invalid is None
                and self.not_allowed is None)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "source": self.source, "targets": list(self.targets),
            "invalid": self.invalid,
            "not_allowed": self.not_allowed, "content": self.content,
            "actions": [{"action": a.kind, "namespace": a.namespace, "name": a.name,
                         "why": a.why} for a in self.actions],
            "conflicts": [{"namespace": c.namespace, "name": c.name, "owner": c.owner,
                           "message": c.message} for c in self.conflicts],
        }


@dataclass(frozen=True)
class TargetPlan:
    """What reconciling one target object would change, and for which source."""

    namespace: str
    name: str
    action: Action | None = None
    owner: CachedObject | None = None  # the source the replica is (to be) a copy of
    conflicts: tuple[Conflict, ...] = ()


# -- where replicas belong ------------------------------------------------------------------


def honoured(source: CachedObject | None, home: Namespace | None, scope: Scope) -> bool:
    """A source the operator acts on: annotated, and its namespace (`home`) may hold sources."""
    return (source is not None and source.source is not None and home is not None
            and scope.honours(home))


def wants(source: CachedObject, namespace: Namespace, scope: Scope) -> bool:
    """Whether an honoured `source` must have a replica in `namespace`: the targeting rule."""
    compiled = source.source
    return (compiled is not None and compiled.spec is not None
            and scope.may_target(source.namespace, namespace)
            and compiled.spec.wants(namespace))


def in_sync(current: CachedObject, want: str, admitted: Admitted = nothing_admitted) -> bool:
    """Whether replica `current` holds what a source of digest `want` asks: the same digest,
    or exactly what the server stored when we last wrote that digest there (admission
    changed it then; writing it again would be changed again, forever). Anything else,
    such as an edit by hand, is drift."""
    return current.content_hash == want or admitted(current.key) == (want, current.content_hash)


def desired_body(source: CachedObject, namespace: str) -> dict[str, Any]:
    """The replica of `source` in `namespace` as it is written (without resourceVersion)."""
    compiled = source.source
    if compiled is None:
        raise ValueError(f"{source.key} is not a source")
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": compiled.kind,
        "metadata": {"name": source.name, "namespace": namespace, "labels": compiled.labels,
                     "annotations": compiled.annotations},
    }
    # data always; binaryData (ConfigMap) only when there is some; type (Secret); immutable
    # only when true.
    body.update((field, value) for field, value in compiled.payload.items()
                if value or field == "data")
    return body


def _change(current: CachedObject, owner: CachedObject) -> ActionKind:
    assert owner.source is not None
    payload = owner.source.payload
    # Kubernetes refuses any change to an immutable object (and immutable only turns on),
    # and any change of a Secret's type.
    if current.immutable or payload["immutable"] or current.type != payload.get("type", ""):
        return "recreate"
    return "update"


def _orphaned_because(source: CachedObject | None, home: Namespace | None,
                      scope: Scope) -> str:
    if source is None:
        return "source deleted"
    if source.source is None:
        return "source no longer replicates"
    if home is not None and not scope.honours(home):
        return "source namespace may not hold sources"
    return "namespace no longer targeted"


# -- one source ---------------------------------------------------------------------------------


def plan_source(key: str, source: CachedObject | None, namespaces: Iterable[Namespace],
                lookup: Callable[[str], CachedObject | None],
                replicas: Iterable[CachedObject], scope: Scope,
                kind: str = "ConfigMap", admitted: Admitted = nothing_admitted
                ) -> ReplicationPlan:
    """Compare what source `key` wants with what the caches hold.

    `lookup(ns/name)` finds any cached object; `replicas` are the cached replicas of `key`;
    `admitted` is what the server made of our writes (`in_sync`).
    """
    existing = sorted((r for r in replicas if r.replica_of == key), key=lambda r: r.namespace)
    namespace_list = list(namespaces)
    terminating = {ns.name for ns in namespace_list if ns.terminating}
    home = next((ns for ns in namespace_list if source is not None
                 and ns.name == source.namespace), None)
    if source is not None and source.source is not None and home is None:
        return ReplicationPlan(key, kind=kind)  # its namespace is not cached yet: wait
    if source is None or not honoured(source, home, scope):
        why = _orphaned_because(source, home, scope)
        refused = (scope.refusal(home) if source is not None and source.source is not None
                   and home is not None else None)
        return ReplicationPlan(key, actions=tuple(
            Action("delete", r.namespace, r.name, r.resource_version, why, key)
            for r in existing if r.namespace not in terminating), not_allowed=refused,
            kind=kind)
    assert source.source is not None
    if source.source.invalid is not None:
        return ReplicationPlan(key, invalid=source.source.invalid, kind=kind)

    want = source.source.content_hash
    targets = sorted(ns.name for ns in namespace_list if wants(source, ns, scope))
    actions: list[Action] = []
    conflicts: list[Conflict] = []
    for ns in targets:
        current = lookup(f"{ns}/{source.name}")
        if current is None:
            actions.append(Action("create", ns, source.name, "", "missing", key))
        elif current.replica_of != key:
            conflicts.append(Conflict(ns, source.name, key, current.replica_of))
        elif not in_sync(current, want, admitted):
            actions.append(Action(_change(current, source), ns, source.name,
                                  current.resource_version, "differs from the source", key))
    wanted = set(targets)
    for replica in existing:
        if replica.namespace not in wanted and replica.namespace not in terminating:
            actions.append(Action("delete", replica.namespace, replica.name,
                                  replica.resource_version, "namespace no longer targeted", key))
    return ReplicationPlan(key, tuple(actions), tuple(conflicts), targets=tuple(targets),
                           content=source.source.summary(), kind=kind)


# -- one target ---------------------------------------------------------------------------------


def plan_target(namespace: str, name: str, current: CachedObject | None,
                ns: Namespace | None, sources_named: Iterable[CachedObject],
                lookup_source: Callable[[str], CachedObject | None],
                home_of: Callable[[str], Namespace | None], scope: Scope,
                admitted: Admitted = nothing_admitted) -> TargetPlan:
    """Decide what object `namespace/name` must be, given every source called `name`.

    The replica already there keeps its source (its replica-of wins); with none there, the
    source with the lowest key gets it; every other source that wants it is in conflict.
    Nothing is ever written over a foreign object, or into a namespace that is gone or going.
    """
    if ns is None or ns.terminating:
        return TargetPlan(namespace, name)
    candidates = sorted((s for s in sources_named if honoured(s, home_of(s.namespace), scope)
                         and wants(s, ns, scope)), key=lambda s: s.key)
    if current is None:
        if not candidates:
            return TargetPlan(namespace, name)
        winner = candidates[0]
        return TargetPlan(namespace, name, Action("create", namespace, name, "", "missing",
                                                  winner.key), winner, tuple(
            Conflict(namespace, name, c.key, winner.key) for c in candidates[1:]))
    if current.replica_of is None:
        return TargetPlan(namespace, name, conflicts=tuple(
            Conflict(namespace, name, c.key, None) for c in candidates))

    owner_key = current.replica_of
    conflicts = tuple(Conflict(namespace, name, c.key, owner_key)
                      for c in candidates if c.key != owner_key)
    owner = next((c for c in candidates if c.key == owner_key), None)
    if owner is not None:
        assert owner.source is not None
        if in_sync(current, owner.source.content_hash, admitted):
            return TargetPlan(namespace, name, owner=owner, conflicts=conflicts)
        return TargetPlan(namespace, name, Action(
            _change(current, owner), namespace, name, current.resource_version,
            "differs from the source", owner_key), owner, conflicts)
    source = lookup_source(owner_key)
    home = home_of(source.namespace) if source is not None else None
    if source is not None and source.source is not None and (
            home is None  # its namespace is not cached yet: decide nothing
            or (scope.honours(home) and source.source.invalid is not None)):  # a typo
        return TargetPlan(namespace, name, conflicts=conflicts)  # never deletes data
    return TargetPlan(namespace, name, Action(
        "delete", namespace, name, current.resource_version,
        _orphaned_because(source, home, scope), owner_key), source)
