"""What an install of configmirror must do wherever it is put, in any namespace under any
name: shared by the kustomize overlay test (test_deploy.py) and the chart's (test_chart.py).

The operator runs as a local process holding only a TokenRequest token of the install's
ServiceAccount, with the flags the install's Deployment passes (its ports aside: the process
binds its own), and the namespace its pod would get from the downward API.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.cluster import REPO, Cluster, Namespaces
from configmirror_testing.e2e import Operators, configmap, events, read, wait_replica
from configmirror_testing.wait import wait_for

LISTED, UNLISTED = "wildcard-tls", "db-password"
SOURCE_LABEL = {"configmirror.io/source": "true"}
# Where the pod listens; a local process binds ports of its own.
POD_ONLY = ("--metrics-bind-address", "--health-probe-bind-address")


def deployment_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def pod_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The variables the install's container gets from its pod's namespace (the downward
    API's metadata.namespace), as the pod would have them."""
    home, _ = service_account(docs)
    return {v["name"]: home for v in deployment_container(docs).get("env") or ()
            if (v.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            == "metadata.namespace"}


def operator_flags(docs: list[dict[str, Any]]) -> list[str]:
    """The install's `configmirror run` flags, less the pod's listen addresses."""
    args = deployment_container(docs)["args"]
    assert args[0] == "run", args
    return [a for a in args[1:] if not a.startswith(POD_ONLY)]


def service_account(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """(namespace, name) of the install's one ServiceAccount."""
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    return sa["metadata"]["namespace"], sa["metadata"]["name"]


def create_secret(kubeconfig: Path, namespace: str, name: str,
                  annotations: dict[str, str] | None = None, dry_run: bool = False) -> int:
    """Create Secret `name` as `kubeconfig`'s user: 201, or the status it was refused with.
    A dry run passes admission as a create does, and writes nothing."""
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))  # type: ignore[no-untyped-call]
    body = {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "annotations": annotations or {}},
            "data": {"k": base64.b64encode(b"v").decode()}}
    try:
        core.create_namespaced_secret(namespace, body,  # type: ignore[arg-type]
                                     dry_run="All" if dry_run else None)
    except client.ApiException as err:
        return int(err.status)
    return 201


