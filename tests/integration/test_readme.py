"""The README's five-minute quickstart, from the example on, runs as written and does what it
says: on a control plane of its own, with the operator run with deploy/'s source-namespace
selector (the kind steps before it, the cluster, the image and deploy/'s rollout, are what
`make kind-test` does)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from configmirror_testing.cluster import REPO, Cluster
from configmirror_testing.controlplane import ControlPlane
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane
# What the kind cluster, the image and deploy/ provide; the test provides them otherwise.
_SETUP = ("kind ", "make ", "kubectl apply -k deploy/", "kubectl -n configmirror rollout")


def quickstart() -> list[list[str]]:
    """The commands of the README's kind block, without the comments and the setup steps."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Five minutes on kind", 1)[1].split("```", 2)[1]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    # The README runs from the repository's root; the files it names, wherever pytest runs.
    return [[str(REPO / arg) if (REPO / arg).is_file() else arg for arg in shlex.split(line)]
            for line in lines if line and not line.startswith(_SETUP)]


def _selector_flag() -> str:
    deployment = yaml.safe_load((REPO / "deploy" / "deployment.yaml").read_text())
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    [flag] = [a for a in container["args"] if a.startswith("--source-namespace-selector=")]
    return str(flag)


def test_the_readme_quickstart_replicates_the_example_and_status_says_in_sync(
        cluster: Cluster, tmp_path: Path) -> None:
    commands = quickstart()
    assert [c[:3] for c in commands] == [
        ["kubectl", "apply", "-f"], ["kubectl", "label", "namespace"],
        ["kubectl", "apply", "-f"], ["kubectl", "get", "configmaps"],
        ["kubectl", "configmirror", "status"]], commands
    *writes, listing, status = commands
    with ControlPlane(cluster.require_plane().assets) as plane:
        operator = OperatorProcess(plane.kubeconfig, tmp_path / "operator.log", _selector_flag())
        try:
            operator.wait_ready()
            for command in writes:
                plane.kubectl(*command[1:])

            def replicas() -> list[tuple[str, ...]]:
                out = plane.kubectl(*listing[1:], "--no-headers", "-o",
                                    "custom-columns=NS:.metadata.namespace,NAME:.metadata.name")
                return sorted(tuple(line.split()) for line in out.stdout.splitlines())

            expected = [("billing", "shared-ca"), ("team-a", "shared-ca"),
                        ("team-b", "shared-ca")]
            wait_for(lambda: replicas() == expected, 60, "the README's three replicas")
            done = subprocess.run(
                [sys.executable, "-m", "configmirror", *status[2:], "--kubeconfig",
                 str(plane.kubeconfig)], capture_output=True, text=True, timeout=120,
                check=False)
            assert done.returncode == 0, done.stderr
            assert "configmap platform/shared-ca: 3/3 target(s) in sync" in done.stdout, \
                done.stdout
        finally:
            assert operator.stop() == 0, operator.log_tail()
