"""deploy/ against a real apiserver: valid manifests, RBAC that is enough and no wider, and
two operators with leader election. The replication suite runs with only deploy/'s
ServiceAccount token too (test_replication.py, flavour deploy-rbac)."""

from __future__ import annotations

from pathlib import Path

import pytest

from configmirror.spec import REPLICATE_TO
from configmirror_testing.cluster import REPO, Cluster, Namespaces
from configmirror_testing.e2e import Operators, configmap, read
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane
SA = "system:serviceaccount:configmirror:configmirror"


@pytest.fixture(scope="module")
def deployed(deploy_applied: Cluster) -> Cluster:
    return deploy_applied


@pytest.fixture(scope="module")
def sa_kubeconfig(deploy_sa_kubeconfig: Path) -> Path:
    return deploy_sa_kubeconfig


def test_manifests_pass_server_side_dry_run(cluster: Cluster) -> None:
    plane = cluster.require_plane()
    # A server-side dry run cannot see a namespace that the same dry run would create.
    plane.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
    done = plane.kubectl("apply", "--dry-run=server", "-k", str(REPO / "deploy"))
    for kind in ("namespace/configmirror", "serviceaccount/configmirror",
                 "clusterrole.rbac.authorization.k8s.io/configmirror",
                 "deployment.apps/configmirror", "poddisruptionbudget.policy/configmirror",
                 "service/configmirror-metrics"):
        assert kind in done.stdout


@pytest.mark.parametrize(("verb", "resource", "namespace", "allowed"), [
    ("list", "configmaps", None, True),
    ("watch", "configmaps", None, True),
    ("create", "configmaps", "default", True),
    ("update", "configmaps", "default", True),
    ("delete", "configmaps", "default", True),
    ("patch", "configmaps", "default", True),  # releasing a replica (on-delete: retain)
    ("list", "namespaces", None, True),
    ("create", "events", "default", True),
    ("patch", "events", "default", True),
    ("create", "leases.coordination.k8s.io", "configmirror", True),
    ("update", "leases.coordination.k8s.io", "configmirror", True),
    # Not wider than needed:
    ("get", "secrets", "default", False),
    ("list", "secrets", None, False),
    ("delete", "namespaces", None, False),
    ("create", "namespaces", None, False),
    ("deletecollection", "configmaps", "default", False),
    ("get", "configmaps", "default", False),
    ("create", "leases.coordination.k8s.io", "default", False),
    ("delete", "events", "default", False),
])
def test_service_account_may_do_exactly_what_configmirror_does(
        deployed: Cluster, sa_kubeconfig: Path, verb: str, resource: str,
        namespace: str | None, allowed: bool) -> None:
    scope = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    done = deployed.require_plane().kubectl("auth", "can-i", verb, resource, *scope,
                                            kubeconfig=sa_kubeconfig, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stdout + done.stderr


def test_two_operators_one_writes_and_the_other_takes_over(
        deployed: Cluster, sa_kubeconfig: Path, namespaces: Namespaces,
        operators: Operators) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    flags = ("--leader-elect", "--leader-election-namespace", "configmirror",
             "--leader-election-id", f"configmirror-{src}")
    first = operators(*flags, kubeconfig=sa_kubeconfig)
    wait_for(lambda: first.metric("configmirror_leader") == 1, what="the first to lead")
    second = operators(*flags, kubeconfig=sa_kubeconfig)  # ready: caches warm, not leading
    deployed.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: f"{a},{b}"},
                                                              data={"v": "1"}))
    wait_for(lambda: read(deployed, a, "cfg") and read(deployed, b, "cfg"), what="replicas")
    assert second.metric("configmirror_leader") == 0
    # The server stores a replica a moment before its writer counts it: wait for the count.
    wait_for(lambda: first.writes() == 2, timeout=10, what="the leader to count its writes")
    assert second.writes() == 0, "exactly one operator writes"

    assert first.stop() == 0  # SIGTERM: drains, releases the lease
    wait_for(lambda: second.metric("configmirror_leader") == 1, timeout=15,
             what="the standby to take over within the lease duration")
    deployed.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    for ns in (a, b):
        wait_for(lambda ns=ns: (read(deployed, ns, "cfg").data or {}) == {"v": "2"},  # type: ignore[union-attr]
                 what=f"the new leader to update {ns}")
    wait_for(lambda: second.writes() == 2, timeout=10, what="the new leader's two writes")
