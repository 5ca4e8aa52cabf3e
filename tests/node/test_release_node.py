"""The release installed the two ways the README gives, on a kind node that pulls the image from
the registry (`make cluster-test`): nothing is side-loaded.

`make release` publishes into a registry on 127.0.0.1 (the session's `release`); the node
(tests/fixtures.py `release_node`: configmirror_testing.e2e.cluster_pulling_from, the one thing
asked of the node tier) holds no image of ours until its containerd pulls the index's
linux/amd64 image for the first pod. Then, one after the other on the same cluster (the
operator flavours `kind-release-oci` and `kind-release-yaml`, configmirror_testing.nodeinstalls):
`helm install configmirror oci://...` and `kubectl apply -f dist/install.yaml`, each rolled out
(2 Ready pods, one leader, the release's image), each passing the replication suite against the
deployed operator (tests/integration/test_replication.py's tests `[kind-release-oci]` and
`[kind-release-yaml]`), each removed again.
"""

from __future__ import annotations

import pytest

from configmirror_testing.cluster import Cluster
from configmirror_testing.deployed import DeployedOperator
from configmirror_testing.e2e import Flavour, PullingNode
from configmirror_testing.nodeinstalls import NAMESPACE
from configmirror_testing.release import Release

pytestmark = [pytest.mark.node, pytest.mark.release, pytest.mark.timeout(3600)]


@pytest.fixture
def cluster(flavour: Flavour) -> Cluster:
    return flavour.cluster


@pytest.fixture
def deployed(flavour: Flavour) -> DeployedOperator:
    """The flavour's install, rolled out; removed again once its tests are done."""
    assert flavour.install is not None
    return flavour.install.operator


def node_images(cluster: Cluster) -> list[str]:
    assert cluster.node is not None
    return cluster.node.images()


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


def test_the_node_holds_no_image_of_ours_before_anything_is_installed(
        release_node: PullingNode, release: Release) -> None:
    # What the node held as it came up (PullingNode): only the cluster's own images, which the
    # node image carries under registry.k8s.io names (and, as `ctr images import --digests`
    # leaves them, under import-DATE@DIGEST aliases of those same digests).
    assert [i for i in release_node.images if i.startswith(release.image)] == []
    digests = release_node.digests
    own = {digest for ref, digest in digests.items() if ref.startswith("registry.k8s.io/")}
    others = [ref for ref, digest in digests.items()
              if not ref.startswith(("registry.k8s.io/", "sha256:")) and digest not in own]
    assert own and others == [], digests


@pytest.mark.parametrize("flavour", ["kind-release-oci"], indirect=True)
def test_helm_install_from_oci_pulls_the_image_and_rolls_out_two_ready_pods(
        cluster: Cluster, deployed: DeployedOperator, release: Release) -> None:
    rollout = deployed.wait_rollout()
    assert len(rollout.pods) == 2
    assert_runs_the_released_image(cluster, deployed, release,
                                   f"{release.image}:{release.version}")
    assert pulled_events(cluster, release), "the kubelet pulled nothing"


@pytest.mark.parametrize("flavour", ["kind-release-yaml"], indirect=True)
def test_kubectl_apply_of_install_yaml_rolls_out_two_ready_pods(
        cluster: Cluster, deployed: DeployedOperator, release: Release) -> None:
    rollout = deployed.wait_rollout(timeout=600)
    assert len(rollout.pods) == 2
    assert_runs_the_released_image(cluster, deployed, release,
                                   f"{release.image}@{release.digest()}")
