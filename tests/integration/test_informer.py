"""The informer against a real apiserver: list, events, resume, 410 relist, restarts, bookmarks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest
from kubernetes import client

from configmirror.client.kube import Kube, load_configuration
from configmirror.client.store import Store
from configmirror.metrics import Metrics
from configmirror.replication.model import DEFAULT_RULES, object_transform
from configmirror.replication.model import CachedObject as ConfigMap
from configmirror.vocabulary import CONFIGMAP, CONFIGMAPS
from configmirror_testing.cluster import Cluster
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane


class Recorder:
    """A handler that keeps every (old, new) it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[ConfigMap | None, ConfigMap | None]] = []
        self._lock = threading.Lock()

    def __call__(self, old: ConfigMap | None, new: ConfigMap | None) -> None:
        with self._lock:
            self.calls.append((old, new))

    def seen(self, namespace: str) -> list[tuple[str, str]]:
        """(event, name) for objects in `namespace`: added, updated, deleted."""
        out = []
        with self._lock:
            calls = list(self.calls)
        for old, new in calls:
            obj = new or old
            if obj is None or obj.namespace != namespace:
                continue
            kind = "added" if old is None else "deleted" if new is None else "updated"
            out.append((kind, obj.name))
        return out


class Harness:
    def __init__(self, cluster: Cluster, min_watch_timeout: int = 300) -> None:
        from configmirror.client.informer import Informer

        self.kube = Kube(load_configuration(str(cluster.kubeconfig)))
        self.store: Store[ConfigMap] = Store()
        self.recorder = Recorder()
        self.metrics = Metrics()
        self.informer = Informer(self.kube, CONFIGMAPS.collection(),
                                 object_transform(CONFIGMAP, DEFAULT_RULES),
                                 self.store, self.recorder, "configmaps", self.metrics,
                                 min_watch_timeout=min_watch_timeout)

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, {"resource": "configmaps",
                                                              **labels})
        return value or 0.0

    def lists(self) -> int:
        return self.kube.total({"list"}, "configmaps")

    def close(self) -> None:
        self.informer.stop()
        self.kube.close()


@pytest.fixture
def harness(cluster: Cluster) -> Iterator[Harness]:
    h = Harness(cluster)
    yield h
    h.close()


def cm(name: str, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data or {"k": "v"})


def test_initial_list_fills_the_store_and_reports_adds(
        cluster: Cluster, namespace: str, harness: Harness) -> None:
    cluster.core.create_namespaced_config_map(namespace, cm("one"))
    cluster.core.create_namespaced_config_map(namespace, cm("two"))
    harness.informer.start()
    assert harness.informer.wait_for_sync(30)
    assert {f"{namespace}/one", f"{namespace}/two"} <= set(harness.store.keys())
    assert sorted(harness.recorder.seen(namespace)) == [("added", "one"), ("added", "two")]
    assert harness.lists() == 1


def test_add_update_delete_events(cluster: Cluster, namespace: str, harness: Harness) -> None:
    harness.informer.start()
    assert harness.informer.wait_for_sync(30)
    core = cluster.core
    core.create_namespaced_config_map(namespace, cm("x"))
    core.patch_namespaced_config_map("x", namespace, {"data": {"k": "v2"}})
    core.delete_namespaced_config_map("x", namespace)
    wait_for(lambda: harness.recorder.seen(namespace) == [
        ("added", "x"), ("updated", "x"), ("deleted", "x")], what="three events")
    assert harness.store.get(f"{namespace}/x") is None


def test_resumes_after_the_stream_ends_without_relisting(
        cluster: Cluster, namespace: str) -> None:
    h = Harness(cluster, min_watch_timeout=1)  # the server ends each watch after 1-2 s
    try:
        h.informer.start()
        assert h.informer.wait_for_sync(30)
        restarts_before = h.metric("configmirror_informer_watch_restarts_total")
        wait_for(lambda: h.metric("configmirror_informer_watch_restarts_total")
                 >= restarts_before + 2, timeout=15, what="two stream ends")
        cluster.core.create_namespaced_config_map(namespace, cm("after-resume"))
        wait_for(lambda: ("added", "after-resume") in h.recorder.seen(namespace),
                 what="the event after the resume")
        assert h.lists() == 1, "a stream that ends must be resumed, not relisted"
        assert h.metric("configmirror_informer_relists_total") == 1
    finally:
        h.close()


