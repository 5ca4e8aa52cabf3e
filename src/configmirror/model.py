"""What the caches hold, made from API JSON once per object version, and the work-queue keys.

The informer's transform keeps only what reconcile needs: for every ConfigMap its identity and
a digest of its content; for a source also its compiled form (its spec parsed and its
replicas' exact content worked out once per resourceVersion, under the operator's drop rules,
so planning and writing share one immutable value and never re-parse).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from configmirror.settings import DEFAULT_DROP
from configmirror.spec import (
    COPY_ANNOTATIONS,
    COPY_LABELS,
    PREFIX,
    REPLICATE_TO,
    REPLICATE_TO_MATCHING,
    InvalidSpec,
    Patterns,
    ReplicaRules,
    Spec,
    parse_copied,
    parse_spec,
)
from configmirror.store import Store

REPLICA_OF = PREFIX + "replica-of"
CONTENT_HASH = PREFIX + "content-hash"
REPLICA_LABEL = PREFIX + "replica"
MANAGED_BY = "app.kubernetes.io/managed-by"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
DEFAULT_RULES = ReplicaRules.from_flags(DEFAULT_DROP, DEFAULT_DROP)

# Store index names.
BY_REPLICA_OF = "replica-of"     # replicas by the key ("ns/name") of the source they copy
SOURCES_BY_NAME = "source-name"  # sources by their name
ALL_SOURCES = "sources"          # every source, under one value
_ALL = "all"

SOURCE = "source"
TARGET = "target"


class Key(NamedTuple):
    """A unit of work: a source to plan, or one target object (a replica, or where one goes).

    A target key names the object, not the source, so two sources of one name aiming at one
    namespace can never write that object from two workers at once.
    """

    role: str       # SOURCE or TARGET
    resource: str   # "configmaps"
    namespace: str
    name: str

    @property
    def object_key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.role} {self.namespace}/{self.name}"


def source_key(namespace: str, name: str, resource: str = "configmaps") -> Key:
    return Key(SOURCE, resource, namespace, name)


def target_key(namespace: str, name: str, resource: str = "configmaps") -> Key:
    return Key(TARGET, resource, namespace, name)


@dataclass(frozen=True, slots=True)
class Source:
    """A source compiled once per version: where it wants replicas and exactly what they are."""

    spec: Spec | None             # None when the annotations do not parse
    invalid: str | None           # the fault, naming the annotation
    labels: Mapping[str, str]     # a replica's labels, ours included
    annotations: Mapping[str, str]  # a replica's annotations, replica-of and hash included
    payload: Mapping[str, Any]    # the top-level fields copied as they are (data, ...)
    content_hash: str             # digest of everything a replica must equal


@dataclass(frozen=True, slots=True)
class CachedObject:
    """A cached ConfigMap. Replicas and plain ConfigMaps keep a digest, not their content."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    replica_of: str | None  # set only when it carries our label AND annotation
    immutable: bool
    content_hash: str       # of what it holds (replicas only, else "")
    source: Source | None   # set only for sources

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str]
    terminating: bool
    resource_version: str


# -- content --------------------------------------------------------------------------------


