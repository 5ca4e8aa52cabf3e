"""`configmirror migrate` against the real API server: sources annotated as kubernetes-reflector's
and kubernetes-replicator's users annotate them, the `-o yaml` output applied with kubectl
(server-side, and client-side, which sends a strategic merge patch), then a configmirror
operator replicates each to the namespaces the old annotations named.

The old annotations are written as each tool reads them: kubernetes-reflector,
src/ES.Kubernetes.Reflector/Mirroring/Core/Annotations.cs lines 9-15 (names) and
MirroringPropertiesExtensions.cs lines 94-118 (reflection-allowed AND the allowed list, AND for
auto-reflection auto-enabled and the auto list); kubernetes-replicator,
replicate/common/consts.go lines 5-12 and generic-replicator.go lines 100-145
(replicate-from needs replication-allowed and replication-allowed-namespaces) and 288-330.
No old tool runs here: the tests prove the conversion, not a takeover of its mirrors.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from typing import Any

import pytest
import yaml

from configmirror.replication.spec import PULL, PULL_ALLOWED, REPLICATE_TO
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.e2e import Operators, configmap, read, wait_replica

pytestmark = [pytest.mark.controlplane, pytest.mark.operator_process]

RF = "reflector.v1.k8s.emberstack.com/"
RP = "replicator.v1.mittwald.de/"


def migrate(cluster: Cluster, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "configmirror", "migrate", "--from", tool,
                           "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def annotations(cluster: Cluster, kind: str, namespace: str | None, name: str
                ) -> dict[str, str]:
    if kind == "Namespace":
        obj: Any = cluster.core.read_namespace(name)
    elif kind == "Secret":
        obj = cluster.core.read_namespaced_secret(name, namespace)
    else:
        obj = cluster.core.read_namespaced_config_map(name, namespace)
    return dict(obj.metadata.annotations or {})


def applied(cluster: Cluster, output: str, *apply: str) -> list[dict[str, Any]]:
    """Apply migrate's YAML with kubectl; check every object now has its annotations."""
    docs = [d for d in yaml.safe_load_all(output) if d]
    assert docs, output
    cluster.require_plane().kubectl("apply", *apply, "-f", "-", input=output)
    for doc in docs:
        meta = doc["metadata"]
        have = annotations(cluster, doc["kind"], meta.get("namespace"), meta["name"])
        assert have | meta["annotations"] == have, (doc, have)
    return docs


def secret(cluster: Cluster, namespace: str, name: str, notes: dict[str, str]) -> None:
    cluster.core.create_namespaced_secret(namespace, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "annotations": notes},
        "type": "Opaque", "data": {"token": base64.b64encode(b"s3cret").decode()}})


def test_reflector_sources_applied_from_migrate_replicate_where_reflector_would(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    base = unique_name("mrf")
    home = namespaces(name=f"{base}-platform")
    team_a, team_b = namespaces(name=f"{base}-team-a"), namespaces(name=f"{base}-team-b")
    prod, other = namespaces(name=f"{base}-prod"), namespaces(name=f"{base}-other")
    # Auto-reflection to the team namespaces, reflection allowed to those and prod.
    cluster.core.create_namespaced_config_map(home, configmap("ca", {
        RF + "reflection-allowed": "true",
        RF + "reflection-allowed-namespaces": f"{base}-team-.*,{base}-prod",
        RF + "reflection-auto-enabled": "true",
        RF + "reflection-auto-namespaces": f"{base}-team-.*"}, data={"ca.crt": "pem"}))
    # A mirror made by hand in prod (ResourceMirror.cs lines 316-368 fill it).
    cluster.core.create_namespaced_config_map(prod, configmap("ca", {
        RF + "reflects": f"{home}/ca"}, data={}))
    done = migrate(cluster, "reflector", "-o", "yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    docs = applied(cluster, done.stdout, "--server-side")
    source = next(d for d in docs if d["metadata"].get("namespace") == home)
    assert source["metadata"]["annotations"][REPLICATE_TO] == f"{base}-team-*"
    assert annotations(cluster, "Namespace", None, prod)[PULL] == f"{home}/ca"
    # The hand-made mirror is a foreign object to configmirror: the guide deletes it first.
    cluster.core.delete_namespaced_config_map("ca", prod)
    operator = operators()
    for target in (team_a, team_b, prod):
        wait_replica(cluster, target, {"ca.crt": "pem"}, name="ca")
    operator.wait_idle()
    assert read(cluster, other, "ca") is None


def test_replicator_sources_applied_from_migrate_replicate_where_it_would(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    base = unique_name("mrp")
    home = namespaces(name=f"{base}-platform")
    team_a = namespaces(name=f"{base}-team-a")
    labelled = namespaces(labels={f"{base}/ca": "yes"})
    puller, other = namespaces(name=f"{base}-app"), namespaces(name=f"{base}-other")
    cluster.core.create_namespaced_config_map(home, configmap("ca", {
        RP + "replicate-to": f"{base}-team-.*",
        RP + "replicate-to-matching": f"{base}/ca=yes"}, data={"ca.crt": "pem"}))
    cluster.core.create_namespaced_config_map(home, configmap("settings", {
        RP + "replication-allowed": "true",
        RP + "replication-allowed-namespaces": f"{base}-app"}, data={"mode": "fast"}))
    cluster.core.create_namespaced_config_map(puller, configmap("settings", {
        RP + "replicate-from": f"{home}/settings"}, data={}))
    secret(cluster, home, f"{base}-token", {RP + "replicate-to": f"{base}-team-a"})
    done = migrate(cluster, "kubernetes-replicator", "-o", "yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"--secret-names={base}-token" in done.stdout
    applied(cluster, done.stdout)  # client-side apply: a strategic merge patch of each
    assert annotations(cluster, "ConfigMap", home, "settings")[PULL_ALLOWED] == f"{base}-app"
    cluster.core.delete_namespaced_config_map("settings", puller)  # foreign, as above
    operator = operators(f"--secret-names={base}-token", f"--secret-source-namespaces={home}")
    for target in (team_a, labelled):
        wait_replica(cluster, target, {"ca.crt": "pem"}, name="ca")
    wait_replica(cluster, puller, {"mode": "fast"}, name="settings")
    replica = cluster.core.read_namespaced_secret(f"{base}-token", team_a)
    assert replica.data == {"token": base64.b64encode(b"s3cret").decode()}
    operator.wait_idle()
    assert read(cluster, other, "ca") is None
    assert read(cluster, team_a, "settings") is None


def test_expressions_no_glob_says_list_todays_namespaces_warn_and_exit_3(
        cluster: Cluster, namespaces: Namespaces) -> None:
    base = unique_name("mx")
    home = namespaces(name=f"{base}-platform")
    a, b = namespaces(name=f"{base}-a1"), namespaces(name=f"{base}-b22")
    namespaces(name=f"{base}-c3")
    expression = f"{base}-(a|b)\\d+"
    cluster.core.create_namespaced_config_map(home, configmap("ca", {
        RP + "replicate-to": expression}))
    done = migrate(cluster, "kubernetes-replicator")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{REPLICATE_TO}: {a}, {b}\n" in done.stdout
    assert expression in done.stdout and "created later would not get" in done.stdout
