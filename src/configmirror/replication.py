"""The domain: which namespaces a source targets, what its replicas must be, and the plan of
creates, updates, recreates and deletes that gets there.

`plan_source` is pure: (source, cached namespaces, cached ConfigMaps) -> ReplicationPlan.
`Replicator` reads the caches, plans, applies the difference with the fewest API calls, and
records Events; it knows nothing of threads or queues.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from configmirror.events import EventRecorder, ObjectRef
from configmirror.kube import ApiError, Kube
from configmirror.metrics import Metrics
from configmirror.selector import Selector, SelectorError, parse_selector
from configmirror.store import Store

log = logging.getLogger(__name__)

PREFIX = "configmirror.io/"
REPLICATE_TO = PREFIX + "replicate-to"
REPLICATE_TO_MATCHING = PREFIX + "replicate-to-matching"
REPLICA_OF = PREFIX + "replica-of"
CONTENT_HASH = PREFIX + "content-hash"
REPLICA_LABEL = PREFIX + "replica"
IGNORE_LABEL = PREFIX + "ignore"
MANAGED_BY = "app.kubernetes.io/managed-by"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
DEFAULT_EXCLUDED = "kube-system,kube-public,kube-node-lease"

CONFIGMAPS = "/api/v1/configmaps"
NAMESPACES = "/api/v1/namespaces"

# Store index names.
BY_REPLICA_OF = "replica-of"   # replicas by the source key they copy
SOURCES_BY_NAME = "source-name"  # sources by their name
ALL_SOURCES = "sources"        # every source, under one value
_ALL = "all"


# -- what the caches hold (only what reconcile needs) -------------------------------------


@dataclass(frozen=True, slots=True)
class SourceContent:
    """Everything a replica is made from; kept only for ConfigMaps that are sources."""

    replicate_to: str | None
    replicate_to_matching: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    data: Mapping[str, str]
    binary_data: Mapping[str, str]
    immutable: bool


@dataclass(frozen=True, slots=True)
class ConfigMap:
    """A cached ConfigMap. Replicas and plain ConfigMaps keep a hash, not their content."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    replica_of: str | None  # set only when it carries our label AND annotation
    immutable: bool
    content_hash: str       # of what a replica must equal (replicas only, else "")
    source: SourceContent | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str]
    terminating: bool
    resource_version: str


