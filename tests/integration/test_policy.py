"""The leader's published policy on a real API server: written once, re-asserted without a
write while unchanged, restored after a hand deletion, and withdrawn only in the version it
wrote (a new leader's is never taken away)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from configmirror.client.kube import Kube, load_configuration
from configmirror.operator.policy import Publisher, find, judge_with
from configmirror.operator.settings import Settings
from configmirror_testing.cluster import Cluster
from configmirror_testing.e2e import read

pytestmark = pytest.mark.controlplane
SETTINGS = Settings(source_namespace_selector="team=platform", delete_grace=30.0,
                    leader_elect=True, leader_election_id="mirror")


@pytest.fixture
def kube(cluster: Cluster) -> Iterator[Kube]:
    kube = Kube(load_configuration(str(cluster.kubeconfig)))
    yield kube
    kube.close()


def test_an_unchanged_policy_is_re_asserted_without_a_write(
        cluster: Cluster, namespace: str, kube: Kube) -> None:
    publisher = Publisher(kube, SETTINGS, namespace, "leader-1")
    publisher.publish()
    first = read(cluster, namespace, "mirror-policy")
    assert first is not None and first.data["delete-grace"] == "30s"
    publisher.publish()
    again = read(cluster, namespace, "mirror-policy")
    assert again is not None
    assert again.metadata.resource_version == first.metadata.resource_version


def test_a_policy_deleted_by_hand_is_published_again(
        cluster: Cluster, namespace: str, kube: Kube) -> None:
    publisher = Publisher(kube, SETTINGS, namespace, "leader-1")
    publisher.publish()
    cluster.core.delete_namespaced_config_map("mirror-policy", namespace)
    publisher.publish()
    assert read(cluster, namespace, "mirror-policy") is not None


def test_the_commands_find_and_follow_what_the_leader_published(
        namespace: str, kube: Kube) -> None:
    Publisher(kube, SETTINGS, namespace, "leader-1").publish()
    found = find(kube, namespace)
    assert [(p.namespace, p.name, p.by) for p in found] == [(namespace, "mirror-policy",
                                                             "leader-1")]
    settings, _ = judge_with(found, Settings(), {})
    assert (settings.source_namespace_selector, settings.delete_grace) == ("team=platform", 30.0)


def test_stopping_withdraws_only_the_version_it_wrote(
        cluster: Cluster, namespace: str, kube: Kube) -> None:
    old, new = (Publisher(kube, SETTINGS, namespace, who) for who in ("old", "new"))
    old.publish()
    new.publish()  # a new leader's, written before the old one got to stop
    old.stop()
    left = read(cluster, namespace, "mirror-policy")
    assert left is not None and left.metadata.annotations["configmirror.io/published-by"] == "new"
    new.stop()
    with pytest.raises(client.ApiException) as gone:
        cluster.core.read_namespaced_config_map("mirror-policy", namespace)
    assert gone.value.status == 404
