"""The spec language: where a source wants replicas, what they carry, and the operator's limits.

A source names target namespaces with globs (`configmirror.io/replicate-to`) and/or a label
selector (`configmirror.io/replicate-to-matching`); the targets are the union, plus the
namespaces that pull it (`configmirror.io/pull` on the Namespace) and that it allows to
(`configmirror.io/pull-allowed`, `configmirror.io/pull-allowed-matching`). It may choose
which of its labels and annotations its replicas carry with key globs
(`configmirror.io/copy-labels`, `configmirror.io/copy-annotations`, default `*`). The
operator's flags bound all of it: `--source-namespaces` and `--exclude-namespaces` (Scope),
`--drop-labels` and `--drop-annotations` (ReplicaRules: keys never copied, so GitOps tools
never claim a replica). Everything here is pure and parses once: a value that does not parse
raises InvalidSpec naming the annotation (or flag) and the fault.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from configmirror.replication.selector import Selector, SelectorError, parse_selector
from configmirror.vocabulary import CONFIGMAP, OPTIONAL, SECRET

PREFIX = "configmirror.io/"
REPLICATE_TO = PREFIX + "replicate-to"
REPLICATE_TO_MATCHING = PREFIX + "replicate-to-matching"
PULL_ALLOWED = PREFIX + "pull-allowed"
PULL_ALLOWED_MATCHING = PREFIX + "pull-allowed-matching"
PULL = PREFIX + "pull"  # on a Namespace: the sources it asks for
# Member clusters (replication/clusters.py): which clusters a source reaches (neither
# annotation: the home cluster only), and on a replica in a member, the home it came from.
REPLICATE_TO_CLUSTERS = PREFIX + "replicate-to-clusters"
REPLICATE_TO_CLUSTERS_MATCHING = PREFIX + "replicate-to-clusters-matching"
SOURCE_CLUSTER = PREFIX + "source-cluster"
# Any of these makes an object a source (one with only pull-allowed pushes nowhere).
SOURCE_ANNOTATIONS = (REPLICATE_TO, REPLICATE_TO_MATCHING, PULL_ALLOWED, PULL_ALLOWED_MATCHING)
COPY_LABELS = PREFIX + "copy-labels"
COPY_ANNOTATIONS = PREFIX + "copy-annotations"
COPY_KEYS = PREFIX + "copy-keys"
REPLICA_TYPE = PREFIX + "replica-type"
ON_DELETE = PREFIX + "on-delete"
SYNC = PREFIX + "sync"
IGNORE_LABEL = PREFIX + "ignore"
# Take over another replicator's mirrors of a source in place (model.Mirror, plan.decide).
ADOPT = PREFIX + "adopt"
REFLECTOR = "reflector"
KUBERNETES_REPLICATOR = "kubernetes-replicator"
ADOPT_TOOLS = (REFLECTOR, KUBERNETES_REPLICATOR)

# The operator's limits by default (--exclude-namespaces, --drop-labels, --drop-annotations).
DEFAULT_EXCLUDED = "kube-system,kube-public,kube-node-lease"
# Keys never copied to a replica: ours, kubectl's, and those by which Argo CD, Flux and Helm
# claim objects (a copied one makes the tool treat replicas as its own and prune them).
DEFAULT_DROP = ",".join((
    "configmirror.io/*", "kubectl.kubernetes.io/*", "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by", "argocd.argoproj.io/*", "kustomize.toolkit.fluxcd.io/*",
    "helm.toolkit.fluxcd.io/*", "meta.helm.sh/*", "helm.sh/*",
    # cert-manager's marks on the Secrets it issues: copied, they make its controllers look
    # for a Certificate in every target namespace (cert-manager/cert-manager#4210).
    "cert-manager.io/*", "controller.cert-manager.io/*"))


@dataclass(frozen=True)
class Annotation:
    """One key of the annotation language, as the reference documentation lists it."""

    name: str
    on: str       # what carries it
    value: str    # what it takes
    meaning: str


# The user-facing keys, in the order the reference page lists them (hack/docs_reference.py).
ANNOTATIONS = (
    Annotation(REPLICATE_TO, "source", "comma-separated namespace names or globs (`*`, `?`, "
               "`[a-z]`); a leading `!` excludes", "push to the namespaces whose whole name "
               "matches; `*` is every namespace"),
    Annotation(REPLICATE_TO_MATCHING, "source", "a label selector (`env=prod`, `env!=dev`, "
               "`tier in (a,b)`, `tier notin (c)`, `team`, `!legacy`; a comma is AND)",
               "push to the namespaces whose labels match; the targets are the union with "
               "`replicate-to` and the pulls"),
    Annotation(REPLICATE_TO_CLUSTERS, "source", "comma-separated cluster names or globs; a "
               "leading `!` excludes", "the clusters it reaches (the home cluster by its "
               "`--cluster-name`, member clusters by their names); with neither this nor "
               "`replicate-to-clusters-matching`, the home cluster only. `replicate-to` and "
               "every exclusion apply in each to its own namespaces"),
    Annotation(REPLICATE_TO_CLUSTERS_MATCHING, "source", "a label selector over the clusters' "
               "labels (a member's are its Secret's labels)", "the clusters whose labels "
               "match; the clusters reached are the union with `replicate-to-clusters`"),
    Annotation(PULL_ALLOWED, "source", "namespace patterns, as `replicate-to`",
               "the namespaces that may pull this source; absent, nobody may"),
    Annotation(PULL_ALLOWED_MATCHING, "source", "a label selector",
               "the namespaces whose labels match may pull this source"),
    Annotation(COPY_LABELS, "source", "key globs, `!` excludes; default `*`",
               "which of the source's labels its replicas carry (the drop list applies on "
               "top)"),
    Annotation(COPY_ANNOTATIONS, "source", "key globs, `!` excludes; default `*`",
               "which of the source's annotations its replicas carry (the drop list applies "
               "on top)"),
    Annotation(COPY_KEYS, "source", "key globs, `!` excludes; default `*`",
               "which data keys (`data` and `binaryData`) its replicas carry"),
    Annotation(REPLICA_TYPE, "source (Secret)", "a Secret type, e.g. `Opaque`",
               "the replicas' type, needed when `copy-keys` leaves out a key the source's "
               "type requires"),
    Annotation(ON_DELETE, "source", "`delete` (default) or `retain`",
               "when the source is deleted or stops being one: its replicas are removed, or "
               "released to their namespaces"),
    Annotation(SYNC, "source", "`always` (default) or `once`",
               "`once`: a missing replica is created; an existing one is never updated or "
               "repaired"),
    Annotation(ADOPT, "source", "`reflector` or `kubernetes-replicator`",
               "take over, in its target namespaces, the mirrors that tool made of this "
               "source: their marks out, ours in, the object (and its uid) kept"),
    Annotation(PULL, "Namespace", "comma-separated `[KIND/]NAMESPACE/NAME` (KIND: configmap, "
               "the default, secret, or a kind `--kinds` turns on, e.g. networkpolicy)",
               "the sources this namespace asks for; each gets a replica when its "
               "`pull-allowed(-matching)` admits the namespace"),
    Annotation(IGNORE_LABEL, "Namespace (label)", "`true`",
               "the namespace never receives a replica"),
    Annotation(SOURCE_CLUSTER, "replica in a member cluster (set by configmirror)",
               "the home cluster's `--cluster-name`", "which home cluster's operator owns "
               "it; an object naming another is foreign (`TargetConflict`)"),
)


class InvalidSpec(ValueError):
    """A source's annotations do not parse; the message names the annotation and the fault."""


