"""Pull with consent, and status a user can read and wait on, end to end.

A namespace asks (`configmirror.io/pull` on the Namespace), the source's owner consents
(`configmirror.io/pull-allowed(-matching)` on the source); anything else fails closed with
one Warning `PullNotAllowed` on the Namespace. `configmirror status` and `configmirror wait`
use the decision `run` and `plan` use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from configmirror.replication.spec import PULL, PULL_ALLOWED, PULL_ALLOWED_MATCHING, REPLICATE_TO
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import Operator, Operators, configmap, events, read, wait_replica
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.operator_process]


def pulling(cluster: Cluster, namespaces: Namespaces, pull: str,
            labels: dict[str, str] | None = None) -> str:
    name = namespaces(labels=labels)
    set_pull(cluster, name, pull)
    return name


def set_pull(cluster: Cluster, namespace: str, pull: str | None) -> None:
    cluster.core.patch_namespace(namespace, {"metadata": {"annotations": {PULL: pull}}})


def refusals(cluster: Cluster, namespace: str) -> list[client.CoreV1Event]:
    """The PullNotAllowed Events on Namespace `namespace` (cluster-scoped: they live in
    default, as client-go puts them)."""
    return [e for e in cluster.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.kind=Namespace,involvedObject.name={namespace}"
    ).items if e.reason == "PullNotAllowed"]


def cli(cluster: Cluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "configmirror", *args, "--kubeconfig",
                           str(cluster.kubeconfig)], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_a_namespace_that_pulls_a_consenting_source_gets_its_replica_and_no_other_does(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    platform = namespaces()
    team = f"team-{platform}"
    cluster.core.create_namespaced_config_map(platform, configmap(
        "shared-ca", {PULL_ALLOWED: "team-*"}, data={"ca.crt": "pem"}))
    asking = pulling(cluster, namespaces, f"{platform}/shared-ca")  # consent by name: no
    allowed = namespaces(name=team)
    set_pull(cluster, allowed, f"{platform}/shared-ca")
    bystander = namespaces(name=f"team-x-{platform}")  # allowed, but does not ask
    replica = wait_replica(cluster, allowed, {"ca.crt": "pem"}, name="shared-ca")
    assert replica.metadata.annotations["configmirror.io/replica-of"] == f"{platform}/shared-ca"
    wait_for(lambda: refusals(cluster, asking), what="the refusal of the one not allowed")
    operator.wait_idle()
    assert read(cluster, asking, "shared-ca") is None
    assert read(cluster, bystander, "shared-ca") is None, "a pull-only source pushes nowhere"


def test_consent_by_label_and_withdrawn_consent_or_a_removed_pull_removes_the_replica(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    platform = namespaces()
    label = f"tenant-{platform}"
    cluster.core.create_namespaced_config_map(platform, configmap(
        "cfg", {PULL_ALLOWED_MATCHING: f"{label}=yes"}))
    a = pulling(cluster, namespaces, f"{platform}/cfg", labels={label: "yes"})
    b = pulling(cluster, namespaces, f"{platform}/cfg", labels={label: "yes"})
    wait_replica(cluster, a)
    wait_replica(cluster, b)
    set_pull(cluster, a, None)  # the namespace stops asking
    wait_for(lambda: read(cluster, a, "cfg") is None, what="a's replica to go")
    cluster.core.patch_namespaced_config_map("cfg", platform, {"metadata": {"annotations": {
        PULL_ALLOWED_MATCHING: f"{label}=never"}}})  # the owner withdraws consent
    wait_for(lambda: read(cluster, b, "cfg") is None, what="b's replica to go")
    wait_for(lambda: refusals(cluster, b), what="b told why it gets nothing now")


@pytest.mark.parametrize(("entry", "reason"), [
    ("{platform}/closed", "does not allow namespace"),
    ("{platform}/missing", "there is no ConfigMap"),
    ("secret/{platform}/creds", "replicates no Secrets"),
    ("{platform}/closed/extra/part", "not [KIND/]NAMESPACE/NAME"),
])
def test_a_pull_that_gets_nothing_is_one_pull_not_allowed_event_and_no_loop(
        cluster: Cluster, namespaces: Namespaces, operator: Operator, entry: str,
        reason: str) -> None:
    platform = namespaces()
    cluster.core.create_namespaced_config_map(platform, configmap("closed", {REPLICATE_TO: "x"}))
    name = entry.format(platform=platform)
    team = pulling(cluster, namespaces, name)
    (event,) = wait_for(lambda: refusals(cluster, team), what="the PullNotAllowed Event")
    assert event.type == "Warning" and reason in event.message and repr(name) in event.message
    # Changes that do not change the answer say nothing again.
    cluster.core.patch_namespace(team, {"metadata": {"labels": {"unrelated": "1"}}})
    cluster.core.patch_namespaced_config_map("closed", platform, {"data": {"v": "2"}})
    operator.wait_idle()
    (again,) = refusals(cluster, team)
    assert (again.count or 1) == 1, "one Event per change, not per look"
    assert read(cluster, team, "closed") is None and read(cluster, team, "missing") is None


def test_a_foreign_object_in_a_pulling_namespace_is_a_conflict_and_untouched(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    platform, team = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(team, configmap("cfg", data={"mine": "1"}))
    cluster.core.create_namespaced_config_map(platform, configmap("cfg", {PULL_ALLOWED: "*"}))
    set_pull(cluster, team, f"{platform}/cfg")
    wait_for(lambda: events(cluster, platform, "cfg", "TargetConflict"),
             what="TargetConflict on the source")
    assert read(cluster, team, "cfg").data == {"mine": "1"}  # type: ignore[union-attr]


# -- status and wait ---------------------------------------------------------------------------


def test_status_counts_and_lists_exactly_what_plan_would_do(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a, b, taken = namespaces(), namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(taken, configmap("cfg"))
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: f"{a},{b},{taken}", PULL_ALLOWED: "nobody"},
        data={"secret-looking": "s3cr3t-value"}))
    refused = pulling(cluster, namespaces, f"{src}/cfg")
    planned = json.loads(cli(cluster, "plan", "--namespace", src, "--output", "json").stdout)
    (p,) = planned["plans"]
    done = cli(cluster, "status", f"{src}/cfg", "-o", "json")
    assert done.returncode == 0, done.stderr
    (s,) = json.loads(done.stdout)["sources"]
    assert (s["kind"], s["source"], s["targets"], s["in_sync"]) == ("ConfigMap", f"{src}/cfg",
                                                                     3, 0)
    assert [(x["action"], x["namespace"]) for x in s["pending"]] == [
        (x["action"], x["namespace"]) for x in p["actions"]] == [("create", t)
                                                                  for t in sorted((a, b))]
    assert {(x["type"], x["object"]) for x in s["problems"]} == {
        ("conflict", f"{taken}/cfg"), ("pull_refused", refused)}
    text = cli(cluster, "status", f"{src}/cfg").stdout
    assert f"configmap {src}/cfg: 0/3 target(s) in sync" in text
    assert f"pending  create {a}/cfg  (missing)" in text
    assert "s3cr3t-value" not in done.stdout + text, "never a value"

    operators()
    wait_replica(cluster, a)
    wait_replica(cluster, b)
    (s,) = json.loads(cli(cluster, "status", f"{src}/cfg", "-o", "json").stdout)["sources"]
    assert (s["targets"], s["in_sync"], s["pending"]) == (3, 2, [])
    view = json.loads(cli(cluster, "status", "--target-namespace", refused, "-o",
                          "json").stdout)
    assert view["namespace"]["pulls"] == [{"entry": f"{src}/cfg", "state": "refused",
                                           "reason": view["namespace"]["pulls"][0]["reason"]}]
    assert "does not allow" in view["namespace"]["pulls"][0]["reason"]
    held = json.loads(cli(cluster, "status", "--target-namespace", a, "-o", "json").stdout)
    assert held["namespace"]["holds"] == [{"kind": "ConfigMap", "name": "cfg",
                                           "replica_of": f"{src}/cfg", "state": "in sync"}]
    assert [x["source"] for x in held["sources"]] == [f"{src}/cfg"]


def test_wait_returns_once_a_new_namespace_has_its_replica_and_fails_on_timeout_or_no_source(
        cluster: Cluster, namespaces: Namespaces, operator: Operator) -> None:
    src = namespaces()
    label = f"wait-{src}"
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {"configmirror.io/replicate-to-matching": f"{label}=yes"}))
    first = namespaces(labels={label: "yes"})
    wait_replica(cluster, first)
    ready = cli(cluster, "wait", f"{src}/cfg", "--timeout", "30s")
    assert ready.returncode == 0 and "in sync in 1 target" in ready.stdout, ready.stderr
    # A namespace just added: wait must see its replica arrive, not answer from a stale list.
    waiting = subprocess.Popen(
        [sys.executable, "-m", "configmirror", "wait", f"{src}/cfg", "--timeout", "60s",
         "--kubeconfig", str(cluster.kubeconfig)], stdout=subprocess.PIPE, text=True)
    try:
        second = namespaces(labels={label: "yes"})
        out, _ = waiting.communicate(timeout=90)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, out
    assert read(cluster, second, "cfg") is not None, "it returned only once the replica was there"
    assert "in sync in 2 target" in out
    # A place the source can never have: the timeout passes, and what is missing is said.
    blocked = namespaces()
    cluster.core.create_namespaced_config_map(blocked, configmap("cfg"))  # someone's own
    cluster.core.patch_namespace(blocked, {"metadata": {"labels": {label: "yes"}}})
    late = cli(cluster, "wait", f"{src}/cfg", "--timeout", "2s")
    assert late.returncode == 2 and "not in sync after 2s" in late.stderr
    assert f"conflict: {blocked}/cfg exists" in late.stdout
    missing = cli(cluster, "wait", f"{src}/nothing", "--timeout", "30s")
    assert missing.returncode == 1 and "there is no ConfigMap source" in missing.stderr


def test_kubectl_configmirror_status_runs_through_kubectl(
        cluster: Cluster, namespaces: Namespaces) -> None:
    plane = cluster.require_plane()
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap("cfg", {REPLICATE_TO: a}))
    plugin = Path(sys.executable).parent / "kubectl-configmirror"
    assert plugin.is_file(), "the package installs the kubectl plugin's entry point"
    # kubectl finds kubectl-* executables on PATH; the plugin reads KUBECONFIG as kubectl does.
    env = {**os.environ, "PATH": f"{plugin.parent}{os.pathsep}{os.environ['PATH']}",
           "KUBECONFIG": str(cluster.kubeconfig)}

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(plane.kubectl_binary), *args], capture_output=True,
                              text=True, timeout=60, env=env, check=False)

    listed = kubectl("plugin", "list")
    assert str(plugin) in listed.stdout, listed.stdout + listed.stderr
    done = kubectl("configmirror", "status", f"{src}/cfg")
    assert done.returncode == 0, done.stderr
    assert f"configmap {src}/cfg: 0/1 target(s) in sync" in done.stdout
    bad = kubectl("configmirror", "status", "not-a-key")
    assert bad.returncode == 1 and bad.stderr.startswith("kubectl configmirror: "), bad.stderr
    # kubectl's habit: the namespace and the output before the command.
    first = kubectl("configmirror", "-n", src, "-o", "json", "status", "cfg")
    assert first.returncode == 0, first.stderr
    assert [s["source"] for s in json.loads(first.stdout)["sources"]] == [f"{src}/cfg"]
    planned = kubectl("configmirror", "-n", src, "plan")
    assert planned.returncode == 2 and f"{src}/cfg: out of sync" in planned.stdout, planned