def test_relist_after_410_reports_deletions_made_in_the_gap(uncached_cluster: Cluster) -> None:
    from configmirror_testing.cluster import Namespaces

    plane = uncached_cluster.require_plane()
    namespaces = Namespaces(uncached_cluster, "gap")
    namespace = namespaces()
    core = uncached_cluster.core
    h = Harness(uncached_cluster)
    try:
        core.create_namespaced_config_map(namespace, cm("doomed"))
        core.create_namespaced_config_map(namespace, cm("kept"))
        h.informer.list_once()  # listed, not yet watching: everything after is "the gap"
        core.delete_namespaced_config_map("doomed", namespace)
        core.create_namespaced_config_map(namespace, cm("born"))
        core.patch_namespaced_config_map("kept", namespace, {"data": {"k": "changed"}})
        plane.compact()
        h.informer.start()  # watches from the compacted version: 410, then a relist
        wait_for(lambda: ("deleted", "doomed") in h.recorder.seen(namespace), timeout=20,
                 what="the delete from the gap")
        seen = h.recorder.seen(namespace)
        assert ("added", "born") in seen and ("updated", "kept") in seen
        deleted = [old for old, new in h.recorder.calls
                   if new is None and old is not None and old.name == "doomed"]
        assert deleted[0].namespace == namespace, "the tombstone is the last known object"
        assert h.lists() == 2
        assert h.store.get(f"{namespace}/doomed") is None
    finally:
        h.close()
        namespaces.cleanup()


def test_recovers_after_an_apiserver_restart(cluster: Cluster, namespace: str,
                                             harness: Harness) -> None:
    plane = cluster.require_plane()
    harness.informer.start()
    assert harness.informer.wait_for_sync(30)
    cluster.core.create_namespaced_config_map(namespace, cm("before"))
    wait_for(lambda: ("added", "before") in harness.recorder.seen(namespace), what="before")
    plane.restart_apiserver()
    cluster.core.create_namespaced_config_map(namespace, cm("after"))
    wait_for(lambda: ("added", "after") in harness.recorder.seen(namespace), timeout=30,
             what="the event after the restart")
    assert harness.recorder.seen(namespace).count(("added", "before")) == 1


def test_bookmarks_advance_the_resource_version(cluster: Cluster, namespace: str) -> None:
    """Writes to other kinds move etcd's revision; bookmarks carry it to a quiet watch."""
    h = Harness(cluster, min_watch_timeout=3)
    try:
        h.informer.start()
        assert h.informer.wait_for_sync(30)
        secret = cluster.core.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name="bump"), string_data={"a": "b"}))
        target = int(secret.metadata.resource_version)
        # A consistent LIST makes the apiserver ask etcd for progress, so the ConfigMap watch
        # cache learns the newer revision; its next bookmark (2 s before the watch's
        # deadline) carries it.
        cluster.core.list_config_map_for_all_namespaces(limit=1)
        wait_for(lambda: h.metric("configmirror_informer_events_total", type="BOOKMARK") > 0
                 and int(h.informer.resource_version) >= target, timeout=20,
                 what="a bookmark past the Secret's version")
        assert not h.recorder.seen(namespace), "a bookmark is not an object event"
    finally:
        h.close()



class Ours:
    """The owner's side of OwnWrites: it wrote `key` itself, once, and holds `held` for it."""

    def __init__(self, key: str, held: ConfigMap) -> None:
        self.key, self.held = key, held
        self._settled: list[tuple[str, ConfigMap]] = []
        self._lock = threading.Lock()

    def delivered(self, key: str, resource_version: str) -> ConfigMap | None:
        with self._lock:
            if key != self.key or self._settled:
                return None
            return replace(self.held, resource_version=resource_version)

    def settled(self, key: str, obj: ConfigMap) -> None:
        with self._lock:
            self._settled.append((key, obj))

    def settled_with(self) -> list[tuple[str, ConfigMap]]:
        with self._lock:
            return list(self._settled)


def test_our_own_write_is_stored_as_we_hold_it_and_tells_no_handler(
        cluster: Cluster, namespace: str, harness: Harness) -> None:
    """The watch event of a write of the owner's own is neither transformed nor handed to
    the handler; every other event (another object, a later version) is, as before."""
    key = f"{namespace}/mine"
    held = ConfigMap(namespace, "mine", "", "", "src/mine", False, "as we hold it",
                     compiled=None)
    ours = Ours(key, held)
    harness.informer.recognise(ours)
    harness.informer.start()
    assert harness.informer.wait_for_sync(30)
    core = cluster.core
    core.create_namespaced_config_map(namespace, cm("mine"))
    core.create_namespaced_config_map(namespace, cm("theirs"))
    wait_for(lambda: ("added", "theirs") in harness.recorder.seen(namespace),
             what="the other object's event")
    [(settled_key, stored)] = ours.settled_with()
    assert settled_key == key and harness.store.get(key) == stored
    assert stored.content_hash == "as we hold it" and stored.resource_version != ""
    assert harness.recorder.seen(namespace) == [("added", "theirs")], "no handler for ours"
    core.patch_namespaced_config_map("mine", namespace, {"data": {"k": "edited"}})
    wait_for(lambda: ("updated", "mine") in harness.recorder.seen(namespace),
             what="someone's edit of it, told")
    edited = harness.store.get(key)
    assert edited is not None and edited.content_hash != "as we hold it", "transformed"
