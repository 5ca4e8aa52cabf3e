"""Member clusters: the inventory an admin writes, and a member as the domain reads it.

A member cluster is a Secret in the operator's namespace labelled `configmirror.io/cluster:
NAME`, holding a kubeconfig with one context under `kubeconfig` (or `value`, as Cluster API
writes it); its other labels are the cluster's labels. The home cluster, where the operator
and the sources are, is named by --cluster-name.

In a member, a source's replicas are what they are at home plus one mark,
`configmirror.io/source-cluster: <home>`, which is also how the member's objects tell ours
from another home's (model.object_from_json). A member's caches hold its namespaces and
objects; its sources are the home cluster's (`MemberCaches`), so `plan` and `run` decide a
member with the same functions as the home cluster.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from configmirror.replication.admission import field_entries
from configmirror.replication.model import (
    CONTENT_HASH,
    CachedObject,
    Caches,
    Namespace,
    NamespaceCache,
    ObjectCache,
    Source,
    content_hash,
)
from configmirror.replication.spec import PREFIX, SOURCE_CLUSTER

CLUSTER_LABEL = PREFIX + "cluster"
KUBECONFIG_KEYS = ("kubeconfig", "value")  # the first present is read
DEFAULT_HOME = "local"
# What `configmirror cluster add` installs in a member, and what the operator renews.
MEMBER_NAMESPACE = "configmirror"
MEMBER_ACCOUNT = "configmirror-member"
INVALID_CLUSTER = "InvalidCluster"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class InvalidCluster(ValueError):
    """A cluster Secret that cannot be used; the message names the fault."""


@dataclass(frozen=True)
class Member:
    """A member cluster, as its Secret says."""

    name: str
    labels: Mapping[str, str]
    kubeconfig: str        # the kubeconfig's text (a Secret value: never logged)
    secret: str            # the Secret's name
    secret_uid: str = ""
    secret_version: str = ""
    key: str = "kubeconfig"  # the data key it was read from (the renewer writes it back there)

    def __repr__(self) -> str:
        """Never the kubeconfig: it holds a credential."""
        return f"Member({self.name!r}, labels={dict(self.labels)!r}, secret={self.secret!r})"


def valid_name(name: str) -> bool:
    """A cluster name: a DNS label, as a namespace's."""
    return bool(_DNS_LABEL.fullmatch(name))


def member_of(secret: Mapping[str, Any], home: str) -> Member:
    """The member cluster a Secret (API JSON) describes; InvalidCluster naming the fault."""
    meta = secret.get("metadata") or {}
    labels: dict[str, str] = dict(meta.get("labels") or {})
    name = labels.pop(CLUSTER_LABEL, "")
    if not valid_name(name):
        raise InvalidCluster(f"label {CLUSTER_LABEL}: {name!r} is not a cluster name (a DNS "
                             f"label: lower-case letters, digits and '-', at most 63)")
    if name == home:
        raise InvalidCluster(f"cluster {name} is the home cluster's own name (--cluster-name)")
    data = secret.get("data") or {}
    key = next((k for k in KUBECONFIG_KEYS if k in data), None)
    if key is None:
        raise InvalidCluster(f"cluster {name}: the Secret has no kubeconfig under "
                             f"{' or '.join(KUBECONFIG_KEYS)}")
    try:
        text = base64.b64decode(str(data[key]), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise InvalidCluster(f"cluster {name}: {key} is not base64 of UTF-8 text") from None
    check_kubeconfig(text, f"cluster {name}: {key}")
    return Member(name, labels, text, str(meta.get("name", "")), str(meta.get("uid", "")),
                  str(meta.get("resourceVersion", "")), key)


def check_kubeconfig(text: str, where: str) -> None:
    """A kubeconfig with exactly one context, whose cluster and user it holds;
    InvalidCluster naming the fault (the client checks the rest when it loads it)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InvalidCluster(f"{where}: not YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise InvalidCluster(f"{where}: not a kubeconfig (a YAML mapping)")
    contexts = [c for c in doc.get("contexts") or () if isinstance(c, dict)]
    if len(contexts) != 1:
        raise InvalidCluster(f"{where}: holds {len(contexts)} contexts; a cluster's kubeconfig "
                             f"holds one")
    context = contexts[0].get("context") or {}
    for part in ("cluster", "user"):
        named = context.get(part)
        if not any(isinstance(e, dict) and e.get("name") == named
                   for e in doc.get(part + "s") or ()):
            raise InvalidCluster(f"{where}: its context names {part} {named!r}, which it "
                                 f"does not hold")


def inventory(secrets: Iterable[Mapping[str, Any]], home: str
              ) -> tuple[dict[str, Member], dict[str, str]]:
    """The members the Secrets describe, by name, and each unusable Secret's fault, by the
    Secret's name. Two Secrets naming one cluster are both refused: which to use is not
    configmirror's guess."""
    found: dict[str, list[Member]] = {}
    faults: dict[str, str] = {}
    for secret in secrets:
        name = str((secret.get("metadata") or {}).get("name", ""))
        try:
            member = member_of(secret, home)
        except InvalidCluster as err:
            faults[name] = str(err)
            continue
        found.setdefault(member.name, []).append(member)
    members = {}
    for cluster, named in found.items():
        if len(named) == 1:
            members[cluster] = named[0]
            continue
        secrets_named = ", ".join(sorted(m.secret for m in named))
        for member in named:
            faults[member.secret] = (f"cluster {cluster} is named by more than one Secret "
                                     f"({secrets_named}); none of them is used")
    return members, faults


def for_cluster(source: Source, home: str) -> Source:
    """`source` as its replicas are written in a member cluster: marked with the home
    cluster's name (SOURCE_CLUSTER), so their digest is theirs."""
    wanted = {k: v for k, v in source.annotations.items() if k != CONTENT_HASH}
    wanted[SOURCE_CLUSTER] = home
    digest = content_hash(source.payload, source.labels, wanted)
    annotations = {**wanted, CONTENT_HASH: digest}
    return replace(source, annotations=annotations, content_hash=digest,
                   fields=field_entries(source.payload, source.labels, annotations))


class MemberCaches(Caches):
    """A member cluster's caches of one kind as the domain reads them: its namespaces and
    objects (where replicas go), and the home cluster's sources, as written there."""

    def __init__(self, home: Caches, objects: ObjectCache, namespaces: NamespaceCache,
                 home_name: str) -> None:
        super().__init__(objects, namespaces, home.kind)
        self.home = home
        self.home_name = home_name
        # Each source's member form, by key, made once per version of it.
        self._made: dict[str, tuple[CachedObject, CachedObject]] = {}

    def source(self, key: str) -> CachedObject | None:
        return self._member(self.home.source(key), key)

    def source_namespace(self, name: str) -> Namespace | None:
        return self.home.source_namespace(name)

    def sources(self) -> list[CachedObject]:
        return [self._made_of(s) for s in self.home.sources()]

    def sources_named(self, name: str) -> list[CachedObject]:
        return [self._made_of(s) for s in self.home.sources_named(name)]

    def _member(self, obj: CachedObject | None, key: str) -> CachedObject | None:
        if obj is None:
            self._made.pop(key, None)
            return None
        return self._made_of(obj)

    def _made_of(self, obj: CachedObject) -> CachedObject:
        if obj.compiled is None:
            return obj
        made = self._made.get(obj.key)
        if made is not None and made[0] is obj:
            return made[1]
        member = replace(obj, compiled=for_cluster(obj.compiled, self.home_name))
        self._made[obj.key] = (obj, member)
        return member
