"""deploy/ against a real apiserver: valid manifests, RBAC that is enough and no wider, two
operators with leader election, an overlay that moves it into another namespace (the Secret
guarantee moving with it), deploy/examples/ replicating with deploy/'s own flags, and the
commands judging with the deployed operator's policy."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.cluster import REPO, Cluster, Namespaces
from configmirror_testing.e2e import Operators, configmap, events, read
from configmirror_testing.installs import (
    check_install,
    check_status_follows_policy,
    operator_flags,
    pod_env,
    service_account,
)
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane
SA = "system:serviceaccount:configmirror:configmirror"
COMPONENT = REPO / "deploy" / "components" / "secrets"
MOVED = "platform-ops"


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
    ("bind", "clusterroles.rbac.authorization.k8s.io/view", "default", False),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", "default", False),
    # No kind --kinds does not name (deploy/ alone: configmap), nothing for it at all.
    *[(verb, resource, namespace, False)
      for resource in ("networkpolicies.networking.k8s.io", "limitranges", "resourcequotas",
                       "roles.rbac.authorization.k8s.io",
                       "rolebindings.rbac.authorization.k8s.io", "serviceaccounts")
      for verb, namespace in (("list", None), ("watch", None), ("create", "default"),
                              ("update", "default"), ("delete", "default"))],
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


# -- moved into another namespace by an overlay ---------------------------------------------

def overlay(folder: Path, namespace: str, prefix: str | None = None) -> Path:
    """A user's overlay: deploy/ and its Secrets component, with `namespace:` (and namePrefix)."""
    folder.mkdir(parents=True, exist_ok=True)
    kustomization: dict[str, Any] = {
        "resources": [os.path.relpath(REPO / "deploy", folder)],
        "components": [os.path.relpath(COMPONENT, folder)], "namespace": namespace}
    if prefix:
        kustomization["namePrefix"] = prefix
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return folder


def kustomize(cluster: Cluster, folder: Path) -> list[dict[str, Any]]:
    rendered = cluster.require_plane().kubectl("kustomize", str(folder)).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


@pytest.mark.parametrize("prefix", [None, "ops-"])
def test_an_overlay_in_another_namespace_moves_every_reference_to_the_operator(
        cluster: Cluster, tmp_path: Path, prefix: str | None) -> None:
    docs = kustomize(cluster, overlay(tmp_path, MOVED, prefix))
    home, name = service_account(docs)
    assert (home, name) == (MOVED, f"{prefix or ''}configmirror")
    (namespace,) = [d for d in docs if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == MOVED
    labels = namespace["metadata"]["labels"]
    assert labels["configmirror.io/ignore"] == "true"
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    subjects = [s for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
                for s in d["subjects"]]
    assert len(subjects) == 3, "configmirror, its leader election, its Secrets"
    assert all(s == {"kind": "ServiceAccount", "name": name, "namespace": MOVED}
               for s in subjects), subjects
    # The admission policy checks the user its binding's parameter names: this ServiceAccount.
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["paramRef"] == {
        "name": name, "namespace": MOVED, "parameterNotFoundAction": "Allow"}
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ServiceAccount"}
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    # The Lease's namespace and the operator's are the pod's own (the downward API), so they
    # move too.
    env = {e["name"]: e for e in
           next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
               "containers"][0]["env"]}
    for variable in ("CONFIGMIRROR_LEADER_ELECTION_NAMESPACE", "CONFIGMIRROR_OPERATOR_NAMESPACE"):
        assert env[variable]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    text = yaml.safe_dump_all(docs)
    assert "namespace: configmirror\n" not in text and "serviceaccount:configmirror" not in text


@pytest.fixture(scope="module")
def moved(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[list[dict[str, Any]], Path]]:
    """The overlay installed for real; its rendering, and a kubeconfig of its ServiceAccount.
    namePrefix keeps its cluster-wide objects apart from deploy/'s own (installed beside it by
    this module and test_secrets.py)."""
    plane = cluster.require_plane()
    folder = overlay(tmp_path_factory.mktemp("moved") / "overlay", MOVED, "ops-")
    docs = kustomize(cluster, folder)
    plane.kubectl("apply", "-k", str(folder))
    try:
        home, name = service_account(docs)
        yield docs, cluster.token_kubeconfig(home, name, folder.parent / "kubeconfig")
    finally:
        plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-k", str(folder))
        plane.finalize_namespace(MOVED)


def test_an_install_moved_by_an_overlay_replicates_and_keeps_the_secret_guarantee(
        cluster: Cluster, moved: tuple[list[dict[str, Any]], Path], namespaces: Namespaces,
        operators: Operators) -> None:
    docs, kubeconfig = moved
    check_install(cluster, operators, namespaces, docs, kubeconfig, lease="configmirror")


# -- the examples, as written -----------------------------------------------------------------

EXAMPLE_NAMESPACES = ("platform", "team-a", "team-b", "team-sandbox", "billing")


def test_the_examples_replicate_with_deploys_own_flags(
        deployed: Cluster, sa_kubeconfig: Path, namespaces: Namespaces,
        operators: Operators) -> None:
    """`kubectl apply -f deploy/examples/` (namespaces.yaml, then source.yaml) with the
    operator that deploy/ runs: its flags (the source namespace selector among them), its
    ServiceAccount."""
    plane = deployed.require_plane()
    docs = kustomize(deployed, REPO / "deploy")
    flags = operator_flags(docs)
    assert "--source-namespace-selector=configmirror.io/source=true" in flags
    operator = operators(*flags, kubeconfig=sa_kubeconfig, env=pod_env(docs))
    wait_for(lambda: operator.metric("configmirror_leader") == 1, what="the operator to lead")
    try:
        plane.kubectl("apply", "-f", str(REPO / "deploy" / "examples"))
        for ns in ("team-a", "team-b", "billing"):
            wait_for(lambda ns=ns: read(deployed, ns, "shared-ca"), timeout=30,  # type: ignore[misc]
                     what=f"the example's replica in {ns}")
        operator.wait_idle()
        assert read(deployed, "team-sandbox", "shared-ca") is None, "excluded by !team-sandbox"
        assert events(deployed, "platform", "shared-ca", "Replicated")
        assert not events(deployed, "platform", "shared-ca", "SourceNotAllowed")
    finally:
        for ns in EXAMPLE_NAMESPACES:
            namespaces.delete(ns)


def deployment_args() -> list[str]:
    """deploy/deployment.yaml's flags for `run`, less the ports (the test's process has its own)."""
    (container,) = yaml.safe_load((REPO / "deploy" / "deployment.yaml").read_text())[
        "spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "run"
    return [a for a in container["args"][1:] if "-bind-address=" not in a]


@pytest.mark.operator_process
def test_status_without_flags_judges_with_the_deployed_operators_policy(
        deployed: Cluster, sa_kubeconfig: Path, namespaces: Namespaces,
        operators: Operators) -> None:
    """deploy/'s operator honours sources only in namespaces labelled configmirror.io/source=
    true; `status` with no policy flag of its own says the same of a source elsewhere."""
    docs = kustomize(deployed, REPO / "deploy")
    assert {"--leader-elect", "--source-namespace-selector=configmirror.io/source=true",
            "--delete-grace=60s"} <= set(deployment_args()), deployment_args()
    check_status_follows_policy(deployed, operators, namespaces, docs, sa_kubeconfig,
                                lease="configmirror")