def configmap_from_json(raw: dict[str, Any]) -> ConfigMap:
    """The informer's transform: keep a source's content, and only a hash of anything else."""
    meta = raw.get("metadata") or {}
    labels: dict[str, str] = meta.get("labels") or {}
    annotations: dict[str, str] = meta.get("annotations") or {}
    immutable = bool(raw.get("immutable"))
    is_replica = labels.get(REPLICA_LABEL) == "true" and REPLICA_OF in annotations
    source = None
    if REPLICATE_TO in annotations or REPLICATE_TO_MATCHING in annotations:
        source = SourceContent(
            replicate_to=annotations.get(REPLICATE_TO),
            replicate_to_matching=annotations.get(REPLICATE_TO_MATCHING),
            labels=labels, annotations=annotations, data=raw.get("data") or {},
            binary_data=raw.get("binaryData") or {}, immutable=immutable)
    return ConfigMap(
        namespace=sys.intern(str(meta.get("namespace", ""))),
        name=sys.intern(str(meta.get("name", ""))),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        replica_of=sys.intern(annotations[REPLICA_OF]) if is_replica else None,
        immutable=immutable,
        content_hash=content_hash(raw.get("data") or {}, raw.get("binaryData") or {}, immutable,
                                  labels, annotations) if is_replica else "",
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


def configmap_indexers() -> dict[str, Callable[[ConfigMap], Iterable[str]]]:
    return {
        BY_REPLICA_OF: lambda cm: (cm.replica_of,) if cm.replica_of else (),
        SOURCES_BY_NAME: lambda cm: (cm.name,) if cm.source is not None else (),
        ALL_SOURCES: lambda cm: (_ALL,) if cm.source is not None else (),
    }


def all_sources(store: Store[ConfigMap]) -> list[ConfigMap]:
    return store.by_index(ALL_SOURCES, _ALL)


# -- the spec on a source -----------------------------------------------------------------


class InvalidSpec(ValueError):
    """A source's annotations do not parse; the message names the annotation and the fault."""


@dataclass(frozen=True)
class NamePatterns:
    """Comma-separated globs matched against whole names; `!` entries exclude."""

    includes: tuple[re.Pattern[str], ...]
    excludes: tuple[re.Pattern[str], ...]

    def matches(self, name: str) -> bool:
        return (any(p.fullmatch(name) for p in self.includes)
                and not any(p.fullmatch(name) for p in self.excludes))


_GLOB = re.compile(r"(?:[a-z0-9*?-]|\[!?\]?(?:[a-z0-9-]|[a-z0-9]-[a-z0-9])*\])+")


def parse_patterns(text: str, what: str = REPLICATE_TO) -> NamePatterns:
    """Parse `ns-a, team-*, !team-legacy`; raises InvalidSpec naming the bad entry."""
    includes: list[re.Pattern[str]] = []
    excludes: list[re.Pattern[str]] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        exclude = entry.startswith("!")
        glob = entry[1:].strip() if exclude else entry
        if not glob or not _GLOB.fullmatch(glob) or not _brackets_valid(glob):
            raise InvalidSpec(f"{what}: invalid namespace pattern {entry!r} (use names, "
                              f"*, ?, [a-z] and a leading ! to exclude)")
        compiled = re.compile(fnmatch.translate(glob))
        (excludes if exclude else includes).append(compiled)
    if not includes and not excludes:
        raise InvalidSpec(f"{what}: no namespace patterns in {text!r}")
    return NamePatterns(tuple(includes), tuple(excludes))


def _brackets_valid(glob: str) -> bool:
    for body in re.findall(r"\[!?([^\]]*)\]", glob):
        if not body:
            return False
        for lo, hi in re.findall(r"(.)-(.)", body):
            if lo > hi:
                return False
    return True


@dataclass(frozen=True)
class Spec:
    """Where a source wants replicas: names/globs, a namespace selector, or both (union)."""

    patterns: NamePatterns | None
    selector: Selector | None

    def wants(self, namespace: Namespace) -> bool:
        return bool((self.patterns is not None and self.patterns.matches(namespace.name))
                    or (self.selector is not None and self.selector.matches(namespace.labels)))


def parse_spec(source: SourceContent) -> Spec:
    patterns = selector = None
    if source.replicate_to is not None:
        patterns = parse_patterns(source.replicate_to)
    if source.replicate_to_matching is not None:
        try:
            selector = parse_selector(source.replicate_to_matching)
        except SelectorError as err:
            raise InvalidSpec(f"{REPLICATE_TO_MATCHING}: {err}") from None
    return Spec(patterns, selector)


@dataclass(frozen=True)
class Scope:
    """The operator's own limits: which namespaces may hold sources and which never get copies."""

    source_namespaces: NamePatterns = field(
        default_factory=lambda: parse_patterns("*", "--source-namespaces"))
    excluded_namespaces: NamePatterns = field(
        default_factory=lambda: parse_patterns(DEFAULT_EXCLUDED, "--exclude-namespaces"))

    @classmethod
    def from_flags(cls, source_namespaces: str, exclude_namespaces: str) -> Scope:
        return cls(parse_patterns(source_namespaces, "--source-namespaces"),
                   parse_patterns(exclude_namespaces, "--exclude-namespaces")
                   if exclude_namespaces.strip() else NamePatterns((), ()))

    def honours(self, cm: ConfigMap) -> bool:
        return cm.source is not None and self.source_namespaces.matches(cm.namespace)

    def may_target(self, source_namespace: str, namespace: Namespace) -> bool:
        return (namespace.name != source_namespace
                and namespace.labels.get(IGNORE_LABEL) != "true"
                and not self.excluded_namespaces.matches(namespace.name)
                and not namespace.terminating)


# -- the desired replica --------------------------------------------------------------------


def replica_labels(source: SourceContent) -> dict[str, str]:
    return {**source.labels, REPLICA_LABEL: "true", MANAGED_BY: "configmirror"}


def replica_annotations(source: SourceContent, source_key: str) -> dict[str, str]:
    kept = {k: v for k, v in source.annotations.items()
            if not k.startswith(PREFIX) and k != LAST_APPLIED}
    return {**kept, REPLICA_OF: source_key}


def content_hash(data: Mapping[str, str], binary_data: Mapping[str, str], immutable: bool,
                 labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """A digest of everything a replica must equal (its own hash annotation excluded)."""
    doc = [data, binary_data, immutable, labels,
           {k: v for k, v in annotations.items() if k != CONTENT_HASH}]
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def desired_replica(source: SourceContent, source_key: str, namespace: str, name: str,
                    digest: str | None = None) -> dict[str, Any]:
    """The replica as it must be written (without resourceVersion). `digest`, when given, is
    desired_hash(source, source_key), which is the same for every target namespace."""
    labels = replica_labels(source)
    annotations = replica_annotations(source, source_key)
    if digest is None:
        digest = content_hash(source.data, source.binary_data, source.immutable, labels,
                              annotations)
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     "annotations": {**annotations, CONTENT_HASH: digest}},
        "data": dict(source.data),
    }
    if source.binary_data:
        body["binaryData"] = dict(source.binary_data)
    if source.immutable:
        body["immutable"] = True
    return body


