"""What `configmirror status` and `configmirror wait` report, from the same plans as `run`.

Per source: its kind, how many target namespaces it has and how many of them hold its
replica as it must be, what is pending (creates, updates, removals with the grace left), and
what is wrong (conflicts naming the object, its namespace not allowed to push, its spec not
parsing, pulls refused, writes the operator reported as failed). Per namespace: what it
holds, where each came from, and what it pulls. Pure: built from plans and caches (and the
operator's ReplicationFailed Events, which only it can know of), never a Secret value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from configmirror.replication.model import Caches, Namespace
from configmirror.replication.plan import (
    ReplicationPlan,
    pull_entry,
    pull_refusals,
    pulls_of,
    unserved_pulls,
)
from configmirror.replication.spec import Scope


@dataclass(frozen=True)
class Problem:
    type: str      # conflict, invalid, not_allowed, pull_refused, failed
    message: str
    object: str = ""  # the object or namespace it is about ("ns/name"), when there is one

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, "object": self.object, "message": self.message}


@dataclass(frozen=True)
class SourceStatus:
    kind: str
    source: str
    exists: bool
    targets: int
    in_sync: int
    pending: tuple[dict[str, Any], ...]
    problems: tuple[Problem, ...]
    adopting: int = 0  # of the pending writes, those that take over another tool's mirror

    @property
    def done(self) -> bool:
        """Every target holds its replica as it must be (no write pending there, no conflict
        keeping it out), and the source is valid and allowed: what `wait` waits for.
        Removals elsewhere, and refused pulls, are not its targets."""
        return (self.exists and self.in_sync == self.targets
                and not any(p.type in ("invalid", "not_allowed") for p in self.problems))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "exists": self.exists,
                "targets": self.targets, "in_sync": self.in_sync, "pending": list(self.pending),
                "adopting": self.adopting, "problems": [p.to_json() for p in self.problems]}


@dataclass(frozen=True)
class Failure:
    """A ReplicationFailed Event the operator recorded on a source version."""

    uid: str
    resource_version: str
    message: str


@dataclass
class KindView:
    """One kind's caches, scope and watched names, as status reads them."""

    caches: Caches
    scope: Scope
    names: tuple[str, ...]
    plans: list[ReplicationPlan] = field(default_factory=list)


def source_status(plan: ReplicationPlan, view: KindView,
                  failures: Iterable[Failure]) -> SourceStatus:
    """The status of one planned source."""
    source = view.caches.source(plan.source)
    problems = [Problem("conflict", c.message, f"{c.namespace}/{c.name}")
                for c in plan.conflicts]
    if plan.invalid is not None:
        problems.append(Problem("invalid", plan.invalid))
    if plan.not_allowed is not None:
        problems.append(Problem("not_allowed", plan.not_allowed))
    for name in plan.pullers:
        namespace = view.caches.namespace(name)
        if namespace is None:
            continue
        entry = pull_entry(view.caches.kind.name, plan.source)
        problems += [Problem("pull_refused", r.message, name)
                     for r in pull_refusals(namespace, view.caches, view.scope, view.names)
                     if r.entry == entry]
    if source is not None:
        problems += [Problem("failed", f.message) for f in failures
                     if f.uid == source.uid and f.resource_version == source.resource_version]
    pending = tuple({"action": a.kind, "namespace": a.namespace, "name": a.name,
                     "why": a.why, "due_in": round(a.due_in, 1),
                     **({"adopts": a.adopts} if a.adopts else {})} for a in plan.actions)
    return SourceStatus(plan.kind, plan.source, source is not None and source.compiled
                        is not None, len(plan.targets), plan.targets_in_sync, pending,
                        tuple(problems), sum(1 for a in plan.actions if a.adopts))


def namespace_status(name: str, views: Mapping[str, KindView],
                     served: frozenset[str]) -> dict[str, Any]:
    """What namespace `name` holds (replicas: where each came from, its state) and pulls
    (each entry: allowed, or refused and why)."""
    holds: list[dict[str, Any]] = []
    pulls: list[dict[str, Any]] = []
    namespace: Namespace | None = None
    for kind, view in views.items():
        namespace = namespace or view.caches.namespace(name)
        for plan in view.plans:
            here = [a for a in plan.actions if a.namespace == name]
            for replica in view.caches.replicas_of(plan.source):
                if replica.namespace == name:
                    action = next((a for a in here if a.name == replica.name), None)
                    holds.append({"kind": kind, "name": replica.name, "replica_of": plan.source,
                                  "state": "in sync" if action is None
                                  else f"pending {action.kind} ({action.why})"})
            holds += [{"kind": kind, "name": a.name, "replica_of": plan.source,
                       "state": f"pending create ({a.why})"} for a in here if a.kind == "create"]
    if namespace is None:
        return {"name": name, "exists": False, "holds": [], "pulls": []}
    for view in views.values():
        refused = {r.entry: r.reason for r in pull_refusals(namespace, view.caches, view.scope,
                                                            view.names)}
        for key in pulls_of(view.caches.kind, namespace):
            entry = pull_entry(view.caches.kind.pull_name, key)
            pulls.append({"entry": entry, "state": "refused" if entry in refused else "allowed",
                          "reason": refused.get(entry, "")})
    pulls += [{"entry": r.entry, "state": "refused", "reason": r.reason}
              for r in unserved_pulls(namespace, served)]
    return {"name": name, "exists": True,
            "holds": sorted(holds, key=lambda h: (h["kind"], h["name"])), "pulls": pulls}

