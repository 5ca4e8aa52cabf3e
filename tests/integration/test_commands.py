"""The commands as a kubectl user calls them, against the real API server: the kubeconfig
found where client-go finds it, a source named as in the pull annotation or as kubectl names
it, and -n/-o with one meaning on plan, status and wait."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import Operator, configmap, wait_replica

pytestmark = [pytest.mark.controlplane]


def command(*args: str, env: dict[str, str] | None = None,
            kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`configmirror ARGS` with no CONFIGMIRROR_*, KUBECONFIG or pod variable of ours."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONFIGMIRROR_",
                                                                       "KUBERNETES_SERVICE_"))}
    clean.pop("KUBECONFIG", None)
    flags = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    return subprocess.run([sys.executable, "-m", "configmirror", *args, *flags],
                          capture_output=True, text=True, timeout=60, env={**clean, **(env or {})},
                          check=False)


def sources(done: subprocess.CompletedProcess[str]) -> list[tuple[str, str]]:
    assert done.returncode == 0, done.stderr
    return [(s["kind"], s["source"]) for s in json.loads(done.stdout)["sources"]]


def test_in_a_pod_kubeconfig_listed_is_read_and_its_files_merged(
        cluster: Cluster, namespaces: Namespaces, tmp_path: Path) -> None:
    src = namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: "*"}))
    # A CI job in a cluster: the pod's variables are set, and KUBECONFIG names the cluster
    # to look at (after a file that does not exist, which is skipped).
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "KUBECONFIG": os.pathsep.join([str(tmp_path / "absent"), str(cluster.kubeconfig)])}
    assert sources(command("status", f"{src}/cfg", "-o", "json", env=pod)) == [
        ("ConfigMap", f"{src}/cfg")]
    wrong = command("status", f"{src}/cfg", "--context", "nope", env=pod)
    assert wrong.returncode == 1
    assert "context 'nope' is not in $KUBECONFIG" in wrong.stderr, wrong.stderr


def test_a_source_named_any_of_the_ways_is_the_same_source(
        cluster: Cluster, namespaces: Namespaces) -> None:
    src, other = namespaces(), namespaces()
    for namespace in (src, other):
        cluster.core.create_namespaced_config_map(namespace, configmap("cfg", {REPLICATE_TO: "*"}))
    cluster.core.create_namespaced_config_map(src, configmap("more", {REPLICATE_TO: "*"}))
    kubeconfig = cluster.kubeconfig
    for named in ([f"{src}/cfg"], [f"configmap/{src}/cfg"], [f"cm/{src}/cfg"],
                  ["-n", src, "cfg"], ["-n", src, "configmaps/cfg"], ["--namespace", src,
                                                                      "cm/cfg"]):
        assert sources(command("status", *named, "-o", "json", kubeconfig=kubeconfig)) == [
            ("ConfigMap", f"{src}/cfg")], named
    # -n without a source: the sources of that namespace, for plan as for status.
    assert sources(command("status", "-n", src, "-o", "json", kubeconfig=kubeconfig)) == [
        ("ConfigMap", f"{src}/cfg"), ("ConfigMap", f"{src}/more")]
    planned = command("plan", "-n", src, "-o", "yaml", kubeconfig=kubeconfig)
    assert planned.returncode == 2, planned.stderr  # replicas to create: not in sync
    doc: dict[str, Any] = yaml.safe_load(planned.stdout)
    assert [p["source"] for p in doc["plans"]] == [f"{src}/cfg", f"{src}/more"]
    assert doc["in_sync"] is False
    one = command("plan", f"cm/{other}/cfg", "-o", "json", kubeconfig=kubeconfig)
    assert [p["source"] for p in json.loads(one.stdout)["plans"]] == [f"{other}/cfg"]
    missing = command("plan", f"{src}/nothing", kubeconfig=kubeconfig)
    assert missing.returncode == 1
    assert f"there is no ConfigMap source {src}/nothing" in missing.stderr


@pytest.mark.operator_process
def test_status_target_namespace_is_what_a_namespace_holds(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, team = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: team}))
    wait_replica(cluster, team)
    operator.wait_idle()
    held = json.loads(command("status", "--target-namespace", team, "-o", "json",
                              kubeconfig=cluster.kubeconfig).stdout)
    assert held["namespace"]["holds"] == [{"kind": "ConfigMap", "name": "cfg",
                                           "replica_of": f"{src}/cfg", "state": "in sync"}]
    assert [s["source"] for s in held["sources"]] == [f"{src}/cfg"]
    # -n is the sources' namespace, never the holder's: team holds no source.
    none = command("status", "-n", team, "-o", "json", kubeconfig=cluster.kubeconfig)
    assert sources(none) == []


@pytest.mark.operator_process
def test_wait_says_in_sync_and_a_missing_source_or_a_broken_context_is_an_error(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src, team = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: team}))
    wait_replica(cluster, team)
    # -o before the command, as kubectl users write it.
    done = command("-o", "json", "wait", "-n", src, "cm/cfg", "--timeout=30s",
                   kubeconfig=cluster.kubeconfig)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["in_sync"], doc["source"]["source"], doc["source"]["targets"]) == (
        True, f"{src}/cfg", 1)
    missing = command("wait", f"{src}/nothing", "--timeout", "30s",
                      kubeconfig=cluster.kubeconfig)
    assert missing.returncode == 1, missing.stderr
    assert f"there is no ConfigMap source {src}/nothing" in missing.stderr
    broken = command("wait", f"{src}/cfg", "--context", "nope", kubeconfig=cluster.kubeconfig)
    assert broken.returncode == 1 and "context 'nope'" in broken.stderr, broken.stderr
