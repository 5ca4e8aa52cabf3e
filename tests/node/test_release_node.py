"""The release installed the two ways the README gives, on a kind node that pulls the image from
the registry (`make cluster-test`): nothing is side-loaded.

`make release` publishes into a registry on 127.0.0.1 (the session's `release`); the node
(tests/fixtures.py `cluster_pulling_from`, the one thing asked of the node tier) holds no
image of ours until its containerd pulls the index's linux/amd64 image for the first pod.
Then, one after the other on the same cluster: `helm install configmirror oci://...` and
`kubectl apply -f dist/install.yaml`, each rolled out (2 Ready pods, one leader), each passing
the replication suite against the deployed operator, each removed again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from configmirror_testing.cluster import REPO, Cluster
from configmirror_testing.deployed import DeployedOperator
from configmirror_testing.e2e import cluster_pulling_from, run_test_module
from configmirror_testing.helm import Helm
from configmirror_testing.release import Release
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.node, pytest.mark.release, pytest.mark.timeout(3600)]
NAMESPACE = RELEASE = "configmirror"


@pytest.fixture(scope="module")
def cluster(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with cluster_pulling_from(release.registry.address,
                              tmp_path_factory.mktemp("node-logs")) as pulling:
        yield pulling


def node_images(cluster: Cluster) -> list[str]:
    assert cluster.node is not None
    return cluster.node.images()


def ours(cluster: Cluster, release: Release) -> list[str]:
    return [i for i in node_images(cluster) if i.startswith(release.image)]


def pulled_events(cluster: Cluster, release: Release) -> list[str]:
    """The kubelet's `Pulled` events for the release's image, in the operator's namespace."""
    found = cluster.core.list_namespaced_event(NAMESPACE, field_selector="reason=Pulled").items
    return [e.message for e in found if release.image in (e.message or "")]


def assert_runs_the_released_image(cluster: Cluster, operator: DeployedOperator,
                                   release: Release, reference: str) -> None:
    """Both pods run `reference`, and the image the kubelet reports is the release's index,
    which the node's containerd holds under the registry's name."""
    index = release.digest()
    for pod in operator.pods():
        [status] = cluster.core.read_namespaced_pod(
            pod["metadata"]["name"], NAMESPACE).status.container_statuses
        assert pod["spec"]["containers"][0]["image"] == reference
        assert status.image_id == f"{release.image}@{index}", status.image_id
    assert f"{release.image}@{index}" in node_images(cluster), node_images(cluster)


def run_replication_suite(cluster: Cluster, what: str) -> None:
    """The replication suite against the release as installed, with the 60 s grace it ships:
    not the tests that wait that grace out (a minute each; make kind-test runs them against
    deploy/, test_cluster_helm.py against the chart with a short grace)."""
    summary = run_test_module(REPO / "tests" / "integration" / "test_replication.py", {
        "CONFIGMIRROR_E2E_KUBECONFIG": str(cluster.kubeconfig),
        "CONFIGMIRROR_E2E_OPERATOR": "in-cluster"}, "-m", "not grace")
    print(f"test_replication.py against {what}: {summary}")


def wait_namespace_gone(cluster: Cluster) -> None:
    def gone() -> bool:
        try:
            cluster.core.read_namespace(NAMESPACE)
        except client.ApiException as err:
            return err.status == 404
        return False
    wait_for(gone, 180, f"namespace {NAMESPACE} to be deleted")


def test_the_node_holds_no_image_of_ours_before_anything_is_installed(
        cluster: Cluster, release: Release) -> None:
    # Only the cluster's own images, which the node image carries under registry.k8s.io names
    # (and, as `ctr images import --digests` leaves them, under import-DATE@DIGEST aliases of
    # those same digests).
    assert ours(cluster, release) == []
    assert cluster.node is not None
    digests = cluster.node.image_digests()
    own = {digest for ref, digest in digests.items() if ref.startswith("registry.k8s.io/")}
    others = [ref for ref, digest in digests.items()
              if not ref.startswith(("registry.k8s.io/", "sha256:")) and digest not in own]
    assert own and others == [], digests


def test_helm_install_from_oci_pulls_the_image_and_rolls_out_two_ready_pods_that_replicate(
        cluster: Cluster, release: Release, helm: Helm) -> None:
    # The namespace the README makes first: never a target, restricted Pod Security.
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=NAMESPACE, labels={"configmirror.io/ignore": "true",
                                "pod-security.kubernetes.io/enforce": "restricted"})))
    operator = DeployedOperator(cluster.api_client, NAMESPACE, RELEASE)
    try:
        helm("install", RELEASE, release.chart, "--version", release.version, "--plain-http",
             "--namespace", NAMESPACE, "--wait", "--timeout=10m",
             kubeconfig=cluster.kubeconfig, timeout=630)
        rollout = operator.wait_rollout()
        assert len(rollout.pods) == 2
        assert_runs_the_released_image(cluster, operator, release,
                                       f"{release.image}:{release.version}")
        assert pulled_events(cluster, release), "the kubelet pulled nothing"
        run_replication_suite(cluster, "the chart from oci://")
    finally:
        helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout=5m",
             kubeconfig=cluster.kubeconfig, timeout=330, check=False)
        cluster.core.delete_namespace(NAMESPACE)
        wait_namespace_gone(cluster)


def test_kubectl_apply_of_install_yaml_rolls_out_two_ready_pods_that_replicate(
        cluster: Cluster, release: Release) -> None:
    node = cluster.node
    assert node is not None
    install: Path = release.install_yaml
    operator = DeployedOperator(cluster.api_client, NAMESPACE, "configmirror")
    try:
        node.kubectl("apply", "-f", str(install))
        rollout = operator.wait_rollout(timeout=600)
        assert len(rollout.pods) == 2
        assert_runs_the_released_image(cluster, operator, release,
                                       f"{release.image}@{release.digest()}")
        run_replication_suite(cluster, "install.yaml")
    finally:
        node.kubectl("delete", "-f", str(install), "--wait=true", "--timeout=180s",
                     "--ignore-not-found", check=False)
