"""The names every layer shares: what a kind of object is, where its REST paths are, and how
one object is referred to.

A leaf: it imports nothing of configmirror, so the domain (`spec`, `model`, `plan`,
`routing`, `status`) can speak of kinds and objects without importing the wire (`kube`,
`transport`), and the wire can build paths without importing the domain (DESIGN.md,
section 3; the layers are checked by import-linter in `make lint`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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

    @property
    def name(self) -> str:
        return self.resource.kind

    @property
    def plural(self) -> str:
        return self.resource.plural

    @property
    def flag(self) -> str:
        """How --kinds, a pull entry and a command's reference name it: `networkpolicy`."""
        return self.resource.kind.lower()


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
SHORT_NAMES = {"networkpolicy": ("netpol",), "limitrange": ("limits",),
               "resourcequota": ("quota",), "serviceaccount": ("sa",)}  # kubectl's


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
