"""deploy/ against a real apiserver: valid manifests, RBAC that is enough and no wider, two
operators with leader election, and the commands judging with the deployed operator's policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from configmirror.spec import REPLICATE_TO
from configmirror_testing.wait import wait_for
from tests.conftest import REPO, Cluster, Namespaces
from tests.e2e.conftest import Operators, configmap, events, read, run_test_module

pytestmark = pytest.mark.controlplane
SA = "system:serviceaccount:configmirror:configmirror"


@pytest.fixture(scope="module")
def deployed(cluster: Cluster) -> Cluster:
    """deploy/ applied for real (no kubelet here, so its pods never run; its RBAC is real)."""
    plane = cluster.require_plane()
    plane.kubectl("apply", "-k", str(REPO / "deploy"))
    return cluster


@pytest.fixture(scope="module")
def sa_kubeconfig(deployed: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig holding only a TokenRequest token of deploy/'s ServiceAccount."""
    return deployed.token_kubeconfig("configmirror", "configmirror",
                                     tmp_path_factory.mktemp("sa") / "kubeconfig")


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


def test_replication_suite_passes_with_only_the_service_account_token(
        deployed: Cluster, sa_kubeconfig: Path) -> None:
    """The whole replication end-to-end module, with the operator using deploy/'s RBAC."""
    run_test_module(REPO / "tests" / "e2e" / "test_replication.py", {
        "CONFIGMIRROR_E2E_KUBECONFIG": str(deployed.kubeconfig),
        "CONFIGMIRROR_E2E_OPERATOR_KUBECONFIG": str(sa_kubeconfig)}, timeout=900)


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


def deployment_args() -> list[str]:
    """deploy/deployment.yaml's flags for `run`, less the ports (the test's process has its own)."""
    (container,) = yaml.safe_load((REPO / "deploy" / "deployment.yaml").read_text())[
        "spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "run"
    return [a for a in container["args"][1:] if "-bind-address=" not in a]


def status(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "configmirror", "status", *args, "--kubeconfig",
                           str(cluster.kubeconfig), "-o", "json"],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.operator_process
def test_status_without_flags_judges_with_the_deployed_operators_policy(
        deployed: Cluster, sa_kubeconfig: Path, namespaces: Namespaces,
        operators: Operators) -> None:
    """deploy/'s operator honours sources only in namespaces labelled configmirror.io/source=
    true; `status` with no policy flag of its own says the same of a source elsewhere."""
    args = deployment_args()
    assert {"--leader-elect", "--source-namespace-selector=configmirror.io/source=true",
            "--delete-grace=60s"} <= set(args), args
    # As the Deployment runs: its namespace from the downward API, deploy/'s RBAC only.
    op = operators(*args, kubeconfig=sa_kubeconfig,
                   env={"CONFIGMIRROR_LEADER_ELECTION_NAMESPACE": "configmirror"})
    wait_for(lambda: op.metric("configmirror_leader") == 1, what="the operator to lead")
    policy = wait_for(lambda: read(deployed, "configmirror", "configmirror-policy"),
                      what="the leader to publish its policy")
    assert policy.metadata.labels["configmirror.io/policy"] == "true"
    assert (policy.data["source-namespace-selector"], policy.data["delete-grace"]) == (
        "configmirror.io/source=true", "60s")
    unlabelled, target = namespaces(labels={}), namespaces()
    deployed.core.create_namespaced_config_map(unlabelled, configmap(
        "cfg", {REPLICATE_TO: target}, data={"v": "1"}))
    wait_for(lambda: events(deployed, unlabelled, "cfg", "SourceNotAllowed"),
             what="the operator to refuse the source")
    assert read(deployed, target, "cfg") is None

    done = status(deployed, f"{unlabelled}/cfg")
    assert done.returncode == 0, done.stderr
    (said,) = done.stderr.splitlines()
    assert said.startswith("configmirror: following the operator in namespace configmirror ("), said
    (source,) = json.loads(done.stdout)["sources"]
    assert [p["type"] for p in source["problems"]] == ["not_allowed"], source
    assert "configmirror.io/source=true" in source["problems"][0]["message"], source
    assert source["pending"] == [], "the command would create what the operator refuses"

    # A flag on the command line still overrides the operator's policy, and says so.
    done = status(deployed, f"{unlabelled}/cfg", "--source-namespace-selector=")
    (source,) = json.loads(done.stdout)["sources"]
    assert [(p["action"], p["namespace"]) for p in source["pending"]] == [("create", target)]
    assert done.stderr.splitlines()[1:] == [
        "configmirror: warning: --source-namespace-selector='' overrides the operator's "
        "configmirror.io/source=true"], done.stderr

    # Stopped, the operator takes its policy back: the commands find no operator.
    assert op.stop() == 0
    with pytest.raises(client.ApiException) as gone:
        deployed.core.read_namespaced_config_map("configmirror-policy", "configmirror")
    assert gone.value.status == 404
    done = status(deployed, f"{unlabelled}/cfg")
    assert done.stderr.startswith("configmirror: no running operator found"), done.stderr
