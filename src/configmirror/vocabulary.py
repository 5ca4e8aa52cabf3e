"""The names every layer shares: what a kind of object is, where its REST paths are, and how
one object is referred to.

A leaf: it imports nothing of configmirror, so the domain (`spec`, `model`, `plan`,
`routing`, `status`) can speak of kinds and objects without importing the wire (`kube`,
`transport`), and the wire can build paths without importing the domain
(docs/architecture.md; the layers are checked by import-linter in `make lint`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Resource:
    """A namespaced resource of an API group ("" for core) and version, and its REST paths."""

    plural: str
    kind: str
    group: str = ""
    version: str = "v1"

    @property
    def api_version(self) -> str:
        """As an object's apiVersion says it: `v1`, `networking.k8s.io/v1`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def _root(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection(self, namespace: str | None = None) -> str:
        """All objects (cluster-wide) or one namespace's."""
        if namespace is None:
            return f"{self._root}/{self.plural}"
        return f"{self._root}/namespaces/{namespace}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        return f"{self._root}/namespaces/{namespace}/{self.plural}/{name}"


CONFIGMAPS = Resource("configmaps", "ConfigMap")
SECRETS = Resource("secrets", "Secret")
EVENTS = Resource("events", "Event")


@dataclass(frozen=True, eq=False)
class Kind:
    """What is replicated: its API resource and the top-level fields a replica copies.

    CONFIGMAP and SECRET, and the kinds an admin turns on with --kinds (`OPTIONAL`); every
    function that depends on the kind takes one explicitly (none defaults to a ConfigMap).
    Compared and hashed by identity: a key holding one hashes as fast as one holding a
    string.
    """

    resource: Resource
    payload: tuple[str, ...]  # in the order the content hash takes them
    # The payload field the API server refuses to change in place (a Secret's type, a
    # RoleBinding's roleRef): a replica whose value of it must change is recreated.
    fixed: str | None = None
    # A custom resource (--kinds GROUP/VERSION/Kind, resolved through discovery): named
    # `kind.group` (widget.example.com), as kubectl names it in full, where a built-in kind
    # is named by its kind alone.
    custom: bool = False

    @property
    def name(self) -> str:
        return self.resource.kind

    @property
    def plural(self) -> str:
        return self.resource.plural

    @property
    def flag(self) -> str:
        """How a pull entry and a command's reference name it (and --kinds a built-in kind):
        `networkpolicy`, `widget.example.com`."""
        if self.custom:
            return f"{self.resource.kind.lower()}.{self.resource.group}"
        return self.resource.kind.lower()

    @property
    def pull_name(self) -> str:
        """How `spec.Pulls` entries name it: a built-in kind by its name (NetworkPolicy), a
        custom resource by its flag (widget.example.com, which an entry says in full)."""
        return self.flag if self.custom else self.resource.kind


CONFIGMAP = Kind(CONFIGMAPS, ("data", "binaryData", "immutable"))
SECRET = Kind(SECRETS, ("data", "type", "immutable"), fixed="type")
# Off unless --kinds names them; a replica copies exactly these fields of its source.
NETWORKPOLICY = Kind(Resource("networkpolicies", "NetworkPolicy", "networking.k8s.io"),
                     ("spec",))
LIMITRANGE = Kind(Resource("limitranges", "LimitRange"), ("spec",))
RESOURCEQUOTA = Kind(Resource("resourcequotas", "ResourceQuota"), ("spec",))
ROLE = Kind(Resource("roles", "Role", "rbac.authorization.k8s.io"), ("rules",))
# roleRef cannot change: a binding to another role is a new binding.
ROLEBINDING = Kind(Resource("rolebindings", "RoleBinding", "rbac.authorization.k8s.io"),
                   ("roleRef", "subjects"), fixed="roleRef")
# Never `secrets`: a ServiceAccount's token Secrets are its own namespace's.
SERVICEACCOUNT = Kind(Resource("serviceaccounts", "ServiceAccount"),
                      ("automountServiceAccountToken", "imagePullSecrets"))
OPTIONAL = {k.flag: k for k in (NETWORKPOLICY, LIMITRANGE, RESOURCEQUOTA, ROLE, ROLEBINDING,
                                SERVICEACCOUNT)}
BUILT_IN = frozenset({"configmap", "secret", *OPTIONAL})  # never the name of a custom kind
SHORT_NAMES = {"networkpolicy": ("netpol",), "limitrange": ("limits",),
               "resourcequota": ("quota",), "serviceaccount": ("sa",)}  # kubectl's