class NamespaceLike(Protocol):
    """What targeting needs to know about a namespace."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def terminating(self) -> bool: ...


@dataclass(frozen=True)
class Patterns:
    """Comma-separated globs matched against whole names or keys; `!` entries exclude.

    A name matches when it matches at least one include and no exclude.
    """

    includes: tuple[re.Pattern[str], ...]
    excludes: tuple[re.Pattern[str], ...]
    # Each side as one regular expression (None: no entries), so a match is one call into
    # `re`: it runs several times for every namespace each decision considers.
    _include: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _exclude: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_include", _either(self.includes))
        object.__setattr__(self, "_exclude", _either(self.excludes))

    def matches(self, name: str) -> bool:
        return self._include is not None and self._include.fullmatch(name) is not None and (
            self._exclude is None or self._exclude.fullmatch(name) is None)


def _either(patterns: tuple[re.Pattern[str], ...]) -> re.Pattern[str] | None:
    """One expression that matches what any of `patterns` matches (each with its own flags)."""
    return re.compile("|".join(f"(?:{p.pattern})" for p in patterns)) if patterns else None


@dataclass(frozen=True)
class _Language:
    what: str                # "namespace" or "key"
    glob: re.Pattern[str]    # one entry, without its `!`
    hint: str


# One entry (without its `!`): literal characters and * ?, or a bracket set with ranges.
# Namespace names are DNS labels; label and annotation keys are qualified names
# (`example.com/name`), so they also take upper case, `.`, `_` and `/`.
NAMESPACES = _Language("namespace", re.compile(
    r"(?:[a-z0-9*?-]|\[!?\]?(?:[a-z0-9-]|[a-z0-9]-[a-z0-9])*\])+"),
    "names, *, ?, [a-z] and a leading ! to exclude")
CLUSTERS = _Language("cluster", NAMESPACES.glob,
                     "cluster names, *, ?, [a-z] and a leading ! to exclude")
KEYS = _Language("key", re.compile(
    r"(?:[A-Za-z0-9._/*?-]|\[!?\]?(?:[A-Za-z0-9._-]|[A-Za-z0-9]-[A-Za-z0-9])*\])+"),
    "keys such as example.com/name, *, ?, [a-z] and a leading ! to exclude")


def parse_patterns(text: str, what: str = REPLICATE_TO, language: _Language = NAMESPACES,
                   empty_ok: bool = False) -> Patterns:
    """Parse `ns-a, team-*, !team-legacy`; raises InvalidSpec naming the bad entry.

    `empty_ok`: a text with no entries matches nothing (a drop list may be empty).
    """
    includes: list[re.Pattern[str]] = []
    excludes: list[re.Pattern[str]] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        exclude = entry.startswith("!")
        glob = entry[1:].strip() if exclude else entry
        if not glob or not language.glob.fullmatch(glob) or not _brackets_valid(glob):
            raise InvalidSpec(f"{what}: invalid {language.what} pattern {entry!r} (use "
                              f"{language.hint})")
        compiled = re.compile(fnmatch.translate(glob))
        (excludes if exclude else includes).append(compiled)
    if not includes and not excludes and not empty_ok:
        raise InvalidSpec(f"{what}: no {language.what} patterns in {text!r}")
    return Patterns(tuple(includes), tuple(excludes))


def parse_key_patterns(text: str, what: str, empty_ok: bool = False) -> Patterns:
    """Globs over label or annotation keys: `team, example.com/*, !internal.example.com/*`."""
    return parse_patterns(text, what, KEYS, empty_ok)


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
    """Where a source wants replicas (names/globs, a namespace selector, or both: the union)
    and which namespaces may pull it (the same two forms)."""

    patterns: Patterns | None
    selector: Selector | None
    pull_patterns: Patterns | None = None
    pull_selector: Selector | None = None
    # replicate-to-clusters(-matching); both None: the home cluster only.
    cluster_patterns: Patterns | None = None
    cluster_selector: Selector | None = None

    def reaches(self, cluster: str, labels: Mapping[str, str], home: bool) -> bool:
        """Whether it replicates into cluster `cluster` (with `labels`; `home`: the cluster
        the operator and its sources are in)."""
        if self.cluster_patterns is None and self.cluster_selector is None:
            return home
        return bool((self.cluster_patterns is not None and self.cluster_patterns.matches(cluster))
                    or (self.cluster_selector is not None
                        and self.cluster_selector.matches(labels)))

    def wants(self, namespace: NamespaceLike) -> bool:
        """Whether it pushes a replica into `namespace`."""
        return bool((self.patterns is not None and self.patterns.matches(namespace.name))
                    or (self.selector is not None and self.selector.matches(namespace.labels)))

    def admits(self, namespace: NamespaceLike) -> bool:
        """Whether `namespace` may pull it (absent pull-allowed: nobody may)."""
        return bool(
            (self.pull_patterns is not None and self.pull_patterns.matches(namespace.name))
            or (self.pull_selector is not None
                and self.pull_selector.matches(namespace.labels)))


def parse_spec(replicate_to: str | None, replicate_to_matching: str | None,
               pull_allowed: str | None = None, pull_allowed_matching: str | None = None,
               to_clusters: str | None = None, to_clusters_matching: str | None = None
               ) -> Spec:
    """A source's targets, pull consent and clusters from its annotations (any may be
    absent)."""
    return Spec(
        parse_patterns(replicate_to) if replicate_to is not None else None,
        _selector(replicate_to_matching, REPLICATE_TO_MATCHING),
        parse_patterns(pull_allowed, PULL_ALLOWED) if pull_allowed is not None else None,
        _selector(pull_allowed_matching, PULL_ALLOWED_MATCHING),
        parse_patterns(to_clusters, REPLICATE_TO_CLUSTERS, CLUSTERS)
        if to_clusters is not None else None,
        _selector(to_clusters_matching, REPLICATE_TO_CLUSTERS_MATCHING))


def _selector(text: str | None, annotation: str) -> Selector | None:
    if text is None:
        return None
    try:
        return parse_selector(text)
    except SelectorError as err:
        raise InvalidSpec(f"{annotation}: {err}") from None


@dataclass(frozen=True)
class Pulls:
    """What a Namespace asks for with `configmirror.io/pull`: sources by (kind, "ns/name"),
    and the entries that do not parse, each with why."""

    entries: frozenset[tuple[str, str]]
    faults: tuple[tuple[str, str], ...] = ()  # (the entry as written, why it does not parse)

    def __bool__(self) -> bool:
        return bool(self.entries or self.faults)


NO_PULLS = Pulls(frozenset())
# How an entry names each kind: its name in lower case (configmap, secret, networkpolicy).
_PULL_KINDS = {k.flag: k.name for k in (CONFIGMAP, SECRET, *OPTIONAL.values())}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                            r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def parse_pulls(text: str | None) -> Pulls:
    """`platform/shared-ca, secret/platform/registry-creds`: entries
    `[KIND/]NAMESPACE/NAME` (KIND: configmap, the default, secret, or a kind --kinds may turn
    on, e.g. networkpolicy, or widget.example.com for a custom resource). An entry that
    does not parse is kept as a fault naming it; the others still count."""
    if text is None:
        return NO_PULLS
    entries: set[tuple[str, str]] = set()
    faults: list[tuple[str, str]] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        parts = entry.split("/")
        kind = "ConfigMap"
        if len(parts) == 3:
            word = parts[0].lower()
            # A custom resource as KIND.GROUP (vocabulary.Kind.pull_name): whether the
            # operator replicates it is the plan's to say (plan.unserved_pulls).
            kind = _PULL_KINDS.get(word) or (word if "." in word and _DNS_SUBDOMAIN.fullmatch(
                word) else "")
            parts = parts[1:]
        if len(parts) != 2 or not kind:
            faults.append((entry, f"not [KIND/]NAMESPACE/NAME (KIND: "
                                  f"{', '.join(_PULL_KINDS)}, or a custom resource's "
                                  f"KIND.GROUP)"))
        elif not _DNS_LABEL.fullmatch(parts[0]) or not _DNS_SUBDOMAIN.fullmatch(parts[1]):
            faults.append((entry, "not a namespace and an object name (lower-case DNS "
                                  "names)"))
        else:
            entries.add((kind, f"{parts[0]}/{parts[1]}"))
    return Pulls(frozenset(entries), tuple(faults))


@dataclass(frozen=True)
class Scope:
    """The operator's own limits: which namespaces may hold sources and which never get copies.

    A source is honoured only in a namespace whose name matches --source-namespaces and whose
    labels match --source-namespace-selector (when given): who may push where is the cluster
    admin's choice, made by labelling namespaces.
    """

    source_namespaces: Patterns
    excluded_namespaces: Patterns
    source_selector: Selector | None = None
    source_selector_text: str = ""
    source_flag: str = "--source-namespaces"  # the flag that named source_namespaces
    # --adopt-from: whose mirrors every source takes over ("": none unless it says so).
    adopt_from: str = ""
    # The namespace the operator runs in: never a target, whatever its labels (its Secrets,
    # its Lease and its published policy live there). In a member cluster, the member side's.
    operator_namespace: str = ""
    # The cluster whose namespaces receive the replicas: its name and labels, and whether it
    # is the home cluster, where the sources are (a source's own namespace is a target only
    # in a member, where it is another namespace of that name).
    cluster: str = ""
    cluster_labels: Mapping[str, str] = field(default_factory=dict)
    home: bool = True

    @classmethod
    def from_flags(cls, source_namespaces: str, exclude_namespaces: str,
                   source_namespace_selector: str = "",
                   source_flag: str = "--source-namespaces", adopt_from: str = "",
                   operator_namespace: str = "", cluster: str = "") -> Scope:
        """From the flags; raises InvalidSpec naming the flag at fault. `source_flag` names
        the flag `source_namespaces` came from (Secrets have their own)."""
        selector = None
        if source_namespace_selector.strip():
            try:
                selector = parse_selector(source_namespace_selector)
            except SelectorError as err:
                raise InvalidSpec(f"--source-namespace-selector: {err}") from None
        return cls(parse_patterns(source_namespaces, source_flag),
                   parse_patterns(exclude_namespaces, "--exclude-namespaces", empty_ok=True),
                   selector, source_namespace_selector.strip(), source_flag,
                   parse_adopt(adopt_from, "--adopt-from"), operator_namespace, cluster)

    def adopts(self, own: str) -> str:
        """Whose mirrors a source takes over: its own `adopt` annotation (`own`, parsed),
        else --adopt-from."""
        return own or self.adopt_from

    def honours(self, home: NamespaceLike) -> bool:
        """Whether a source in namespace `home` is acted on at all."""
        return self.source_namespaces.matches(home.name) and (
            self.source_selector is None or self.source_selector.matches(home.labels))

    def refusal(self, home: NamespaceLike) -> str:
        """Why a source in `home` is not honoured, naming the flag (or label) to change."""
        if not self.source_namespaces.matches(home.name):
            return (f"namespace {home.name} may not hold sources: it is not in "
                    f"{self.source_flag}")
        return (f"namespace {home.name} may not hold sources: its labels do not match "
                f"--source-namespace-selector={self.source_selector_text} (label the "
                f"namespace to allow it)")

    def reaches(self, spec: Spec) -> bool:
        """Whether a source of `spec` replicates into this scope's cluster."""
        return spec.reaches(self.cluster, self.cluster_labels, self.home)

    def for_cluster(self, name: str, labels: Mapping[str, str], operator_namespace: str
                    ) -> Scope:
        """This scope in member cluster `name` (with `labels`), whose `operator_namespace`
        holds the member side."""
        return replace(self, cluster=name, cluster_labels=dict(labels), home=False,
                       operator_namespace=operator_namespace)

    def may_target(self, source_namespace: str, namespace: NamespaceLike) -> bool:
        """Whether any source in `source_namespace` may place a replica in `namespace`."""
        return (namespace.name != self.operator_namespace
                and (namespace.name != source_namespace or not self.home)
                and namespace.labels.get(IGNORE_LABEL) != "true"
                and not self.excluded_namespaces.matches(namespace.name)
                and not namespace.terminating)


