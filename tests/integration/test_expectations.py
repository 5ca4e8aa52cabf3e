"""The watch gap: a reconcile that runs before the watch has delivered our own last write.

The replicator runs in the test against the real apiserver, on caches filled by one LIST
and never watched, so the gap (a few milliseconds in the operator) stays open as long as the
test needs. What the reconciler remembers of its own writes (`Expectations`) must carry it
across: a second reconcile neither writes again nor conflicts with its own write.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from configmirror.client.events import EventRecorder
from configmirror.client.kube import Kube, load_configuration
from configmirror.clock import RealClock
from configmirror.metrics import Metrics
from configmirror.operator.caches import ClusterInformers, KindInformers, Replicated
from configmirror.operator.memory import Memory
from configmirror.operator.replicator import Replicator
from configmirror.replication.model import DEFAULT_RULES, target_key
from configmirror.replication.spec import DEFAULT_EXCLUDED, REPLICATE_TO, Scope
from configmirror.vocabulary import CONFIGMAP
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import configmap, read

pytestmark = pytest.mark.controlplane


@dataclass
class Gap:
    """A replicator whose caches move only when the test relists them."""

    replicator: Replicator
    cache: ClusterInformers
    metrics: Metrics

    @property
    def configmaps(self) -> KindInformers:
        return self.cache.kinds[CONFIGMAP]

    def relist(self) -> None:
        """The caches catch up with the server, as the watch eventually makes them."""
        self.cache.list_once()

    def writes(self) -> float:
        return sum(self.metrics.registry.get_sample_value(
            "configmirror_replica_writes_total", {"action": verb, "resource": "configmaps"})
            or 0.0 for verb in ("create", "update", "delete"))


@pytest.fixture
def gap(cluster: Cluster) -> Iterator[Gap]:
    kube = Kube(load_configuration(str(cluster.kubeconfig)))
    try:
        # The operator's own wiring, listed by hand and never watched.
        replicated = Replicated(CONFIGMAP, (), Scope.from_flags("*", DEFAULT_EXCLUDED))
        cache = ClusterInformers(kube, [replicated], DEFAULT_RULES)
        configmaps = cache.kinds[CONFIGMAP]
        metrics = Metrics()
        replicator = Replicator(
            kube, configmaps.caches, configmaps.scope,
            EventRecorder(kube),  # never started: its Events are not what this is about
            Memory(configmaps.watermark, 0.0, RealClock()), metrics=metrics)
        yield Gap(replicator, cache, metrics)
    finally:
        kube.close()


def test_a_second_reconcile_before_the_watch_delivers_a_create_neither_writes_nor_conflicts(
        cluster: Cluster, namespaces: Namespaces, gap: Gap) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a}))
    gap.relist()
    key = target_key(CONFIGMAP, a, "cfg")
    assert gap.replicator.reconcile(key).changed is True
    created = read(cluster, a, "cfg")
    assert created is not None
    # The cache still says "missing": read alone, it would create again and get a 409.
    assert gap.configmaps.caches.get(f"{a}/cfg") is None
    assert gap.replicator.reconcile(key).changed is False
    assert gap.writes() == 1
    again = read(cluster, a, "cfg")
    assert again is not None and again.metadata.resource_version == \
        created.metadata.resource_version


def test_a_second_reconcile_before_the_watch_delivers_an_update_neither_writes_nor_conflicts(
        cluster: Cluster, namespaces: Namespaces, gap: Gap) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a},
                                                             data={"v": "1"}))
    gap.relist()
    key = target_key(CONFIGMAP, a, "cfg")
    assert gap.replicator.reconcile(key).changed is True
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    gap.relist()  # the source's edit and our create have come through; nothing after this
    assert gap.replicator.reconcile(key).changed is True  # the update, with its precondition
    updated = read(cluster, a, "cfg")
    assert updated is not None and updated.data == {"v": "2"}
    # The cache still holds the replica at v=1, at the version the update replaced: read
    # alone, it would update again from that version and get a 409.
    cached = gap.configmaps.caches.get(f"{a}/cfg")
    assert cached is not None and cached.resource_version != updated.metadata.resource_version
    assert gap.replicator.reconcile(key).changed is False
    assert gap.writes() == 2
    again = read(cluster, a, "cfg")
    assert again is not None and again.metadata.resource_version == \
        updated.metadata.resource_version
