"""Builders of the objects and caches the unit tests plan over: sources, replicas, plain
ConfigMaps and namespaces as the operator's caches hold them, the caches themselves (real
stores, as an informer fills them) and plan_source over them.

    src = source({REPLICATE_TO: "a,b"})
    p = plan(src, [ns("a"), ns("b")], others=[replica_of(src, "a")])
"""

from __future__ import annotations

import copy
from typing import Any, TypeAlias

from configmirror.client.store import Store
from configmirror.replication.model import (
    CachedObject,
    Caches,
    Namespace,
    namespace_from_json,
    object_indexers,
)
from configmirror.replication.plan import (
    Grace,
    ReplicationPlan,
    desired_body,
    plan_source,
)
from configmirror.replication.spec import DEFAULT_EXCLUDED, PULL, REPLICATE_TO, Scope
from configmirror.vocabulary import CONFIGMAP, Kind
from configmirror_testing import objects, othertools

KEY = "src/cfg"
AT_ONCE = Grace.from_now(0.0)  # --delete-grace 0s: removals are due at once
SCOPE = Scope.from_flags("*", DEFAULT_EXCLUDED)
ConfigMap: TypeAlias = CachedObject  # what most builders make


def cached(raw: dict[str, Any], kind: Kind = CONFIGMAP) -> CachedObject:
    return objects.cached(raw, kind)


def source(annotations: dict[str, str] | None = None, data: dict[str, str] | None = None,
           labels: dict[str, str] | None = None, immutable: bool = False,
           namespace: str = "src", name: str = "cfg", rv: str = "10",
           created: str = "2026-01-01T00:00:00Z") -> ConfigMap:
    raw: dict[str, Any] = {
        "metadata": {"namespace": namespace, "name": name, "uid": f"u-{namespace}",
                     "resourceVersion": rv, "creationTimestamp": created,
                     "labels": labels or {},
                     "annotations": {REPLICATE_TO: "*"} if annotations is None else annotations},
        "data": {"k": "v"} if data is None else data}
    if immutable:
        raw["immutable"] = True
    return cached(raw)


def replica_body(src: ConfigMap, namespace: str, rv: str = "20", **edits: Any
                 ) -> dict[str, Any]:
    """A replica as the API server holds it after the operator wrote it (optionally
    hand-edited): what FakeKube stores and replica_of caches."""
    body = copy.deepcopy(desired_body(src, namespace))
    body["metadata"].update(uid=f"r-{namespace}", resourceVersion=rv)
    body.update(edits)
    return body


def replica_of(src: ConfigMap, namespace: str, rv: str = "20", **edits: Any) -> ConfigMap:
    """A cached replica as the operator would have written it (optionally hand-edited)."""
    return cached(replica_body(src, namespace, rv, **edits))


def mirror(tool: str, src: ConfigMap, namespace: str, data: dict[str, str] | None = None,
           rv: str = "30", **fields: Any) -> ConfigMap:
    """Another tool's mirror of `src` in `namespace` ("reflector" or "kubernetes-replicator"),
    as that tool writes it (othertools), with the source's data unless `data` says other;
    `fields` override the body's top-level fields."""
    assert src.compiled is not None
    body = {"kind": "ConfigMap", "metadata": {
        "namespace": src.namespace, "name": src.name, "resourceVersion": src.resource_version},
        "data": dict(src.compiled.payload["data"] if data is None else data)}
    made = (othertools.reflector_mirror(body, namespace) if tool == "reflector"
            else othertools.replicator_copy(body, namespace))
    made["metadata"].update(uid=f"m-{namespace}", resourceVersion=rv)
    made.update(fields)
    return cached(made)


def plain(namespace: str, name: str = "cfg", annotations: dict[str, str] | None = None
          ) -> ConfigMap:
    return cached({"metadata": {"namespace": namespace, "name": name, "uid": "p",
                                "resourceVersion": "5", "annotations": annotations or {}},
                   "data": {"mine": "x"}})


def ns(name: str, labels: dict[str, str] | None = None, terminating: bool = False) -> Namespace:
    raw: dict[str, Any] = {"metadata": {"name": name, "labels": labels or {},
                                        "resourceVersion": "1"}}
    if terminating:
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        raw["status"] = {"phase": "Terminating"}
    return namespace_from_json(raw)


def world(objects: list[CachedObject], namespaces: list[Namespace],
          kind: Kind = CONFIGMAP) -> Caches:
    """The caches holding exactly these objects and namespaces (real stores, as an
    informer fills them)."""
    store: Store[CachedObject] = Store(object_indexers())
    for obj in objects:
        store.upsert(obj.key, obj)
    spaces: Store[Namespace] = Store()
    for namespace in namespaces:
        spaces.upsert(namespace.name, namespace)
    return Caches(store, spaces, kind)


def plan(src: ConfigMap | None, namespaces: list[Namespace],
         others: list[ConfigMap] = (), scope: Scope | None = None,  # type: ignore[assignment]
         key: str = KEY, home: bool = True, grace: Grace | None = None) -> ReplicationPlan:
    """plan_source over these caches; the source's own namespace is cached unless `home`
    is False (unlabelled: add it to `namespaces` to give it labels)."""
    if src is not None and home and all(n.name != src.namespace for n in namespaces):
        namespaces = [*namespaces, ns(src.namespace)]
    w = world([*([src] if src else []), *others], namespaces)
    return plan_source(key, w, w.get, scope or SCOPE, grace or AT_ONCE)


def kinds(p: ReplicationPlan) -> list[tuple[str, str]]:
    return [(a.kind, a.namespace) for a in p.actions]


def puller(name: str, pull: str, labels: dict[str, str] | None = None) -> Namespace:
    return namespace_from_json({"metadata": {"name": name, "labels": labels or {},
                                             "resourceVersion": "1", "uid": f"n-{name}",
                                             "annotations": {PULL: pull}}})
