"""What the caches hold, made from API JSON once per object version, and the work-queue keys.

ConfigMaps are replicated, and what an admin turns on: Secrets by name, other kinds with
--kinds; `Kind` says what differs (the fields a replica copies, the one it cannot change in
place). The informer's transform keeps only what reconcile needs: for
every object its identity and a digest of its content; for a source also its compiled form
(its spec parsed and its replicas' exact content worked out once per resourceVersion, under
the operator's drop rules, so planning and writing share one immutable value and never
re-parse). A Secret's values are held only for sources, and never leave the process except
in the replicas written.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import orjson

from configmirror.replication.admission import (
    ADMITTED,
    NONE,
    changed,
    field_entries,
    held,
    holds,
    parse_admitted,
)
from configmirror.replication.adoption import Mirror, marked, mirror_of
from configmirror.replication.spec import (
    ADOPT,
    COPY_ANNOTATIONS,
    COPY_KEYS,
    COPY_LABELS,
    DEFAULT_DROP,
    NO_PULLS,
    ON_DELETE,
    PREFIX,
    PULL,
    PULL_ALLOWED,
    PULL_ALLOWED_MATCHING,
    REPLICA_TYPE,
    REPLICATE_TO,
    REPLICATE_TO_CLUSTERS,
    REPLICATE_TO_CLUSTERS_MATCHING,
    REPLICATE_TO_MATCHING,
    SERVICE_ACCOUNT_TOKEN,
    SOURCE_ANNOTATIONS,
    SOURCE_CLUSTER,
    SYNC,
    InvalidSpec,
    Lifecycle,
    Patterns,
    Pulls,
    ReplicaRules,
    Spec,
    parse_adopt,
    parse_copied,
    parse_lifecycle,
    parse_pulls,
    parse_spec,
    replica_secret_type,
)
from configmirror.vocabulary import CONFIGMAP, ROLEBINDING, SECRET, Kind

REPLICA_OF = PREFIX + "replica-of"
CONTENT_HASH = PREFIX + "content-hash"
REPLICA_LABEL = PREFIX + "replica"
RELEASED_FROM = PREFIX + "released-from"
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
PULL_ROLE = "pull"  # a namespace's pulls of one kind: reported when they get nothing


class Key(NamedTuple):
    """A unit of work: a source to plan, or one target object (a replica, or where one goes).

    A target key names the object, not the source, so two sources of one name aiming at one
    namespace can never write that object from two workers at once.
    """

    role: str       # SOURCE or TARGET
    kind: Kind      # a ConfigMap and a Secret of one name are apart
    namespace: str
    name: str

    @property
    def object_key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.role} {self.kind.plural} {self.namespace}/{self.name}"


def source_key(kind: Kind, namespace: str, name: str) -> Key:
    return Key(SOURCE, kind, namespace, name)


def target_key(kind: Kind, namespace: str, name: str) -> Key:
    return Key(TARGET, kind, namespace, name)


def pull_key(kind: Kind, namespace: str) -> Key:
    return Key(PULL_ROLE, kind, namespace, "")


@dataclass(frozen=True, slots=True)
class Source:
    """A source compiled once per version: where it wants replicas and exactly what they are."""

    kind: str                     # "ConfigMap", "Secret", "NetworkPolicy", ...
    spec: Spec | None             # None when the annotations do not parse
    invalid: str | None           # the fault, naming the annotation
    lifecycle: Lifecycle          # on-delete and sync
    labels: Mapping[str, str]     # a replica's labels, ours included
    annotations: Mapping[str, str]  # a replica's annotations, replica-of and hash included
    payload: Mapping[str, Any]    # the top-level fields copied as they are (data, ...)
    content_hash: str             # digest of everything a replica must equal
    # The same, field by field (admission.field_entries): what `replica_holds` reads.
    fields: Mapping[str, str]
    adopt: str = ""               # configmirror.io/adopt: whose mirrors it takes over
    api_version: str = "v1"       # of the kind: a replica's apiVersion
    fixed: str = ""               # the payload field that cannot change in place, as text
    # The payload as a replica is written: the fields the server would store as absent left
    # out (an empty binaryData, immutable false), every one a kind requires kept.
    written: Mapping[str, Any] | None = None
    # How a configmirror.io/pull entry names its kind (vocabulary.Kind.pull_name); "": as
    # `kind` says it.
    pull_name: str = ""

    def __repr__(self) -> str:
        """Never the payload: a Secret's values must not reach a log line or a traceback."""
        return (f"Source(kind={self.kind}, invalid={self.invalid!r}, "
                f"keys={sorted(self.payload.get('data') or {})}, hash={self.content_hash})")

    def summary(self) -> dict[str, Any]:
        """What `plan` may show of the content: key names, sizes and the hash, no values."""
        if "data" not in self.payload:  # a kind of no data keys (a NetworkPolicy): its fields
            return {"fields": sorted(self.payload), "hash": self.content_hash}
        data = self.payload.get("data") or {}
        binary = self.payload.get("binaryData") or {}
        return {"keys": {k: len(v) for k, v in sorted({**data, **binary}.items())},
                "hash": self.content_hash}


