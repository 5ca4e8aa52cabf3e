"""What the operator caches, and the informers that keep it: wired one way for `run`, `plan`
and the tests.

Namespaces are watched whole. Each replicated kind has its own objects: ConfigMaps (and each
kind --kinds turns on) through one informer for the whole cluster; Secrets, when an admin
names them, through one informer per name (a watch with a metadata.name field selector is
what RBAC's resourceNames can authorize), each into its own store, which the domain reads
as one cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from configmirror.client.informer import Informer
from configmirror.client.kube import NAMESPACES, ApiError, Kube
from configmirror.client.outage import Outage
from configmirror.client.store import Store, StoresByName
from configmirror.clock import Clock
from configmirror.lifecycle import Deadline
from configmirror.metrics import Metrics
from configmirror.operator.settings import Settings
from configmirror.replication.clusters import MemberCaches
from configmirror.replication.model import (
    CachedObject,
    Caches,
    Namespace,
    ObjectCache,
    namespace_from_json,
    object_indexers,
    object_transform,
)
from configmirror.replication.spec import InvalidSpec, ReplicaRules, Scope
from configmirror.vocabulary import (
    CONFIGMAP,
    CUSTOM_SYNTAX,
    OPTIONAL,
    SECRET,
    CustomName,
    Kind,
    custom_kind,
    custom_name,
)

ObjectHandler = Callable[[Kind, CachedObject | None, CachedObject | None], None]
NamespaceHandler = Callable[[Namespace | None, Namespace | None], None]


@dataclass(frozen=True)
class Replicated:
    """A kind the operator replicates, as its flags set it."""

    kind: Kind
    names: tuple[str, ...]  # the only names watched; () watches every object of the kind
    scope: Scope            # where its sources are honoured and where replicas may go


# What the API server serves in a group/version (its APIResourceList), or None for none.
Discovery = Callable[[str, str], dict[str, Any] | None]


def discovery(kube: Kube) -> Discovery:
    """Discovery through `kube`: GET /apis/GROUP/VERSION, a 404 as None."""
    def discover(group: str, version: str) -> dict[str, Any] | None:
        try:
            return kube.request("get", f"/apis/{group}/{version}", timeout=10)
        except ApiError as err:
            if err.status == 404:
                return None
            raise
    return discover


def replicated_kinds(settings: Settings, discover: Discovery | None = None
                     ) -> list[Replicated]:
    """ConfigMaps always; Secrets only when --secret-names names some (otherwise no Secret is
    ever listed); each other kind only when --kinds names it (otherwise none is ever listed),
    with its sources where ConfigMaps' are honoured. A custom resource (GROUP/VERSION/Kind)
    is resolved with `discover`; without it, one is checked for its form only and left out
    (flags checked before connecting). Raises spec.InvalidSpec naming a flag, or a kind,
    at fault."""
    kinds = [Replicated(CONFIGMAP, (), _scope(settings))]
    if settings.secrets:
        kinds.append(Replicated(SECRET, tuple(settings.secrets),
                                _scope(settings, secrets=True)))
    for name in settings.kind_names:
        if name == CONFIGMAP.flag:
            continue
        try:
            custom = custom_name(name)
        except ValueError as err:
            raise InvalidSpec(f"--kinds: {name!r} is {err}") from None
        if custom is not None:
            if discover is not None:
                kinds.append(Replicated(_resolved(custom, discover, kinds), (),
                                        _scope(settings)))
            continue
        kind = OPTIONAL.get(name)
        if kind is None:
            raise InvalidSpec(f"--kinds: {name!r} is not a kind configmirror replicates "
                              f"(configmap, {', '.join(OPTIONAL)}, or a custom resource as "
                              f"{CUSTOM_SYNTAX})"
                              + ("; Secrets are turned on by name, with --secret-names"
                                 if name == SECRET.flag else ""))
        kinds.append(Replicated(kind, (), _scope(settings)))
    return kinds


def _resolved(custom: CustomName, discover: Discovery, before: list[Replicated]) -> Kind:
    """The Kind a custom resource is, through discovery; InvalidSpec naming it if it is none
    configmirror can replicate, or one of the same kind name is already replicated."""
    try:
        kind = custom_kind(custom, discover(custom.group, custom.version))
    except ApiError as err:
        raise InvalidSpec(f"--kinds: {custom}: cannot look it up on the API server: "
                          f"{err}") from None
    except ValueError as err:
        raise InvalidSpec(f"--kinds: {err}") from None
    for other in before:
        if other.kind.name == kind.name:
            raise InvalidSpec(f"--kinds: {custom}: {other.kind.resource.api_version}/"
                              f"{kind.name} is replicated too; configmirror replicates one "
                              f"kind of each name")
    return kind


def _scope(settings: Settings, secrets: bool = False) -> Scope:
    """The scope of ConfigMap sources, or (`secrets`) of Secret sources, which only
    --secret-source-namespaces may hold."""
    if secrets:
        return Scope.from_flags(settings.secret_source_namespaces, settings.exclude_namespaces,
                                settings.source_namespace_selector, "--secret-source-namespaces",
                                settings.adopt_from, settings.operator_namespace,
                                settings.cluster_name)
    return Scope.from_flags(settings.source_namespaces, settings.exclude_namespaces,
                            settings.source_namespace_selector, adopt_from=settings.adopt_from,
                            operator_namespace=settings.operator_namespace,
                            cluster=settings.cluster_name)


def member_kinds(home: ClusterInformers, name: str, labels: Mapping[str, str],
                 namespace: str) -> list[Replicated]:
    """The home cluster's kinds as member cluster `name` (with `labels`) replicates them: the
    same names watched, the scope in that cluster (its member side in `namespace`)."""
    return [Replicated(k.kind, k.names, k.scope.for_cluster(name, labels, namespace))
            for k in home.kinds.values()]


def _ignore(*_change: object) -> None:
    """A handler for caches that are only listed (`plan`): nothing to tell."""


class KindInformers:
    """One kind's informers and the cache they fill."""

    def __init__(self, replicated: Replicated, caches: Caches,
                 informers: dict[str, Informer[CachedObject]]) -> None:
        self.kind = replicated.kind
        self.scope = replicated.scope
        self.names = replicated.names
        self.caches = caches
        self._informers = informers  # by the name they watch ("" for all)

    @property
    def informers(self) -> list[Informer[CachedObject]]:
        return list(self._informers.values())

    def _informer_of(self, key: str) -> Informer[CachedObject] | None:
        """The informer that holds object `key` ("ns/name")."""
        return self._informers.get(key.rsplit("/", 1)[-1]) or self._informers.get("")

    def watermark(self, key: str) -> int:
        """The newest resourceVersion whose changes the cache of object `key` holds."""
        informer = self._informer_of(key)
        return informer.watermark() if informer is not None else 0

    def watching(self, key: str) -> bool:
        """Whether the informer of object `key` is watching now (its cache is current)."""
        informer = self._informer_of(key)
        return informer is not None and informer.watching()


