"""deploy/ on a real node (`make cluster-test`): its pods run under a kubelet, and the
controllers do what they do in any cluster.

A kind cluster (configmirror_testing.kind) runs the image built from this tree. deploy/ is
applied unchanged but for the image (configmirror_testing.nodeinstalls.DeployOverlay, as the
operator flavour `kind-deploy`): the replication suite runs against it as
tests/integration/test_replication.py's tests `[kind-deploy]`, and then, here: the leader pod
deleted, an eviction against the PodDisruptionBudget, and a target namespace deleted by the
real namespace controller.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.deployed import DeployedOperator
from configmirror_testing.e2e import Flavour, configmap, read, wait_replica
from configmirror_testing.nodeinstalls import NAMESPACE
from configmirror_testing.wait import WaitTimeout, wait_for

# deploy/ installed (tests/fixtures.py `flavour`), shared with test_replication.py[kind-deploy].
pytestmark = [pytest.mark.node, pytest.mark.timeout(1800),
              pytest.mark.parametrize("flavour", ["kind-deploy"], indirect=True)]
SOURCE_ALLOWED = {"configmirror.io/source": "true"}  # deploy/'s --source-namespace-selector


@pytest.fixture
def cluster(flavour: Flavour) -> Cluster:
    return flavour.cluster


@pytest.fixture
def deployed(flavour: Flavour) -> DeployedOperator:
    """deploy/ applied and rolled out; deleted (and waited for) once this flavour's tests are
    done."""
    assert flavour.install is not None
    return flavour.install.operator


def test_rolls_out_two_ready_pods_one_leader_on_the_restricted_pod_security_level(
        cluster: Cluster, deployed: DeployedOperator, image: str) -> None:
    rollout = deployed.wait_rollout()  # the flavour waited for it (up to 600 s) before
    assert len(rollout.pods) == 2
    namespace = cluster.core.read_namespace(NAMESPACE)
    assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for name in rollout.pods:
        pod = cluster.core.read_namespaced_pod(name, NAMESPACE)
        [status] = pod.status.container_statuses
        assert status.ready and status.restart_count == 0, status
        assert status.image.endswith(image.rpartition("/")[2]), (status.image, image)
        # The kubelet mounted the ServiceAccount's projected token (ServiceAccount admission).
        assert any(v.projected and v.name.startswith("kube-api-access-")
                   for v in pod.spec.volumes), pod.spec.volumes


def test_deleting_the_leader_pod_hands_over_with_no_replica_lost(
        cluster: Cluster, deployed: DeployedOperator, namespaces: Namespaces) -> None:
    before = deployed.wait_rollout()
    src = namespaces(labels=SOURCE_ALLOWED)
    targets = [namespaces() for _ in range(3)]
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: ",".join(targets)}, data={"v": "1"}))
    uids = {ns: wait_replica(cluster, ns, {"v": "1"}, timeout=30).metadata.uid for ns in targets}
    standby = next(p for p in before.pods if p != before.leader)

    started = time.monotonic()
    cluster.core.delete_namespaced_pod(before.leader, NAMESPACE)  # SIGTERM, grace period
    # The leader releases the Lease as it stops. Usually the standby takes it, but the pod the
    # ReplicaSet starts in place of the deleted one competes for it too, and may win the race:
    # a hand-over is any other pod leading.
    holders: list[str | None] = []

    def handed_over() -> str | None:
        holders.append(deployed.leader())
        return holders[-1] if holders[-1] not in (None, before.leader) else None

    try:
        successor = wait_for(handed_over, 40, f"a pod other than {before.leader} to lead")
    except WaitTimeout as err:
        raise WaitTimeout(f"{err}; holders seen: {list(dict.fromkeys(holders))}") from None
    print(f"{successor} ({'the standby' if successor == standby else 'the new pod'}) took over "
          f"{time.monotonic() - started:.1f} s after the leader's deletion")
    # Nothing was deleted and made again: every replica is the same object, unchanged.
    for ns, uid in uids.items():
        replica = read(cluster, ns, "cfg")
        assert replica is not None and replica.metadata.uid == uid, f"replica in {ns} lost"
        assert replica.data == {"v": "1"}
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    for ns, uid in uids.items():
        assert wait_replica(cluster, ns, {"v": "2"}, timeout=30).metadata.uid == uid
    after = deployed.wait_rollout()
    assert after.leader == successor and before.leader not in after.pods


def test_eviction_honours_the_pod_disruption_budget(
        cluster: Cluster, deployed: DeployedOperator) -> None:
    policy = client.PolicyV1Api(cluster.api_client)
    before = deployed.wait_rollout()
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget(
        "configmirror", NAMESPACE).status.disruptions_allowed == 1, 60,
        "the PodDisruptionBudget to allow one disruption")
    standby = next(p for p in before.pods if p != before.leader)

    evict(cluster, standby)  # 201: one pod may be unavailable
    with pytest.raises(client.ApiException) as refused:
        evict(cluster, before.leader)  # while the first one is: refused
    assert refused.value.status == 429, refused.value
    assert "disruption budget" in str(refused.value.body), refused.value.body
    leader = cluster.core.read_namespaced_pod(before.leader, NAMESPACE)
    assert leader.metadata.deletion_timestamp is None, "the refused eviction deleted the pod"

    after = deployed.wait_rollout()  # the ReplicaSet replaced the evicted pod
    assert after.leader == before.leader and standby not in after.pods


def test_a_deleted_target_namespace_is_removed_by_the_namespace_controller(
        cluster: Cluster, deployed: DeployedOperator, namespaces: Namespaces) -> None:
    deployed.wait_rollout()
    src, kept, doomed = namespaces(labels=SOURCE_ALLOWED), namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: f"{kept},{doomed}"}, data={"v": "1"}))
    wait_replica(cluster, kept, {"v": "1"}, timeout=30)
    wait_replica(cluster, doomed, {"v": "1"}, timeout=30)

    started = time.monotonic()
    cluster.core.delete_namespace(doomed)  # and nothing else: no finalizing by hand
    wait_for(lambda: not namespace_exists(cluster, doomed), 120,
             f"the namespace controller to remove {doomed}", interval=0.5)
    print(f"{doomed} was removed {time.monotonic() - started:.1f} s after its deletion")
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    wait_replica(cluster, kept, {"v": "2"}, timeout=30)
    # The name is free again (on a control plane alone it would stay Terminating), and the
    # operator fills the new namespace.
    namespaces(name=doomed)
    wait_replica(cluster, doomed, {"v": "2"}, timeout=30)


# -- helpers ------------------------------------------------------------------------------------

def evict(cluster: Cluster, pod: str) -> None:
    cluster.core.create_namespaced_pod_eviction(pod, NAMESPACE, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod, namespace=NAMESPACE)))


def namespace_exists(cluster: Cluster, name: str) -> bool:
    try:
        cluster.core.read_namespace(name)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True
