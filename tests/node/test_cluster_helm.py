"""charts/configmirror on a real node, in kind (`make cluster-test`): `helm install` with the
image built from this tree (configmirror_testing.nodeinstalls.ChartRelease, as the operator
flavour `kind-chart`), the replication suite against that release (as
tests/integration/test_replication.py's tests `[kind-chart]`), then here `helm upgrade`
changing a value, and `helm uninstall` leaving nothing cluster-wide.

The release is named as the README installs it (`configmirror` in namespace `configmirror`),
into a namespace made beforehand the way the README says: never a target, and on the
`restricted` Pod Security level, like deploy/'s own.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import Flavour, configmap, wait_replica
from configmirror_testing.helm import cluster_scoped_objects, release_objects
from configmirror_testing.nodeinstalls import NAMESPACE, RELEASE, ChartRelease
from configmirror_testing.wait import WaitTimeout, wait_for

# The chart installed (tests/fixtures.py `flavour`), shared with
# test_replication.py[kind-chart]; uninstalled by the last test here, else once they are done.
pytestmark = [pytest.mark.node, pytest.mark.timeout(1800),
              pytest.mark.parametrize("flavour", ["kind-chart"], indirect=True)]


@pytest.fixture
def cluster(flavour: Flavour) -> Cluster:
    return flavour.cluster


@pytest.fixture
def chart(flavour: Flavour) -> ChartRelease:
    """The chart installed as release `configmirror`, and what the cluster held before."""
    assert isinstance(flavour.install, ChartRelease), flavour
    return flavour.install


def test_helm_install_rolls_out_two_ready_pods_one_leader(chart: ChartRelease) -> None:
    rollout = chart.operator.wait_rollout()
    assert len(rollout.pods) == 2
    assert chart.operator.leader() == rollout.leader


def test_the_delete_grace_given_reaches_the_pods_args(chart: ChartRelease) -> None:
    chart.operator.wait_rollout()
    pods = chart.operator.pods()
    assert pods and all("--delete-grace=2s" in p["spec"]["containers"][0]["args"]
                        for p in pods), [p["spec"]["containers"][0]["args"] for p in pods]


def test_helm_upgrade_rolls_the_pods_with_the_new_args_and_they_still_replicate(
        cluster: Cluster, chart: ChartRelease, namespaces: Namespaces) -> None:
    before = chart.operator.wait_rollout()
    assert not any("--workers=8" in p["spec"]["containers"][0]["args"]
                   for p in chart.operator.pods())
    started = time.monotonic()
    chart.upgrade("--set", "workers=8")
    after = chart.operator.wait_rollout(args=lambda args: "--workers=8" in args)
    print(f"helm upgrade rolled both pods in {time.monotonic() - started:.1f} s")
    assert not set(before.pods) & set(after.pods), "every pod was replaced"
    # The new pods run with it: the leader says how many workers it started.
    wait_for(lambda: "started 8 workers" in chart.operator.log(after.leader), 30,
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
        cluster: Cluster, chart: ChartRelease) -> None:
    admin = chart.admin
    added = cluster_scoped_objects(admin) - chart.before
    assert {f"clusterrole.rbac.authorization.k8s.io/{RELEASE}",
            f"clusterrolebinding.rbac.authorization.k8s.io/{RELEASE}"} <= added, added
    chart.uninstall()
    # Namespaces the tests before made may still be going (the namespace controller empties
    # them); everything the release made must go with it.
    with contextlib.suppress(WaitTimeout):  # the assertions below say what is left
        wait_for(lambda: not cluster_scoped_objects(admin) - chart.before
                 and not release_objects(admin, RELEASE), timeout=120, what="uninstall")
    assert cluster_scoped_objects(admin) - chart.before == set(), "cluster-scoped leftovers"
    assert release_objects(admin, RELEASE) == set(), "leftovers in the release's namespace"
    assert cluster.core.list_namespaced_secret(NAMESPACE).items == [], "a release record left"
    # The garbage collector removes the pods of the deleted ReplicaSet.
    wait_for(lambda: not cluster.core.list_namespaced_pod(
        NAMESPACE, label_selector=f"app.kubernetes.io/instance={RELEASE}").items, 120,
        "the release's pods to be gone")