def desired_hash(source: SourceContent, source_key: str) -> str:
    return content_hash(source.data, source.binary_data, source.immutable,
                        replica_labels(source), replica_annotations(source, source_key))


# -- the plan -------------------------------------------------------------------------------

ActionKind = Literal["create", "update", "recreate", "delete"]


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    namespace: str
    name: str
    resource_version: str  # of the replica now ("" for create): a precondition for the write
    why: str


@dataclass(frozen=True)
class Conflict:
    namespace: str
    name: str
    owner: str | None  # the other source whose replica is there, or None for a foreign object

    @property
    def message(self) -> str:
        if self.owner:
            return (f"{self.namespace}/{self.name} is already a replica of {self.owner}; "
                    f"it is left as it is")
        return (f"{self.namespace}/{self.name} exists and is not a replica; it is left "
                f"untouched (delete it to let the replica be created)")


@dataclass(frozen=True)
class ReplicationPlan:
    """What reconciling one source key would change."""

    source: str
    actions: tuple[Action, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    invalid: str | None = None
    targets: tuple[str, ...] = ()

    @property
    def in_sync(self) -> bool:
        return not self.actions and not self.conflicts and self.invalid is None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "targets": list(self.targets), "invalid": self.invalid,
            "actions": [{"action": a.kind, "namespace": a.namespace, "name": a.name,
                         "why": a.why} for a in self.actions],
            "conflicts": [{"namespace": c.namespace, "name": c.name, "owner": c.owner,
                           "message": c.message} for c in self.conflicts],
        }


def compile_source(source: ConfigMap) -> tuple[Spec, str]:
    """A source's parsed spec and the hash its replicas must have; raises InvalidSpec."""
    if source.source is None:
        raise ValueError(f"{source.key} is not a source")
    return parse_spec(source.source), desired_hash(source.source, source.key)


def plan_source(key: str, source: ConfigMap | None, namespaces: Iterable[Namespace],
                lookup: Callable[[str], ConfigMap | None], replicas: Iterable[ConfigMap],
                scope: Scope,
                compile: Callable[[ConfigMap], tuple[Spec, str]] = compile_source,
                ) -> ReplicationPlan:
    """Compare what `key` wants with what the caches hold. Pure.

    `lookup(ns/name)` finds any cached ConfigMap; `replicas` are the cached replicas of `key`;
    `compile` is compile_source or a memo of it.
    """
    existing = {r.namespace: r for r in replicas if r.replica_of == key}
    namespace_list = list(namespaces)
    terminating = {ns.name for ns in namespace_list if ns.terminating}
    if source is None or source.source is None or not scope.honours(source):
        why = ("source deleted" if source is None else "source no longer replicates"
               if source.source is None else "source namespace not in --source-namespaces")
        return ReplicationPlan(key, actions=tuple(
            Action("delete", r.namespace, r.name, r.resource_version, why)
            for r in _sorted(existing.values()) if r.namespace not in terminating))
    try:
        spec, want = compile(source)
    except InvalidSpec as err:
        return ReplicationPlan(key, invalid=str(err))

    targets = sorted(ns.name for ns in namespace_list
                     if scope.may_target(source.namespace, ns) and spec.wants(ns))
    actions: list[Action] = []
    conflicts: list[Conflict] = []
    for ns in targets:
        current = lookup(f"{ns}/{source.name}")
        if current is None:
            actions.append(Action("create", ns, source.name, "", "missing"))
        elif current.replica_of != key:
            conflicts.append(Conflict(ns, source.name, current.replica_of))
        elif current.content_hash != want:
            kind: ActionKind = ("recreate" if current.immutable or source.source.immutable
                                else "update")
            actions.append(Action(kind, ns, source.name, current.resource_version,
                                  "differs from the source"))
    wanted = set(targets)
    for replica in _sorted(existing.values()):
        if replica.namespace not in wanted and replica.namespace not in terminating:
            actions.append(Action("delete", replica.namespace, replica.name,
                                  replica.resource_version, "namespace no longer targeted"))
    return ReplicationPlan(key, tuple(actions), tuple(conflicts), targets=tuple(targets))