# --kinds GROUP/VERSION/Kind: a DNS subdomain with a dot (a custom resource's group is never
# core's ""), a version (v1, v1beta2), a kind as the API server spells kinds.
_CUSTOM = re.compile(r"(?P<group>[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+)"
                     r"/(?P<version>v[0-9]+((alpha|beta)[0-9]+)?)/(?P<kind>[A-Za-z][A-Za-z0-9]*)",
                     re.ASCII)
CUSTOM_SYNTAX = "GROUP/VERSION/Kind[:FIELD...], e.g. example.com/v1/Widget or " \
    "example.com/v1/Widget:spec:settings"
# A top-level field a custom resource's replica may copy (its default: spec alone). Never what
# the API server or the object's own controller writes, nor what makes it an object.
_FIELD = re.compile(r"[A-Za-z][A-Za-z0-9_]*", re.ASCII)
NEVER_COPIED = frozenset({"apiVersion", "kind", "metadata", "status"})


@dataclass(frozen=True)
class CustomName:
    """A custom resource as --kinds names it, before discovery resolves it."""

    group: str
    version: str
    kind: str  # as written; discovery matches it without regard to case
    fields: tuple[str, ...] = ("spec",)  # what a replica copies, sorted (the hash's order)

    def __str__(self) -> str:
        return f"{self.group}/{self.version}/{self.kind}"

    @property
    def flag(self) -> str:
        """As its resolved Kind's flag will be: `widget.example.com`."""
        return f"{self.kind.lower()}.{self.group}"


def custom_name(text: str) -> CustomName | None:
    """`example.com/v1/Widget` (a replica copies its spec) or `example.com/v1/Widget:spec:
    settings` (the top-level fields named) as a CustomName; None when `text` has no `/` (a
    built-in kind's name). Raises ValueError saying what is wrong with one that has."""
    if "/" not in text:
        return None
    name, *fields = text.strip().split(":")
    found = _CUSTOM.fullmatch(name)
    if found is None or len(found["group"]) > 253:
        raise ValueError(f"not {CUSTOM_SYNTAX}")
    if not fields:
        fields = ["spec"]
    for field in fields:
        if not _FIELD.fullmatch(field):
            raise ValueError(f"not {CUSTOM_SYNTAX}: {field!r} is no top-level field name")
        if field in NEVER_COPIED:
            raise ValueError(f"naming {field}, which a replica never copies (the API server's "
                             f"or the object's controller's; a replica copies spec or the "
                             f"fields named)")
    return CustomName(found["group"], found["version"], found["kind"],
                      tuple(sorted(set(fields))))


def custom_kind(name: CustomName, resources: Mapping[str, Any] | None) -> Kind:
    """The Kind `name` is, from the API server's discovery of its group/version (the
    APIResourceList at /apis/GROUP/VERSION; None: the server serves no such group/version).
    A replica copies the fields `name` says (its `spec` unless it names others), never
    `status` nor the metadata the server keeps. Raises
    ValueError naming it: missing, cluster-scoped, a subresource, or not listable and
    writable as a replica must be."""
    if resources is None:
        raise ValueError(f"{name}: the API server serves no {name.group}/{name.version} (is "
                         f"its CustomResourceDefinition installed?)")
    found = [r for r in resources.get("resources") or ()
             if "/" not in str(r.get("name", "")) and str(r.get("kind", "")).lower()
             == name.kind.lower()]
    if not found:
        raise ValueError(f"{name}: {name.group}/{name.version} has no kind {name.kind}")
    (entry, *_) = found
    kind = str(entry["kind"])
    if kind.lower() in BUILT_IN:
        raise ValueError(f"{name}: its kind {kind} is the name of a kind configmirror has "
                         f"built in; it cannot tell the two apart")
    if not entry.get("namespaced"):
        raise ValueError(f"{name}: {entry['name']}.{name.group} is cluster-scoped; "
                         f"configmirror replicates namespaced kinds only")
    missing = sorted(_VERBS - set(entry.get("verbs") or ()))
    if missing:
        raise ValueError(f"{name}: {entry['name']}.{name.group} does not support "
                         f"{', '.join(missing)}")
    return Kind(Resource(str(entry["name"]), kind, name.group, name.version), name.fields,
                custom=True)


_VERBS = frozenset({"list", "watch", "create", "update", "patch", "delete"})  # what it uses


class Referable(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def resource_version(self) -> str: ...


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about."""

    kind: str  # ConfigMap, Secret, Namespace: always said, never assumed
    namespace: str
    name: str
    uid: str
    resource_version: str
    api_version: str = "v1"

    @classmethod
    def of(cls, obj: Referable, kind: str, api_version: str = "v1") -> ObjectRef:
        return cls(kind, obj.namespace, obj.name, obj.uid, obj.resource_version, api_version)
