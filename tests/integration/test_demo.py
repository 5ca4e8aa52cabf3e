"""`make demo` (the README's first command) works: it replicates the example source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from configmirror_testing.cluster import REPO, Cluster

pytestmark = pytest.mark.controlplane


def test_demo_replicates_the_example_and_stops_cleanly(cluster: Cluster) -> None:
    plane = cluster.require_plane()
    done = subprocess.run([sys.executable, str(REPO / "hack" / "demo.py"), "--once"],
                          capture_output=True, text=True, timeout=180, check=False,
                          env={"KUBEBUILDER_ASSETS": str(plane.assets), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr + done.stdout
    out = done.stdout
    table = out.split("replicated platform/shared-ca:")[1].split("demo:")[0]
    rows = [line.split() for line in table.strip().splitlines()[1:]]
    assert sorted((row[0], row[1]) for row in rows) == [
        ("billing", "shared-ca"), ("team-a", "shared-ca"), ("team-b", "shared-ca")], out
    assert "created 3, updated 0, deleted 0 replicas" in out
    assert "export KUBECONFIG=" in out
    assert "operator exited with 0" in out
    kubeconfig = out.split("export KUBECONFIG=")[1].split()[0]
    assert not Path(kubeconfig).exists(), "the demo's control plane was not cleaned up"