@dataclass(frozen=True, slots=True)
class CachedObject:
    """A cached object. Replicas and other objects keep a digest, not their content."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    replica_of: str | None  # set only when it carries our label AND annotation
    immutable: bool
    content_hash: str       # of what it holds (replicas only, else "")
    compiled: Source | None  # set only for sources: what the object asks of its replicas
    # The field it cannot change in place, as text (model.fixed_of): a Secret's type, a
    # RoleBinding's roleRef; "" for a kind with none.
    type: str = ""
    created: str = ""       # a source's creationTimestamp (the older of two sources wins)
    # on-delete: retain on this version: a source's (or a former source's) own setting; on
    # a replica, our mark that its source had it when the replica was written.
    retain: bool = False
    # A replica that is not as we wrote it (admission, or a hand edit, changed it): what it
    # holds, field by field (admission.held), and the fields its mark gives admission
    # (admission.ADMITTED). None for the common replica, held exactly as written.
    entries: frozenset[str] | None = None
    admitted: frozenset[str] = frozenset()
    # Another tool's mirror (adoption.py), not ours: what plan.decide may adopt.
    mirror: Mirror | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str]
    terminating: bool
    resource_version: str
    uid: str = ""
    pulls: Pulls = NO_PULLS  # what it asks for with configmirror.io/pull


# -- content --------------------------------------------------------------------------------


def content_hash(payload: Mapping[str, Any], labels: Mapping[str, str],
                 annotations: Mapping[str, str]) -> str:
    """A digest of everything a replica must equal (its own hash annotation excluded).

    The digest is of the standard library's serialisation (json.dumps, sorted keys, no
    blanks, ASCII with \\u escapes), the one every earlier version wrote into replicas, so an
    upgrade rewrites none. orjson makes the same bytes four times faster whenever its output
    is ASCII without DEL (it writes other characters as UTF-8, where json.dumps escapes
    them); anything else is serialised by json.dumps.
    """
    doc = [*payload.values(), labels,
           {k: v for k, v in annotations.items() if k != CONTENT_HASH}]
    try:
        blob = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a value orjson does not take (not one a replica holds)
        blob = b"\x80"
    if not blob.isascii() or b"\x7f" in blob:
        blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def _payload(raw: Mapping[str, Any], kind: Kind) -> dict[str, Any]:
    """The fields a replica copies, normalised (absent and empty are the same), in order."""
    if kind is SECRET:
        return {"data": raw.get("data") or {}, "type": raw.get("type") or "Opaque",
                "immutable": bool(raw.get("immutable"))}
    if kind is CONFIGMAP:
        return {"data": raw.get("data") or {}, "binaryData": raw.get("binaryData") or {},
                "immutable": bool(raw.get("immutable"))}
    # Any other kind: its fields as the server holds them, an absent or empty one left out
    # (the server stores an empty list or map as absent), a false one kept (a
    # ServiceAccount's automountServiceAccountToken: false is not its default).
    return {field: raw[field] for field in kind.payload
            if raw.get(field) is not None and raw[field] != {} and raw[field] != []}


def _written(payload: Mapping[str, Any], kind: Kind) -> dict[str, Any]:
    """The payload as a replica is written: a ConfigMap's or Secret's data always, its
    binaryData only when there is some, immutable only when true; any other kind's fields as
    they are (`_payload` left out the empty ones)."""
    if kind is CONFIGMAP or kind is SECRET:
        return {field: value for field, value in payload.items() if value or field == "data"}
    return dict(payload)


def _fixed(payload: Mapping[str, Any], kind: Kind) -> str:
    """The value of the field `kind` cannot change in place, as text ("" when it has none)."""
    if kind.fixed is None:
        return ""
    value = payload.get(kind.fixed)
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def fixed_of(raw: Mapping[str, Any], kind: Kind) -> str:
    """What an object (API JSON) holds in the field `kind` cannot change in place, as text:
    compared with its source's `Source.fixed`, a difference recreates the replica."""
    if kind.fixed is None:
        return ""
    return _fixed(_payload(raw, kind), kind)