def read_secret(cluster: Cluster, namespace: str, name: str) -> client.V1Secret | None:
    try:
        return cluster.core.read_namespaced_secret(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def check_install(cluster: Cluster, operators: Operators, namespaces: Namespaces,
                  docs: list[dict[str, Any]], kubeconfig: Path, lease: str) -> None:
    """The operator of the install rendered as `docs` (its ServiceAccount's token in
    `kubeconfig`) leads with Lease `lease` in its own namespace, replicates a ConfigMap and a
    listed Secret, writes its Events, and is refused a Secret of an unlisted name by the
    admission policy, which leaves every other client alone."""
    home, _ = service_account(docs)
    src, target = namespaces(SOURCE_LABEL), namespaces()
    # The install's Secret sources are namespaces an admin names; this test's is src.
    operator = operators(*operator_flags(docs), f"--secret-source-namespaces={src}",
                         kubeconfig=kubeconfig,
                         env=pod_env(docs))
    wait_for(lambda: operator.metric("configmirror_leader") == 1, what="the operator to lead")
    spec = client.CoordinationV1Api(cluster.api_client).read_namespaced_lease(lease, home).spec
    holder = spec.holder_identity if spec else None
    assert holder, f"Lease {home}/{lease} has no holder"

    cluster.core.create_namespaced_config_map(src, configmap(  # type: ignore[arg-type]
        "cfg", {REPLICATE_TO: target}, data={"v": "1"}))
    assert create_secret(cluster.kubeconfig, src, LISTED, {REPLICATE_TO: target}) == 201
    wait_replica(cluster, target, {"v": "1"}, timeout=30)
    wait_for(lambda: read_secret(cluster, target, LISTED), timeout=30,
             what=f"the replica {target}/{LISTED}")
    wait_for(lambda: events(cluster, src, "cfg", "Replicated"), timeout=30,
             what="the operator's Replicated Event on the source")

    # RBAC lets the ServiceAccount create any Secret; the admission policy must refuse it
    # every name but the listed ones (a policy takes a moment to be in force: dry runs until
    # it is, then a real create).
    wait_for(lambda: create_secret(kubeconfig, target, UNLISTED, dry_run=True) == 403,
             timeout=30, what="the admission policy to refuse an unlisted Secret name")
    assert create_secret(kubeconfig, target, UNLISTED) == 403
    assert read_secret(cluster, target, UNLISTED) is None
    assert create_secret(cluster.kubeconfig, target, UNLISTED) == 201, \
        "the policy holds back the operator's ServiceAccount only"


def status(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`configmirror status ARGS -o json` as the cluster's admin, with no policy flag unless
    ARGS gives one."""
    return subprocess.run([sys.executable, "-m", "configmirror", "status", *args, "--kubeconfig",
                           str(cluster.kubeconfig), "-o", "json"],
                          capture_output=True, text=True, timeout=60, check=False)


def check_status_follows_policy(cluster: Cluster, operators: Operators, namespaces: Namespaces,
                                docs: list[dict[str, Any]], kubeconfig: Path,
                                lease: str) -> None:
    """The operator of the install rendered as `docs` publishes its policy as ConfigMap
    `<lease>-policy` in its namespace; `configmirror status` with no policy flag of its own
    follows it, so a source in a namespace without the source label is reported as not
    allowed (as the operator refuses it), a flag on the command line overrides the policy with
    a warning, and once the operator stops the command says it found none."""
    home, _ = service_account(docs)
    flags = operator_flags(docs)
    assert "--source-namespace-selector=configmirror.io/source=true" in flags, flags
    operator = operators(*flags, kubeconfig=kubeconfig,
                         env=pod_env(docs))
    wait_for(lambda: operator.metric("configmirror_leader") == 1, what="the operator to lead")
    policy = wait_for(lambda: read(cluster, home, f"{lease}-policy"),
                      what="the leader to publish its policy")
    assert policy is not None and policy.metadata is not None
    assert (policy.metadata.labels or {}).get("configmirror.io/policy") == "true"
    selector = (policy.data or {}).get("source-namespace-selector")
    assert selector == "configmirror.io/source=true", policy.data
    unlabelled, target = namespaces(labels={}), namespaces()
    cluster.core.create_namespaced_config_map(unlabelled, configmap(  # type: ignore[arg-type]
        "cfg", {REPLICATE_TO: target}, data={"v": "1"}))
    wait_for(lambda: events(cluster, unlabelled, "cfg", "SourceNotAllowed"),
             what="the operator to refuse the source")
    assert read(cluster, target, "cfg") is None

    done = status(cluster, f"{unlabelled}/cfg")
    assert done.returncode == 0, done.stderr
    (said,) = done.stderr.splitlines()
    assert said.startswith(f"configmirror: following the operator in namespace {home} ("), said
    (source,) = json.loads(done.stdout)["sources"]
    assert [p["type"] for p in source["problems"]] == ["not_allowed"], source
    assert "configmirror.io/source=true" in source["problems"][0]["message"], source
    assert source["pending"] == [], "the command would create what the operator refuses"

    # A flag on the command line still overrides the operator's policy, and says so.
    done = status(cluster, f"{unlabelled}/cfg", "--source-namespace-selector=")
    (source,) = json.loads(done.stdout)["sources"]
    assert [(p["action"], p["namespace"]) for p in source["pending"]] == [("create", target)]
    assert done.stderr.splitlines()[1:] == [
        "configmirror: warning: --source-namespace-selector='' overrides the operator's "
        "configmirror.io/source=true"], done.stderr

    # Stopped, the operator takes its policy back: the commands find no operator.
    assert operator.stop() == 0
    assert read(cluster, home, f"{lease}-policy") is None, "the policy outlived its operator"
    done = status(cluster, f"{unlabelled}/cfg")
    assert done.stderr.startswith("configmirror: no running operator found"), done.stderr


@contextlib.contextmanager
def deploy_with_components(cluster: Cluster, folder: Path, components: list[str],
                           leftovers: list[Path]) -> Iterator[Path]:
    """deploy/ with these components (folders under deploy/components) applied for real in an
    overlay under `folder`; yields a kubeconfig holding only a token of its ServiceAccount.
    After: deploy/ is applied again as it is (its own objects stay: test_deploy shares them,
    and their flags with them), and the components' `leftovers` (files under deploy/
    components) are deleted."""
    plane = cluster.require_plane()
    shutil.copytree(REPO / "deploy", folder / "deploy")
    (folder / "overlay").mkdir()
    (folder / "overlay" / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["../deploy"],
        "components": [f"../deploy/components/{c}" for c in components]}))
    plane.kubectl("apply", "-f", str(REPO / "deploy" / "namespace.yaml"))
    plane.kubectl("apply", "-k", str(folder / "overlay"))
    try:
        yield cluster.token_kubeconfig("configmirror", "configmirror", folder / "kubeconfig")
    finally:
        plane.kubectl("apply", "-k", str(REPO / "deploy"))
        for part in leftovers:
            plane.kubectl("delete", "--ignore-not-found", "-f",
                          str(REPO / "deploy" / "components" / part))
