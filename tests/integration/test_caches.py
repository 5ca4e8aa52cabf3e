"""The operator's caches against the real API server: one informer per watched Secret name
(a field selector, what RBAC's resourceNames can authorize) read as one cache, each change
told with its kind, and every informer thread stopped by the cache that started it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from configmirror.client.kube import Kube, load_configuration
from configmirror.operator.caches import ClusterInformers, Replicated
from configmirror.replication.model import DEFAULT_RULES, CachedObject
from configmirror.replication.spec import DEFAULT_EXCLUDED, Scope
from configmirror.vocabulary import CONFIGMAP, SECRET, Kind
from configmirror_testing.cluster import Cluster
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane

SCOPE = Scope.from_flags("*", DEFAULT_EXCLUDED)
KINDS = [Replicated(CONFIGMAP, (), SCOPE), Replicated(SECRET, ("tls", "creds"), SCOPE)]


@pytest.fixture
def kube(cluster: Cluster) -> Iterator[Kube]:
    kube = Kube(load_configuration(str(cluster.kubeconfig)))
    try:
        yield kube
    finally:
        kube.close()


def make_secret(cluster: Cluster, namespace: str, name: str) -> None:
    cluster.core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=name), string_data={"k": "v"}))


def test_each_secret_name_is_listed_alone_and_the_kind_read_as_one_cache(
        cluster: Cluster, namespace: str, kube: Kube) -> None:
    for name in ("tls", "creds", "other"):
        make_secret(cluster, namespace, name)
    cluster.core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="cfg"), data={"k": "v"}))
    cache = ClusterInformers(kube, KINDS, DEFAULT_RULES)
    assert [i.name for i in cache.informers] == [
        "namespaces", "configmaps", "secrets:tls", "secrets:creds"]
    cache.list_once()
    secrets, configmaps = cache.kinds[SECRET], cache.kinds[CONFIGMAP]
    assert secrets.caches.get(f"{namespace}/tls") is not None
    assert secrets.caches.get(f"{namespace}/creds") is not None
    assert secrets.caches.get(f"{namespace}/other") is None, "a name not watched is never read"
    assert configmaps.caches.get(f"{namespace}/cfg") is not None
    assert secrets.caches.namespace(namespace) is not None
    # The version a key's cache is at is its own informer's; a name not watched has none.
    assert secrets.watermark(f"{namespace}/tls") > 0
    assert configmaps.watermark(f"{namespace}/cfg") > 0
    assert secrets.watermark(f"{namespace}/other") == 0
    assert not secrets.watching(f"{namespace}/tls"), "listed once, never watched"
    assert not secrets.watching(f"{namespace}/other")


def test_a_started_cache_tells_each_change_with_its_kind_watches_and_joins_its_threads(
        cluster: Cluster, namespace: str, kube: Kube) -> None:
    told: list[tuple[Kind, str]] = []

    def on_object(kind: Kind, old: CachedObject | None, new: CachedObject | None) -> None:
        if new is not None:
            told.append((kind, new.key))

    cache = ClusterInformers(kube, KINDS, DEFAULT_RULES, on_object=on_object)
    threads = {f"informer-{i.name}" for i in cache.informers}
    cache.start()
    try:
        wait_for(cache.has_synced, what="every informer's first list")
        make_secret(cluster, namespace, "tls")
        wait_for(lambda: (SECRET, f"{namespace}/tls") in told, what="the Secret's event")
        secrets = cache.kinds[SECRET]
        wait_for(lambda: secrets.watching(f"{namespace}/tls"), what="the tls informer's watch")
        assert not secrets.watching(f"{namespace}/other")
    finally:
        cache.stop()
    assert not [t.name for t in threading.enumerate()
                if t.name.removesuffix("-dispatch") in threads]