def _kept(items: Mapping[str, str], copy: Patterns, drop: Patterns) -> dict[str, str]:
    return {k: v for k, v in items.items() if copy.matches(k) and not drop.matches(k)}


def _copied_payload(payload: dict[str, Any], keys: Patterns | None, replica_type: str | None,
                    kind: Kind, bindable: frozenset[str] = frozenset()) -> dict[str, Any]:
    """What a replica copies of a source's payload: the data keys `copy-keys` selects (all
    when absent), and for a Secret its type, or its `replica-type`, checked against those
    keys. Raises InvalidSpec."""
    if kind is ROLEBINDING:
        role = payload.get("roleRef") or {}
        if role.get("name") not in bindable:
            listed = ", ".join(sorted(bindable)) or "none"
            raise InvalidSpec(f"roleRef: {role.get('kind', 'the role')} {role.get('name')!r} "
                              f"is not one the operator may bind (--bindable-roles: {listed})")
    if keys is not None and "data" not in payload:
        raise InvalidSpec(f"{COPY_KEYS}: only a ConfigMap or a Secret has data keys (this is "
                          f"a {kind.name}, whose replicas copy {', '.join(kind.payload)})")
    if keys is not None:
        payload = {field: ({k: v for k, v in value.items() if keys.matches(k)}
                           if field in ("data", "binaryData") else value)
                   for field, value in payload.items()}
    if kind is SECRET:
        if payload["type"] == SERVICE_ACCOUNT_TOKEN:
            raise InvalidSpec(f"a Secret of type {SERVICE_ACCOUNT_TOKEN} belongs to its "
                              f"namespace's ServiceAccount and is never replicated")
        payload = {**payload, "type": replica_secret_type(payload["type"], replica_type,
                                                          payload["data"])}
    elif replica_type is not None:
        raise InvalidSpec(f"{REPLICA_TYPE}: only a Secret has a type (this is a "
                          f"{kind.name})")
    return payload