@dataclass(frozen=True)
class ReplicaRules:
    """The operator's rule for what replicas never carry: label and annotation keys by which
    GitOps tools and package managers claim objects (--drop-labels, --drop-annotations); and
    the roles a replicated RoleBinding may reference (--bindable-roles)."""

    drop_labels: Patterns
    drop_annotations: Patterns
    bindable_roles: frozenset[str] = frozenset()

    @classmethod
    def from_flags(cls, drop_labels: str, drop_annotations: str,
                   bindable_roles: str = "") -> ReplicaRules:
        """From the flags (an empty one drops nothing); raises InvalidSpec naming it."""
        return cls(parse_key_patterns(drop_labels, "--drop-labels", empty_ok=True),
                   parse_key_patterns(drop_annotations, "--drop-annotations", empty_ok=True),
                   frozenset(n.strip() for n in bindable_roles.split(",") if n.strip()))


@dataclass(frozen=True)
class Lifecycle:
    """What a source asks of its replicas over time (`on-delete`, `sync`)."""

    retain: bool  # on-delete: retain: released, not deleted, when the source goes away
    once: bool    # sync: once: created once, then never updated or repaired


def parse_lifecycle(on_delete: str | None, sync: str | None) -> Lifecycle:
    """From the two annotations (absent: delete, always); raises InvalidSpec naming one."""
    values = {ON_DELETE: (on_delete, ("delete", "retain")), SYNC: (sync, ("always", "once"))}
    for annotation, (value, allowed) in values.items():
        if value is not None and value.strip() not in allowed:
            raise InvalidSpec(f"{annotation}: {value!r} is not {' or '.join(allowed)}")
    return Lifecycle(retain=(on_delete or "").strip() == "retain",
                     once=(sync or "").strip() == "once")