class ClusterInformers:
    """Namespaces and the objects of every replicated kind, each kept by its informers."""

    def __init__(self, kube: Kube, kinds: list[Replicated], rules: ReplicaRules,
                 on_object: ObjectHandler = _ignore, on_namespace: NamespaceHandler = _ignore,
                 metrics: Metrics | None = None, clock: Clock | None = None,
                 resync_period: float = 0.0,
                 on_recovered: Callable[[], None] | None = None,
                 outage: Outage | None = None, home: ClusterInformers | None = None,
                 home_name: str = "") -> None:
        """With `home` (the home cluster's), these are a member cluster's: its objects are
        never sources, ours carry `home_name` as their source cluster, and the domain reads
        them with the home cluster's sources (clusters.MemberCaches)."""
        self.namespaces: Store[Namespace] = Store()
        self.namespace_informer: Informer[Namespace] = Informer(
            kube, NAMESPACES, namespace_from_json, self.namespaces, on_namespace, "namespaces",
            metrics, clock, on_recovered=on_recovered, outage=outage)
        self.kinds: dict[Kind, KindInformers] = {}
        kube.count_custom(frozenset(r.kind.plural for r in kinds if r.kind.custom))
        for replicated in kinds:
            kind = replicated.kind
            names = replicated.names or ("",)
            stores: dict[str, Store[CachedObject]] = {n: Store(object_indexers()) for n in names}

            def handler(old: CachedObject | None, new: CachedObject | None,
                        kind: Kind = kind) -> None:
                on_object(kind, old, new)

            transform = object_transform(kind, rules) if home is None else \
                object_transform(kind, rules, source_cluster=home_name, sources=False)
            informers = {name: Informer(
                kube, kind.resource.collection(), transform, store,
                handler, kind.plural + (f":{name}" if name else ""), metrics, clock,
                resync_period=resync_period, on_recovered=on_recovered, outage=outage,
                query={"fieldSelector": f"metadata.name={name}"} if name else None)
                for name, store in stores.items()}
            objects: ObjectCache = stores[""] if names == ("",) else StoresByName(stores)
            caches = Caches(objects, self.namespaces, kind) if home is None else \
                MemberCaches(home.kinds[kind].caches, objects, self.namespaces, home_name)
            self.kinds[kind] = KindInformers(replicated, caches, informers)

    @property
    def informers(self) -> list[Informer[Any]]:
        """Every informer: namespaces first, then each kind's."""
        return [self.namespace_informer, *(i for k in self.kinds.values() for i in k.informers)]

    def start(self) -> None:
        """Start every informer (each lists, then watches, on threads of its own)."""
        for informer in self.informers:
            informer.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop every informer, all within `timeout` seconds; True once all have ended."""
        deadline = Deadline(timeout)
        for informer in self.informers:
            informer.stop(0)  # all told first: one slow to end holds up none of the others
        return all([informer.stop(deadline.left()) for informer in self.informers])

    def has_synced(self) -> bool:
        """Whether every informer has listed and told its handler of everything listed."""
        return all(informer.has_synced() for informer in self.informers)

    def list_once(self) -> None:
        """One LIST of everything into the caches, without watching (for `plan`)."""
        for informer in self.informers:
            informer.list_once()