def content_hash(payload: Mapping[str, Any], labels: Mapping[str, str],
                 annotations: Mapping[str, str]) -> str:
    """A digest of everything a replica must equal (its own hash annotation excluded)."""
    doc = [payload["data"], payload["binaryData"], payload["immutable"], labels,
           {k: v for k, v in annotations.items() if k != CONTENT_HASH}]
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def _payload(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {"data": raw.get("data") or {}, "binaryData": raw.get("binaryData") or {},
            "immutable": bool(raw.get("immutable"))}


def _kept(items: Mapping[str, str], copy: Patterns, drop: Patterns) -> dict[str, str]:
    return {k: v for k, v in items.items() if copy.matches(k) and not drop.matches(k)}


def compile_source(key: str, labels: Mapping[str, str], annotations: Mapping[str, str],
                   raw: Mapping[str, Any], rules: ReplicaRules = DEFAULT_RULES) -> Source:
    """Parse a source's spec and work out its replicas' content, once per version.

    A replica carries the source's labels and annotations that its copy patterns select,
    minus the operator's drop list, plus our own marks.
    """
    spec, invalid = None, None
    try:
        spec = parse_spec(annotations.get(REPLICATE_TO), annotations.get(REPLICATE_TO_MATCHING))
        copied = parse_copied(annotations.get(COPY_LABELS), annotations.get(COPY_ANNOTATIONS))
    except InvalidSpec as err:
        spec, invalid = None, str(err)
        copied = parse_copied(None, None)  # what the replicas would be does not matter
    payload = _payload(raw)
    wanted_labels = {**_kept(labels, copied.labels, rules.drop_labels), REPLICA_LABEL: "true",
                     MANAGED_BY: "configmirror"}
    wanted_annotations = {**_kept(annotations, copied.annotations, rules.drop_annotations),
                          REPLICA_OF: key}
    digest = content_hash(payload, wanted_labels, wanted_annotations)
    return Source(spec, invalid, wanted_labels, {**wanted_annotations, CONTENT_HASH: digest},
                  payload, digest)


# -- transforms (the informers') ------------------------------------------------------------


def configmap_transform(rules: ReplicaRules) -> Callable[[dict[str, Any]], CachedObject]:
    """The ConfigMap informer's transform under the operator's drop rules."""
    return lambda raw: configmap_from_json(raw, rules)


def configmap_from_json(raw: dict[str, Any], rules: ReplicaRules = DEFAULT_RULES
                        ) -> CachedObject:
    """Keep a source's compiled content, and only a digest of anything else."""
    meta = raw.get("metadata") or {}
    labels: dict[str, str] = meta.get("labels") or {}
    annotations: dict[str, str] = meta.get("annotations") or {}
    namespace = sys.intern(str(meta.get("namespace", "")))
    name = sys.intern(str(meta.get("name", "")))
    is_replica = labels.get(REPLICA_LABEL) == "true" and REPLICA_OF in annotations
    source = None
    if REPLICATE_TO in annotations or REPLICATE_TO_MATCHING in annotations:
        source = compile_source(f"{namespace}/{name}", labels, annotations, raw, rules)
    return CachedObject(
        namespace=namespace, name=name,
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        replica_of=sys.intern(annotations[REPLICA_OF]) if is_replica else None,
        immutable=bool(raw.get("immutable")),
        content_hash=content_hash(_payload(raw), labels, annotations) if is_replica else "",
        source=source,
    )


def namespace_from_json(raw: dict[str, Any]) -> Namespace:
    meta = raw.get("metadata") or {}
    return Namespace(
        name=sys.intern(str(meta.get("name", ""))),
        labels=meta.get("labels") or {},
        terminating=bool(meta.get("deletionTimestamp"))
        or (raw.get("status") or {}).get("phase") == "Terminating",
        resource_version=str(meta.get("resourceVersion", "")),
    )


def object_indexers() -> dict[str, Callable[[CachedObject], Iterable[str]]]:
    return {
        BY_REPLICA_OF: lambda o: (o.replica_of,) if o.replica_of else (),
        SOURCES_BY_NAME: lambda o: (o.name,) if o.source is not None else (),
        ALL_SOURCES: lambda o: (_ALL,) if o.source is not None else (),
    }


class Caches:
    """The informers' caches as the domain reads them (it never writes them)."""

    def __init__(self, objects: Store[CachedObject], namespaces: Store[Namespace]) -> None:
        self.objects = objects
        self.namespaces = namespaces

    def get(self, key: str) -> CachedObject | None:
        return self.objects.get(key)

    def namespace(self, name: str) -> Namespace | None:
        return self.namespaces.get(name)

    def all_namespaces(self) -> list[Namespace]:
        return self.namespaces.values()

    def sources(self) -> list[CachedObject]:
        return self.objects.by_index(ALL_SOURCES, _ALL)

    def sources_named(self, name: str) -> list[CachedObject]:
        return self.objects.by_index(SOURCES_BY_NAME, name)

    def replicas_of(self, source: str) -> list[CachedObject]:
        return self.objects.by_index(BY_REPLICA_OF, source)

    def replicated_sources(self) -> list[str]:
        """Every source key some cached replica names (its source may be gone)."""
        return self.objects.index_values(BY_REPLICA_OF)