def _sorted(cms: Iterable[ConfigMap]) -> list[ConfigMap]:
    return sorted(cms, key=lambda cm: cm.namespace)


# -- applying a plan ------------------------------------------------------------------------


@dataclass
class Outcome:
    """What applying a plan did."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    forbidden: list[str] = field(default_factory=list)  # messages of writes refused (403)
    retry: ApiError | None = None                         # the first error worth retrying

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


class Replicator:
    """Reconciles one source key: plan from the caches, write the difference, record Events."""

    def __init__(self, kube: Kube, configmaps: Store[ConfigMap], namespaces: Store[Namespace],
                 scope: Scope, recorder: EventRecorder, metrics: Metrics | None = None,
                 dry_run: bool = False) -> None:
        self._kube = kube
        self._configmaps = configmaps
        self._namespaces = namespaces
        self._scope = scope
        self._recorder = recorder
        self._metrics = metrics
        self.dry_run = dry_run
        self._invalid_logged: dict[str, str] = {}  # key -> message logged, to log it once
        # key -> (resourceVersion, (spec, desired hash) or the InvalidSpec it raised); an
        # entry goes when its source does.
        self._memo: dict[str, tuple[str, tuple[Spec, str] | InvalidSpec]] = {}

    def replica_needs_reconcile(self, replica: ConfigMap, deleted: bool) -> bool:
        """Whether an event for one of our replicas asks anything of its source.

        Our own writes come back as watch events, sometimes before the writer has cached
        them; a replica that is exactly what its source wants needs no reconcile, whatever
        the order. Drift, orphans and hand deletions in targeted namespaces do.
        """
        assert replica.replica_of is not None
        source = self._configmaps.get(replica.replica_of)
        if source is None or source.source is None or not self._scope.honours(source):
            return not deleted  # an orphan to clean up (a deleted one needs nothing)
        try:
            spec, want = self._compiled(source)
        except InvalidSpec:
            return False  # nothing changes until the source is fixed
        namespace = self._namespaces.get(replica.namespace)
        targeted = (namespace is not None and self._scope.may_target(source.namespace, namespace)
                    and spec.wants(namespace))
        if deleted:
            return targeted
        return not targeted or replica.content_hash != want

    def _compiled(self, source: ConfigMap) -> tuple[Spec, str]:
        """compile_source, memoized per resourceVersion (the hash covers all the data)."""
        cached = self._memo.get(source.key)
        if cached is None or cached[0] != source.resource_version:
            try:
                result: tuple[Spec, str] | InvalidSpec = compile_source(source)
            except InvalidSpec as err:
                result = err
            cached = self._memo[source.key] = (source.resource_version, result)
        if isinstance(cached[1], InvalidSpec):
            raise cached[1]
        return cached[1]

    def plan(self, key: str) -> ReplicationPlan:
        """The plan for `key` from the caches (changes nothing)."""
        return plan_source(key, self._configmaps.get(key), self._namespaces.values(),
                           self._configmaps.get,
                           self._configmaps.by_index(BY_REPLICA_OF, key), self._scope,
                           self._compiled)

    def reconcile(self, key: str) -> Outcome:
        """Bring `key`'s replicas in line with its source. Raises ApiError when worth a retry."""
        plan = self.plan(key)
        source = self._configmaps.get(key)
        if source is None or source.source is None:
            self._memo.pop(key, None)
            self._invalid_logged.pop(key, None)
        ref = ObjectRef.of(source) if source is not None else None
        if plan.invalid is not None:
            if self._invalid_logged.get(key) != plan.invalid:
                log.warning("source %s: %s; nothing is changed", key, plan.invalid)
                self._invalid_logged[key] = plan.invalid
            if ref is not None and not self.dry_run:
                self._recorder.warning(ref, "InvalidSpec", plan.invalid)
            return Outcome()
        self._invalid_logged.pop(key, None)
        if ref is not None and not self.dry_run:
            for conflict in plan.conflicts:
                self._recorder.warning(ref, "TargetConflict", conflict.message)
        outcome = Outcome()
        for action in plan.actions:
            self._apply(key, source, action, outcome)
        if ref is not None and not self.dry_run:
            if outcome.changed:
                self._recorder.normal(ref, "Replicated",
                                      f"created {outcome.created}, updated {outcome.updated}, "
                                      f"deleted {outcome.deleted} replicas")
            for message in outcome.forbidden:
                self._recorder.warning(ref, "ReplicationFailed", message)
        if outcome.retry is not None:
            raise outcome.retry
        return outcome

    def report_give_up(self, key: str, error: BaseException) -> None:
        """After --max-retries failures: one Warning Event on the source."""
        source = self._configmaps.get(key)
        if source is not None and not self.dry_run:
            self._recorder.warning(ObjectRef.of(source), "ReplicationFailed",
                                   f"giving up until the next change or resync: {error}")

    # -- writes -------------------------------------------------------------------------------

    def _apply(self, key: str, source: ConfigMap | None, action: Action,
               outcome: Outcome) -> None:
        if self.dry_run:
            log.info("dry-run: would %s replica %s/%s of %s (%s)", action.kind,
                     action.namespace, action.name, key, action.why)
            return
        path = f"{NAMESPACES}/{action.namespace}/configmaps"
        try:
            if action.kind == "delete":
                self._delete(path, action)
                outcome.deleted += 1
                return
            if source is None or source.source is None:  # plan_source only deletes then
                raise RuntimeError(f"{action.kind} planned for {key} without a source")
            digest = self._compiled(source)[1]  # valid: plan_source compiled it
            body = desired_replica(source.source, key, action.namespace, action.name, digest)
            if action.kind == "recreate":
                self._delete(path, action)
                self._write("create", path, body, key, digest)
                outcome.updated += 1
            elif action.kind == "update":
                body["metadata"]["resourceVersion"] = action.resource_version
                self._write("update", f"{path}/{action.name}", body, key, digest)
                outcome.updated += 1
            else:
                self._write("create", path, body, key, digest)
                outcome.created += 1
        except ApiError as err:
            self._failed(key, action, err, outcome)

    def _write(self, verb: str, path: str, body: dict[str, Any], key: str, digest: str) -> None:
        written = self._kube.request(verb, path, body=body)
        if self._metrics is not None:
            self._metrics.replica_writes.labels(verb).inc()
        # What the informer's transform would make of it: the server keeps data, labels and
        # annotations as written, so their hash is the one we wrote (no need to recompute).
        meta = written.get("metadata") or {}
        self._remember(ConfigMap(
            namespace=sys.intern(str(meta.get("namespace", ""))),
            name=sys.intern(str(meta.get("name", ""))), uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")), replica_of=key,
            immutable=bool(written.get("immutable")), content_hash=digest, source=None))

    def _delete(self, path: str, action: Action) -> None:
        # Precondition on the version we planned from: a replica edited meanwhile gets a 409
        # and is re-read on the retry, never deleted blindly.
        options = {"kind": "DeleteOptions", "apiVersion": "v1",
                   "preconditions": {"resourceVersion": action.resource_version}}
        try:
            self._kube.request("delete", f"{path}/{action.name}", body=options)
        except ApiError as err:
            if err.status != 404:  # already gone is what we wanted
                raise
        if self._metrics is not None:
            self._metrics.replica_writes.labels("delete").inc()
        self._configmaps.delete(f"{action.namespace}/{action.name}")

    def _remember(self, written: ConfigMap) -> None:
        """Put what we just wrote in the cache, so a reconcile that runs before the watch
        delivers it does not write it again. Never replaces a newer version."""
        cached = self._configmaps.get(written.key)
        if cached is None or _older(cached.resource_version, written.resource_version):
            self._configmaps.upsert(written.key, written)

    def _failed(self, key: str, action: Action, err: ApiError, outcome: Outcome) -> None:
        where = f"{action.kind} {action.namespace}/{action.name}"
        if err.namespace_terminating:
            log.info("source %s: %s skipped: namespace is terminating", key, where)
        elif err.forbidden:
            outcome.forbidden.append(f"{where} forbidden: {err.message}")
        elif err.status == 422:
            outcome.forbidden.append(f"{where} rejected by the API server: {err.message}")
        elif outcome.retry is None:
            outcome.retry = err


def _older(a: str, b: str) -> bool:
    """True if resourceVersion `a` is older than `b` (etcd revisions are integers)."""
    try:
        return int(a) < int(b)
    except ValueError:
        return False