def parse_adopt(text: str | None, what: str = ADOPT) -> str:
    """Whose mirrors a source takes over (`configmirror.io/adopt`, or the operator's
    --adopt-from): a tool's name, or "" for none; raises InvalidSpec naming `what`."""
    if text is None or not text.strip():
        return ""
    tool = text.strip().lower()
    if tool not in ADOPT_TOOLS:
        raise InvalidSpec(f"{what}: {text!r} is not {' or '.join(ADOPT_TOOLS)}")
    return tool


@dataclass(frozen=True)
class Copied:
    """Which of a source's labels, annotations and data keys its replicas carry (default:
    all; `keys` None means every data key, with nothing to filter)."""

    labels: Patterns
    annotations: Patterns
    keys: Patterns | None = None


def parse_copied(copy_labels: str | None, copy_annotations: str | None,
                 copy_keys: str | None = None) -> Copied:
    everything = Patterns((re.compile("(?s:.*)"),), ())
    return Copied(
        parse_key_patterns(copy_labels, COPY_LABELS) if copy_labels is not None else everything,
        parse_key_patterns(copy_annotations, COPY_ANNOTATIONS)
        if copy_annotations is not None else everything,
        parse_key_patterns(copy_keys, COPY_KEYS) if copy_keys is not None else None)