def compile_source(key: str, labels: Mapping[str, str], annotations: Mapping[str, str],
                   raw: Mapping[str, Any], rules: ReplicaRules, kind: Kind) -> Source:
    """Parse a source's spec and work out its replicas' content, once per version.

    A replica carries the source's labels and annotations that its copy patterns select,
    minus the operator's drop list, plus our own marks.
    """
    spec, invalid, adopt = None, None, ""
    payload = _payload(raw, kind)
    try:
        spec = parse_spec(annotations.get(REPLICATE_TO), annotations.get(REPLICATE_TO_MATCHING),
                          annotations.get(PULL_ALLOWED), annotations.get(PULL_ALLOWED_MATCHING),
                          annotations.get(REPLICATE_TO_CLUSTERS),
                          annotations.get(REPLICATE_TO_CLUSTERS_MATCHING))
        copied = parse_copied(annotations.get(COPY_LABELS), annotations.get(COPY_ANNOTATIONS),
                              annotations.get(COPY_KEYS))
        lifecycle = parse_lifecycle(annotations.get(ON_DELETE), annotations.get(SYNC))
        payload = _copied_payload(payload, copied.keys, annotations.get(REPLICA_TYPE), kind,
                                  rules.bindable_roles)
        adopt = parse_adopt(annotations.get(ADOPT))
    except InvalidSpec as err:
        spec, invalid = None, str(err)
        copied = parse_copied(None, None)  # what the replicas would be does not matter
        lifecycle = Lifecycle(retain=False, once=False)
    wanted_labels = {**_kept(labels, copied.labels, rules.drop_labels), REPLICA_LABEL: "true",
                     MANAGED_BY: "configmirror"}
    wanted_annotations = {**_kept(annotations, copied.annotations, rules.drop_annotations),
                          REPLICA_OF: key}
    if lifecycle.retain:  # the replica remembers it, so a restart still releases it
        wanted_annotations[ON_DELETE] = "retain"
    digest = content_hash(payload, wanted_labels, wanted_annotations)
    annotations = {**wanted_annotations, CONTENT_HASH: digest}
    return Source(kind.name, spec, invalid, lifecycle, wanted_labels, annotations, payload,
                  digest, field_entries(payload, wanted_labels, annotations), adopt,
                  kind.resource.api_version, _fixed(payload, kind), _written(payload, kind),
                  kind.pull_name)


# -- transforms (the informers') ------------------------------------------------------------


def object_transform(kind: Kind, rules: ReplicaRules, source_cluster: str = "",
                     sources: bool = True) -> Callable[[dict[str, Any]], CachedObject]:
    """An informer's transform for `kind` under the operator's drop rules (`object_from_json`:
    in a member cluster, `source_cluster` is the home cluster's name and `sources` False)."""
    return lambda raw: object_from_json(raw, rules, kind, source_cluster, sources)


def object_from_json(raw: dict[str, Any], rules: ReplicaRules, kind: Kind,
                     source_cluster: str = "", sources: bool = True) -> CachedObject:
    """Keep a source's compiled content, and only a digest of anything else.

    Ours is a replica whose SOURCE_CLUSTER mark is `source_cluster`: none in the home cluster,
    the home cluster's name in a member (where an object of another home's is foreign). In a
    member (`sources` False) nothing is a source: they are the home cluster's."""
    meta = raw.get("metadata") or {}
    labels: dict[str, str] = meta.get("labels") or {}
    annotations: dict[str, str] = meta.get("annotations") or {}
    namespace = sys.intern(str(meta.get("namespace", "")))
    name = sys.intern(str(meta.get("name", "")))
    # Ours only with our label and a replica-of that names a source of the same name: we
    # write nothing else, so anything else is someone's own object.
    is_replica = labels.get(REPLICA_LABEL) == "true" and \
        annotations.get(REPLICA_OF, "").partition("/")[2] == name != "" and \
        annotations.get(SOURCE_CLUSTER, "") == source_cluster
    compiled = None
    if sources and not annotations.keys().isdisjoint(SOURCE_ANNOTATIONS):  # one C call
        compiled = compile_source(f"{namespace}/{name}", labels, annotations, raw, rules, kind)
    digest, entries, admitted = replica_form(raw, kind) if is_replica else ("", None, NONE)
    return CachedObject(
        namespace=namespace, name=name,
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        replica_of=sys.intern(annotations[REPLICA_OF]) if is_replica else None,
        immutable=bool(raw.get("immutable")),
        content_hash=digest,
        compiled=compiled,
        type=fixed_of(raw, kind),
        created=str(meta.get("creationTimestamp") or "") if compiled is not None else "",
        retain=annotations.get(ON_DELETE, "").strip() == "retain",
        entries=entries, admitted=admitted,
        mirror=None if is_replica or not marked(annotations) else
        foreign_mirror(raw, kind, labels, annotations),
    )


