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
    """A namespaced core/v1 resource and its REST paths."""

    plural: str
    kind: str

    def collection(self, namespace: str | None = None) -> str:
        """All objects (cluster-wide) or one namespace's."""
        if namespace is None:
            return f"/api/v1/{self.plural}"
        return f"/api/v1/namespaces/{namespace}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{namespace}/{self.plural}/{name}"


CONFIGMAPS = Resource("configmaps", "ConfigMap")
SECRETS = Resource("secrets", "Secret")
EVENTS = Resource("events", "Event")


@dataclass(frozen=True, eq=False)
class Kind:
    """What is replicated: its API resource and the top-level fields a replica copies.

    There are two, CONFIGMAP and SECRET, and every function that depends on the kind takes
    one explicitly (none defaults to a ConfigMap). Compared and hashed by identity: a key
    holding one hashes as fast as one holding a string.
    """

    resource: Resource
    payload: tuple[str, ...]  # in the order the content hash takes them

    @property
    def name(self) -> str:
        return self.resource.kind

    @property
    def plural(self) -> str:
        return self.resource.plural


CONFIGMAP = Kind(CONFIGMAPS, ("data", "binaryData", "immutable"))
# A Secret's type cannot change in place, so a replica whose type must change is recreated.
SECRET = Kind(SECRETS, ("data", "type", "immutable"))


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
    def of(cls, obj: Referable, kind: str) -> ObjectRef:
        return cls(kind, obj.namespace, obj.name, obj.uid, obj.resource_version)
