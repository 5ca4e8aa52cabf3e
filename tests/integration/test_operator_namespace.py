"""The operator's own namespace never receives a replica, whatever its labels: installed the
way most users install a chart (`helm install --create-namespace`, which leaves the namespace
without configmirror.io/ignore), a source whose replicate-to matches that namespace fills every
other match and leaves it alone; plan and status, following the operator's published policy,
say the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.chart import CHART, documents
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.e2e import Operators, configmap, read, wait_replica
from configmirror_testing.helm import Helm
from configmirror_testing.installs import SOURCE_LABEL, operator_flags, pod_env
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.controlplane]


def judged(cluster: Cluster, command: str, source: str) -> subprocess.CompletedProcess[str]:
    """`configmirror COMMAND SOURCE -o json` as the admin, with no policy flag of its own."""
    return subprocess.run([sys.executable, "-m", "configmirror", command, source, "-o", "json",
                           "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.operator_process
def test_a_namespace_made_by_helm_create_namespace_gets_no_replica_of_a_source_matching_it(
        cluster: Cluster, helm: Helm, namespaces: Namespaces, operators: Operators,
        tmp_path: Path) -> None:
    # Every namespace here shares a prefix, so one pattern matches the release's namespace
    # and the targets without reaching the other tests' namespaces, as "*" would.
    prefix = unique_name("t-opns")
    home, release = f"{prefix}-home", "mirror"
    helm("install", release, str(CHART), "--namespace", home, "--create-namespace",
         kubeconfig=cluster.kubeconfig)
    try:
        labels = cluster.core.read_namespace(home).metadata.labels or {}
        assert "configmirror.io/ignore" not in labels, labels
        docs = documents(helm("get", "manifest", release, "--namespace", home,
                              kubeconfig=cluster.kubeconfig).stdout)
        token = cluster.token_kubeconfig(home, f"{release}-configmirror",
                                         tmp_path / "kubeconfig")
        operator = operators(*operator_flags(docs), kubeconfig=token, env=pod_env(docs))
        wait_for(lambda: operator.metric("configmirror_leader") == 1,
                 what="the operator to lead")
        src = namespaces(SOURCE_LABEL, name=f"{prefix}-src")
        first, second = (namespaces(name=f"{prefix}-{n}") for n in ("a", "b"))
        cluster.core.create_namespaced_config_map(src, configmap(
            "ca", {REPLICATE_TO: f"{prefix}-*"}, data={"v": "1"}))
        for target in (first, second):
            wait_replica(cluster, target, {"v": "1"}, name="ca", timeout=30)
        assert read(cluster, home, "ca") is None

        # The commands follow the operator's policy, which names its namespace: in sync,
        # with the two targets and not the operator's.
        planned = wait_for(lambda: (done := judged(cluster, "plan", f"{src}/ca")).returncode
                           == 0 and done, timeout=30, what="plan to find the source in sync")
        (plan,) = json.loads(planned.stdout)["plans"]
        assert sorted(plan["targets"]) == sorted([first, second])
        status = judged(cluster, "status", f"{src}/ca")
        assert status.returncode == 0, status.stderr
        (shown,) = json.loads(status.stdout)["sources"]
        assert (shown["targets"], shown["in_sync"]) == (2, 2), shown
        assert read(cluster, home, "ca") is None, "never written, not written and removed"
    finally:
        helm("uninstall", release, "--namespace", home, kubeconfig=cluster.kubeconfig)
        namespaces.delete(home)