def payload_digest(payload: Mapping[str, Any]) -> str:
    """A digest of a payload's content (no labels, no annotations, not `immutable`, which
    only turns on): whether another tool's mirror holds its source's content."""
    return content_hash({k: v for k, v in payload.items() if k != "immutable"}, {}, {})


def foreign_mirror(raw: Mapping[str, Any], kind: Kind, labels: Mapping[str, str],
                   annotations: Mapping[str, str]) -> Mirror | None:
    """Another tool's mirror, by its marks (adoption.mirror_of), with its payload's digest."""
    payload = _payload(raw, kind)
    found = mirror_of(annotations, [*(payload.get("data") or {}),
                                    *(payload.get("binaryData") or {})])
    if found is None:
        return None
    # Only a ConfigMap's or Secret's payload has `immutable`; a mirror of another kind is not.
    return Mirror(found[0], found[1], payload_digest(payload), bool(payload.get("immutable")),
                  dict(labels), dict(annotations))


def replica_object(raw: Mapping[str, Any], kind: Kind, replica_of: str) -> CachedObject:
    """What the informer makes of a replica of `replica_of` the server returned (a write's
    answer): the same as `object_from_json`, without a source's compiling."""
    meta = raw.get("metadata") or {}
    digest, entries, admitted = replica_form(raw, kind)
    return CachedObject(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")), resource_version=str(meta.get("resourceVersion", "")),
        replica_of=replica_of, immutable=bool(raw.get("immutable")), content_hash=digest,
        compiled=None, type=fixed_of(raw, kind),
        retain=(meta.get("annotations") or {}).get(ON_DELETE, "").strip() == "retain",
        entries=entries, admitted=admitted)


def replica_hash(raw: Mapping[str, Any], kind: Kind) -> str:
    """The digest of a replica as the server holds it (a watched object, or a write's answer),
    to compare with its source's `content_hash`.

    Our content-hash mark is left out of the digest (it is the digest), so it is checked
    here: a replica whose mark is missing or wrong (a hand edit) gets a digest no source has,
    and is repaired like any other edit.
    """
    meta = raw.get("metadata") or {}
    payload = _payload(raw, kind)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    digest = content_hash(payload, labels, annotations)
    mark = annotations.get(CONTENT_HASH)
    if mark == digest:
        return digest
    return content_hash(payload, labels, {**annotations, _WRONG_MARK: str(mark)})


_WRONG_MARK = CONTENT_HASH + "#wrong"  # no annotation key can contain "#": never a real one


def replica_form(raw: Mapping[str, Any], kind: Kind) -> tuple[str, frozenset[str] | None,
                                                             frozenset[str]]:
    """A replica's digest (`replica_hash`), and when that is not its own hash mark (it is not
    as we wrote it: admission or a hand edit changed it), its field entries and the fields
    its admitted mark gives admission (admission.py)."""
    digest = replica_hash(raw, kind)
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if annotations.get(CONTENT_HASH) == digest:
        return digest, None, NONE  # exactly as written: the common case, nothing more
    admitted = parse_admitted(annotations.get(ADMITTED))
    fields = field_entries(_payload(raw, kind), meta.get("labels") or {}, annotations)
    return digest, held(fields, admitted), admitted


def replica_holds(source: Source, replica: CachedObject) -> bool:
    """Whether `replica`, not as we wrote it, still holds every field `source` writes but
    those its admitted mark gives admission: then it is in sync (admission.holds)."""
    return replica.entries is not None and holds(source.fields, replica.entries,
                                                 replica.admitted)


def admitted_fields(source: Source, raw: Mapping[str, Any], kind: Kind) -> frozenset[str]:
    """The fields configmirror wrote from `source` that the server stored (`raw`) otherwise
    (admission.changed)."""
    meta = raw.get("metadata") or {}
    return changed(source.fields, field_entries(_payload(raw, kind), meta.get("labels") or {},
                                                meta.get("annotations") or {}))


