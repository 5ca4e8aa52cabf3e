"""charts/configmirror on a real node, in kind (`make cluster-test`): `helm install` with the
image built from this tree, the replication suite against that release, `helm upgrade`
changing a value, and `helm uninstall` leaving nothing cluster-wide.

The release is named as the README installs it (`configmirror` in namespace `configmirror`),
into a namespace made beforehand the way the README says: never a target, and on the
`restricted` Pod Security level, like deploy/'s own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from configmirror.spec import REPLICATE_TO
from configmirror_testing.cluster import REPO, Cluster, Namespaces
from configmirror_testing.deployed import DeployedOperator
from configmirror_testing.e2e import configmap, run_test_module, wait_replica
from configmirror_testing.helm import Helm, cluster_scoped_objects, release_objects
from configmirror_testing.wait import WaitTimeout, wait_for

pytestmark = [pytest.mark.node, pytest.mark.timeout(1800)]
CHART = REPO / "charts" / "configmirror"
RELEASE = NAMESPACE = "configmirror"


@pytest.fixture(scope="module")
def cluster(node_cluster: Cluster) -> Cluster:
    return node_cluster


class Release:
    """The chart installed as release `configmirror`, and what the cluster held before."""

    def __init__(self, cluster: Cluster, helm: Helm, image: str) -> None:
        self.cluster = cluster
        self.helm = helm
        assert cluster.node is not None
        self.admin = cluster.node  # kubectl as admin
        repository, _, tag = image.rpartition(":")
        self.image_values = ["--set", f"image.repository={repository}",
                             "--set-string", f"image.tag={tag}",
                             "--set", "image.pullPolicy=IfNotPresent",
                             # A grace of 2 s, not the 60 s the chart ships (kind-test runs the
                             # suite on that, with deploy/): the replication suite here also
                             # runs its removals, and the value reaches the pods' args.
                             "--set", "deleteGrace=2s"]
        self.operator = DeployedOperator(cluster.api_client, NAMESPACE, RELEASE)
        self.before: set[str] = set()
        self.installed = False

    def install(self) -> None:
        self.before = cluster_scoped_objects(self.admin)
        self.helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, *self.image_values,
                  "--wait", "--timeout=5m", kubeconfig=self.cluster.kubeconfig, timeout=330)
        self.installed = True

    def upgrade(self, *values: str) -> None:
        self.helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
                  *values, "--wait", "--timeout=5m", kubeconfig=self.cluster.kubeconfig,
                  timeout=330)

    def uninstall(self) -> None:
        self.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout=5m",
                  kubeconfig=self.cluster.kubeconfig, timeout=330)
        self.installed = False


@pytest.fixture(scope="module")
def release(cluster: Cluster, helm: Helm, image: str) -> Iterator[Release]:
    """The chart installed (uninstalled after the module if a test did not)."""
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=NAMESPACE, labels={"configmirror.io/ignore": "true",
                                "pod-security.kubernetes.io/enforce": "restricted"})))
    installed = Release(cluster, helm, image)
    try:
        installed.install()
        yield installed
    finally:
        if installed.installed:
            installed.uninstall()
        cluster.core.delete_namespace(NAMESPACE)


def test_helm_install_rolls_out_two_ready_pods_one_leader(release: Release) -> None:
    rollout = release.operator.wait_rollout()
    assert len(rollout.pods) == 2
    assert release.operator.leader() == rollout.leader


def test_replication_suite_passes_against_the_helm_release(
        cluster: Cluster, release: Release) -> None:
    release.operator.wait_rollout()
    assert all("--delete-grace=2s" in p["spec"]["containers"][0]["args"]
               for p in release.operator.pods())
    summary = run_test_module(REPO / "tests" / "integration" / "test_replication.py", {
        "CONFIGMIRROR_E2E_KUBECONFIG": str(cluster.kubeconfig),
        "CONFIGMIRROR_E2E_OPERATOR": "in-cluster"})
    print(f"test_replication.py against the Helm release: {summary}")


def test_helm_upgrade_rolls_the_pods_with_the_new_args_and_they_still_replicate(
        cluster: Cluster, release: Release, namespaces: Namespaces) -> None:
    before = release.operator.wait_rollout()
    assert not any("--workers=8" in p["spec"]["containers"][0]["args"]
                   for p in release.operator.pods())
    started = time.monotonic()
    release.upgrade("--set", "workers=8")
    after = release.operator.wait_rollout(args=lambda args: "--workers=8" in args)
    print(f"helm upgrade rolled both pods in {time.monotonic() - started:.1f} s")
    assert not set(before.pods) & set(after.pods), "every pod was replaced"
    # The new pods run with it: the leader says how many workers it started.
    wait_for(lambda: "started 8 workers" in release.operator.log(after.leader), 30,
             "the new leader to start 8 workers")

    src = namespaces(labels={"configmirror.io/source": "true"})
    a, b = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: f"{a},{b}"},
                                                             data={"v": "1"}))
    for ns in (a, b):
        wait_replica(cluster, ns, {"v": "1"}, timeout=30)
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    for ns in (a, b):
        wait_replica(cluster, ns, {"v": "2"}, timeout=30)


def test_helm_uninstall_leaves_no_cluster_scoped_objects(
        cluster: Cluster, release: Release) -> None:
    admin = release.admin
    added = cluster_scoped_objects(admin) - release.before
    assert {f"clusterrole.rbac.authorization.k8s.io/{RELEASE}",
            f"clusterrolebinding.rbac.authorization.k8s.io/{RELEASE}"} <= added, added
    release.uninstall()
    # Namespaces the tests before made may still be going (the namespace controller empties
    # them); everything the release made must go with it.
    with contextlib.suppress(WaitTimeout):  # the assertions below say what is left
        wait_for(lambda: not cluster_scoped_objects(admin) - release.before
                 and not release_objects(admin, RELEASE), timeout=120, what="uninstall")
    assert cluster_scoped_objects(admin) - release.before == set(), "cluster-scoped leftovers"
    assert release_objects(admin, RELEASE) == set(), "leftovers in the release's namespace"
    assert cluster.core.list_namespaced_secret(NAMESPACE).items == [], "a release record left"
    # The garbage collector removes the pods of the deleted ReplicaSet.
    wait_for(lambda: not cluster.core.list_namespaced_pod(
        NAMESPACE, label_selector=f"app.kubernetes.io/instance={RELEASE}").items, 120,
        "the release's pods to be gone")