# The data keys the API server requires of a Secret of each type (kubernetes' ValidateSecret).
SECRET_TYPE_KEYS = {
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
}
BASIC_AUTH = "kubernetes.io/basic-auth"  # username, password or both
SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"
_SECRET_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,252}")


def replica_secret_type(source_type: str, replica_type: str | None,
                        keys: Iterable[str]) -> str:
    """The type a Secret's replicas get (its `replica-type`, else its own), checked against
    the data keys they carry as the API server checks them; raises InvalidSpec naming the
    missing key and the fix."""
    if replica_type is not None:
        replica_type = replica_type.strip()
        if not _SECRET_TYPE.fullmatch(replica_type):
            raise InvalidSpec(f"{REPLICA_TYPE}: {replica_type!r} is not a Secret type")
        if replica_type == SERVICE_ACCOUNT_TOKEN:
            raise InvalidSpec(f"{REPLICA_TYPE}: a {SERVICE_ACCOUNT_TOKEN} belongs to its "
                              f"namespace's ServiceAccount; replicas cannot be one")
    kind = replica_type or source_type
    present = set(keys)
    missing = [k for k in SECRET_TYPE_KEYS.get(kind, ()) if k not in present]
    if kind == BASIC_AUTH and not present & {"username", "password"}:
        missing = ["username or password"]
    if not missing:
        return kind
    needs = f"a Secret of type {kind} needs {', '.join(missing)}"
    if replica_type is not None:
        raise InvalidSpec(f"{REPLICA_TYPE}: {needs}, which the replicas would not carry "
                          f"(see {COPY_KEYS})")
    them = "it" if len(missing) == 1 else "them"
    raise InvalidSpec(f"{COPY_KEYS}: {needs}, which it leaves out; copy {them}, or give the "
                      f"replicas another type with {REPLICA_TYPE}: Opaque")