def kept_as_written(source: Source, raw: Mapping[str, Any], kind: Kind) -> bool:
    """Whether the server stored a replica written from `source` as it was written: a few
    comparisons, no hashing (the common case)."""
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if ADMITTED in annotations:  # our own mark, which a write may carry
        annotations = {k: v for k, v in annotations.items() if k != ADMITTED}
    return ((meta.get("labels") or {}) == source.labels
            and annotations == source.annotations
            and _payload(raw, kind) == source.payload)


def admission_changes(source: Source, raw: Mapping[str, Any], kind: Kind) -> str:
    """What differs between a replica as written from `source` and as the server stored it
    (`raw`): label and annotation keys, and payload fields and keys. Never a value."""
    meta = raw.get("metadata") or {}
    stored = _payload(raw, kind)
    parts = [_changed("label", source.labels, meta.get("labels") or {}),
             _changed("annotation",
                      {k: v for k, v in source.annotations.items() if k != CONTENT_HASH},
                      {k: v for k, v in (meta.get("annotations") or {}).items()
                       if k != CONTENT_HASH})]
    for field, value in source.payload.items():
        if isinstance(value, Mapping) and isinstance(stored.get(field), Mapping):
            parts.append(_changed(f"{field} key", value, stored[field]))
        elif stored.get(field) != value:
            parts.append([f"{field} changed"])
    return ", ".join(p for part in parts for p in part) or "nothing that is compared"


def _changed(what: str, wanted: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    return ([f"{what} {k} added" for k in sorted(stored.keys() - wanted.keys())]
            + [f"{what} {k} removed" for k in sorted(wanted.keys() - stored.keys())]
            + [f"{what} {k} changed" for k in sorted(wanted.keys() & stored.keys())
               if wanted[k] != stored[k]])


def namespace_from_json(raw: dict[str, Any]) -> Namespace:
    meta = raw.get("metadata") or {}
    return Namespace(
        name=sys.intern(str(meta.get("name", ""))),
        labels=meta.get("labels") or {},
        terminating=bool(meta.get("deletionTimestamp"))
        or (raw.get("status") or {}).get("phase") == "Terminating",
        resource_version=str(meta.get("resourceVersion", "")),
        uid=str(meta.get("uid", "")),
        pulls=parse_pulls((meta.get("annotations") or {}).get(PULL)),
    )


def object_indexers() -> dict[str, Callable[[CachedObject], Iterable[str]]]:
    return {
        BY_REPLICA_OF: lambda o: (o.replica_of,) if o.replica_of else (),
        SOURCES_BY_NAME: lambda o: (o.name,) if o.compiled is not None else (),
        ALL_SOURCES: lambda o: (_ALL,) if o.compiled is not None else (),
    }


class ObjectCache(Protocol):
    """What the domain reads of an object cache (a Store, or StoresByName)."""

    def get(self, key: str) -> CachedObject | None: ...
    def by_index(self, index: str, value: str) -> list[CachedObject]: ...
    def index_values(self, index: str) -> list[str]: ...
    def __len__(self) -> int: ...


class NamespaceCache(Protocol):
    """What the domain reads of the namespaces' cache (a Store)."""

    def get(self, key: str) -> Namespace | None: ...
    def values(self) -> list[Namespace]: ...


class Caches:
    """The informers' caches of one kind, and of namespaces, as the domain reads them (it
    never writes them)."""

    def __init__(self, objects: ObjectCache, namespaces: NamespaceCache, kind: Kind) -> None:
        self.objects = objects
        self.namespaces = namespaces
        self.kind = kind

    def get(self, key: str) -> CachedObject | None:
        """The object `key` ("ns/name") in this cluster: a replica, or what is in its place."""
        return self.objects.get(key)

    def source(self, key: str) -> CachedObject | None:
        """Source `key` (or the object there now: a source may stop being one). Here, in the
        home cluster, an object of this cluster (a member's view: clusters.MemberCaches)."""
        return self.objects.get(key)

    def namespace(self, name: str) -> Namespace | None:
        """A namespace of this cluster: where replicas go."""
        return self.namespaces.get(name)

    def source_namespace(self, name: str) -> Namespace | None:
        """A namespace of the home cluster, where sources live (here the same)."""
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
