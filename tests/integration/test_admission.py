"""Replicas that admission changes: a real mutating webhook (the kind a policy engine runs)
labels and stamps every replica the operator writes, and a MutatingAdmissionPolicy labels
them or rewrites a data key. configmirror keeps what the server stores instead of rewriting
it forever, still repairs a replica edited by hand, says once per source version what the
server changed, and `plan`, `status` and `wait` (which remember nothing) and a restarted
operator judge those replicas as `run` does: what decides it is on the replica.
"""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from configmirror.replication.admission import ADMITTED
from configmirror.replication.model import REPLICA_LABEL
from configmirror.replication.spec import REPLICATE_TO, REPLICATE_TO_MATCHING
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.e2e import (
    Operator,
    Operators,
    configmap,
    events,
    read,
    restart_writes_nothing,
)
from configmirror_testing.localserver import LocalServer
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.operator_process]

OWNER_LABEL = "policy.example/owner"
STAMP = "policy.example/stamp"


class Webhook:
    """An HTTPS mutating admission webhook on 127.0.0.1: adds `OWNER_LABEL` and a new
    `STAMP` (a counter, so no two writes are stored alike) to each object it is sent."""

    def __init__(self, folder: Path) -> None:
        self.cert, key = folder / "webhook.crt", folder / "webhook.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(self.cert)],
                       check=True, capture_output=True, timeout=60)
        self.calls = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls += 1
                meta = review["request"]["object"]["metadata"]
                patch: list[dict[str, Any]] = []
                for field in ("labels", "annotations"):
                    if not meta.get(field):
                        patch.append({"op": "add", "path": f"/metadata/{field}", "value": {}})
                patch += [{"op": "add", "path": "/metadata/labels/policy.example~1owner",
                           "value": "team"},
                          {"op": "add", "path": "/metadata/annotations/policy.example~1stamp",
                           "value": str(outer.calls)}]
                answer = json.dumps({
                    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": review["request"]["uid"], "allowed": True,
                                 "patchType": "JSONPatch",
                                 "patch": base64.b64encode(json.dumps(patch).encode()).decode()},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.local = LocalServer(Handler, tls=context)
        self.url = f"{self.local.url}/mutate"

    def stop(self) -> None:
        self.local.stop()


@pytest.fixture
def webhook(cluster: Cluster, tmp_path: Path) -> Iterator[str]:
    """The webhook, registered for ConfigMaps with our replica label, in namespaces labelled
    `admission-test=<token>`; yields the token."""
    cluster.require_plane()  # the API server must reach 127.0.0.1 here
    hook = Webhook(tmp_path)
    token = unique_name("adm")
    api = client.AdmissionregistrationV1Api(cluster.api_client)
    api.create_mutating_webhook_configuration({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": token},
        "webhooks": [{
            "name": "stamp.policy.example", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 5,
            "clientConfig": {"url": hook.url,
                             "caBundle": base64.b64encode(hook.cert.read_bytes()).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                       "operations": ["CREATE", "UPDATE"]}],
            "namespaceSelector": {"matchLabels": {"admission-test": token}},
            "objectSelector": {"matchLabels": {REPLICA_LABEL: "true"}},
        }]})
    try:
        yield token
    finally:
        api.delete_mutating_webhook_configuration(token)
        hook.stop()


def replicas(cluster: Cluster, token: str) -> dict[str, client.V1ConfigMap]:
    spaces = [n.metadata.name for n in cluster.core.list_namespace(
        label_selector=f"admission-test={token},target=yes").items]
    found = {ns: read(cluster, ns, "ca") for ns in spaces}
    return {ns: cm for ns, cm in found.items() if cm is not None}


def writes(operator: Operator, action: str) -> float:
    return operator.metric("configmirror_replica_writes_total", action=action)


def test_a_webhook_that_changes_every_replica_causes_one_write_per_change_not_a_loop(
        cluster: Cluster, namespaces: Namespaces, operators: Operators,
        webhook: str) -> None:
    token = webhook
    src = namespaces()
    targets = [namespaces(labels={"admission-test": token, "target": "yes"}) for _ in range(3)]
    probe = configmap("probe", {}, data={}, labels={REPLICA_LABEL: "true"})
    wait_for(lambda: OWNER_LABEL in (cluster.core.create_namespaced_config_map(
        targets[0], probe, dry_run="All").metadata.labels or {}),
        what="the API server to call the new webhook")
    operator = operators()
    cluster.core.create_namespaced_config_map(src, configmap(
        "ca", {REPLICATE_TO_MATCHING: f"admission-test={token},target=yes"}, data={"v": "1"}))

    def converged(v: str) -> bool:
        found = replicas(cluster, token)
        return len(found) == 3 and all(
            cm.data == {"v": v} and cm.metadata.labels.get(OWNER_LABEL) == "team"
            for cm in found.values())

    wait_for(lambda: converged("1"), what="3 replicas, as the webhook stored them")
    operator.wait_idle()
    cluster.core.patch_namespaced_config_map("ca", src, {"data": {"v": "2"}})
    wait_for(lambda: converged("2"), what="the edit to reach the 3 replicas")
    operator.wait_idle()
    assert (writes(operator, "create"), writes(operator, "update")) == (3, 3), \
        "one write per replica per change of the source, never a rewrite of the stamp"
    stamps = {ns: cm.metadata.annotations[STAMP] for ns, cm in replicas(cluster, token).items()}

    def warnings() -> int:
        return sum(e.count or 1 for e in events(cluster, src, "ca", "ReplicaMutated"))

    wait_for(lambda: warnings() >= 2, what="a ReplicaMutated Event for each source version")
    message = events(cluster, src, "ca", "ReplicaMutated")[0].message
    assert f"label {OWNER_LABEL} added" in message and f"annotation {STAMP} added" in message

    edited = targets[1]
    cluster.core.patch_namespaced_config_map("ca", edited, {"data": {"v": "by hand"}})
    wait_for(lambda: converged("2") and replicas(cluster, token)[edited].metadata.annotations[
        STAMP] != stamps[edited], what="the hand-edited replica to be repaired")
    operator.wait_idle()
    assert writes(operator, "update") == 4, "only the edited replica is written"
    assert warnings() == 2, "once per version of the source, not per write or per replica"

    assert operator.stop() == 0
    restarted = operators()
    wait_for(lambda: restarted.metric("configmirror_reconciles_total", role="source") >= 1,
             what="the restarted operator to plan the source, and so look at its replicas")
    restarted.wait_idle()
    assert restarted.writes() == 0, \
        "what the server made of the writes is on the replicas: a restart writes nothing"
    assert all(cm.data == {"v": "2"} for cm in replicas(cluster, token).values())


# -- a MutatingAdmissionPolicy, and the commands that remember nothing -------------------------


def policy_api(cluster: Cluster) -> str:
    """The served version of MutatingAdmissionPolicy (GA or beta, whichever this server has)."""
    groups = client.ApisApi(cluster.api_client).get_api_versions().groups
    versions = [v.version for g in groups if g.name == "admissionregistration.k8s.io"
                for v in g.versions]
    for version in ("v1", "v1beta1", "v1alpha1"):
        if version in versions and any(
                r.kind == "MutatingAdmissionPolicy" for r in client.CustomObjectsApi(
                    cluster.api_client).get_api_resources(
                        "admissionregistration.k8s.io", version).resources):
            return version
    raise AssertionError(f"the API server serves no MutatingAdmissionPolicy ({versions})")


Policy = Callable[[str], str]

# MutatingAdmissionPolicy is served by default from Kubernetes 1.36 (GA); 1.32 has it only as
# an alpha API behind a feature gate that no managed cluster turns on.
NEEDS_MUTATING_POLICY = pytest.mark.kubernetes(
    since="1.36", reason="MutatingAdmissionPolicy (GA in 1.36; in 1.32 an alpha API, off)")


@pytest.fixture
def mutating_policy(cluster: Cluster) -> Iterator[Policy]:
    """Installs MutatingAdmissionPolicies: `mutating_policy(expression)` applies one (a CEL
    ApplyConfiguration) to our replicas in namespaces labelled `mutate=yes` and
    `admission-test=<token>`, and returns the token."""
    api = client.CustomObjectsApi(cluster.api_client)
    version = policy_api(cluster)
    made: list[str] = []

    def install(expression: str) -> str:
        token = unique_name("map")
        group = "admissionregistration.k8s.io"
        api.create_cluster_custom_object(group, version, "mutatingadmissionpolicies", {
            "apiVersion": f"{group}/{version}", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": token},
            "spec": {
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                    "operations": ["CREATE", "UPDATE"]}]},
                "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "ApplyConfiguration",
                               "applyConfiguration": {"expression": expression}}]}})
        made.append(token)
        api.create_cluster_custom_object(group, version, "mutatingadmissionpolicybindings", {
            "apiVersion": f"{group}/{version}", "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": token},
            "spec": {"policyName": token, "matchResources": {
                "namespaceSelector": {"matchLabels": {"mutate": "yes", "admission-test": token}},
                "objectSelector": {"matchLabels": {REPLICA_LABEL: "true"}}}}})
        return token

    yield install
    for token in made:
        for plural in ("mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
            api.delete_cluster_custom_object("admissionregistration.k8s.io", version, plural,
                                             token)


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "configmirror", *args, "--kubeconfig",
                           str(cluster.kubeconfig)], capture_output=True, text=True,
                          timeout=90, check=False)


def commands_agree_it_is_in_sync(cluster: Cluster, source: str) -> None:
    """`status` says every target in sync, `wait` exits 0, `plan` has nothing to do."""
    status = cli(cluster, "status", source, "-o", "json")
    assert status.returncode == 0, status.stdout + status.stderr
    (found,) = json.loads(status.stdout)["sources"]
    assert (found["targets"], found["in_sync"], found["pending"]) == (3, 3, []), found
    waited = cli(cluster, "wait", source, "--timeout", "20s")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    planned = cli(cluster, "plan", "--namespace", source.split("/", maxsplit=1)[0])
    assert planned.returncode == 0, planned.stdout + planned.stderr


def team_scene(namespaces: Namespaces, token: str) -> tuple[str, list[str]]:
    """A source namespace and three team namespaces, the last two labelled mutate=yes."""
    home = namespaces()
    teams = [namespaces(name=f"{home}-team-{t}", labels=labels) for t, labels in (
        ("a", {}), ("b", {"mutate": "yes", "admission-test": token}),
        ("c", {"mutate": "yes", "admission-test": token}))]
    return home, teams


def wait_for_policy(cluster: Cluster, namespace: str, check: Callable[[Any], bool]) -> None:
    probe = configmap("probe", {}, data={"mode": "strict"}, labels={REPLICA_LABEL: "true"})
    wait_for(lambda: check(cluster.core.create_namespaced_config_map(
        namespace, probe, dry_run="All")), what="the API server to apply the new policy")


@NEEDS_MUTATING_POLICY
def test_a_policy_that_labels_replicas_is_in_sync_for_run_status_wait_plan_and_a_restart(
        cluster: Cluster, namespaces: Namespaces, operators: Operators,
        mutating_policy: Policy) -> None:
    token = mutating_policy(
        'Object{metadata: Object.metadata{labels: {"policy.example/owner": "team"}}}')
    home, teams = team_scene(namespaces, token)
    wait_for_policy(cluster, teams[1], lambda cm: OWNER_LABEL in (cm.metadata.labels or {}))
    operator = operators()
    cluster.core.create_namespaced_config_map(home, configmap(
        "ca", {REPLICATE_TO: f"{home}-team-*"}, data={"ca.crt": "1"}))

    def converged(v: str) -> bool:
        found = [read(cluster, ns, "ca") for ns in teams]
        return all(cm is not None and cm.data == {"ca.crt": v} for cm in found) and all(
            OWNER_LABEL in (cm.metadata.labels or {}) for cm in found[1:] if cm is not None)

    wait_for(lambda: converged("1"), what="3 replicas, two of them labelled by the policy")
    operator.wait_idle()
    assert operator.writes() == 3, "each replica written once, and left as the server stored it"
    commands_agree_it_is_in_sync(cluster, f"{home}/ca")

    cluster.core.patch_namespaced_config_map("ca", home, {"data": {"ca.crt": "2"}})
    wait_for(lambda: converged("2"), what="the edit to reach the 3 replicas")
    operator.wait_idle()
    assert operator.writes() == 6, "one write per replica per change of the source"
    commands_agree_it_is_in_sync(cluster, f"{home}/ca")
    assert all(ADMITTED not in (read(cluster, ns, "ca").metadata.annotations or {})  # type: ignore[union-attr]
               for ns in teams), "a label configmirror does not write needs no mark"
    restart_writes_nothing(operator, operators)


@NEEDS_MUTATING_POLICY
def test_a_policy_that_rewrites_a_data_key_keeps_it_and_the_commands_agree(
        cluster: Cluster, namespaces: Namespaces, operators: Operators,
        mutating_policy: Policy) -> None:
    """What `run` does when admission changes a field configmirror writes: it keeps what the
    server stores (writing it again would be changed again), names the field on the replica
    (configmirror.io/admitted, one patch the first time), warns once per source version, and
    calls the replica in sync; every other field is still repaired."""
    token = mutating_policy('Object{data: {"mode": "audit"}}')
    home, teams = team_scene(namespaces, token)
    wait_for_policy(cluster, teams[1], lambda cm: (cm.data or {}).get("mode") == "audit")
    operator = operators()
    cluster.core.create_namespaced_config_map(home, configmap(
        "ca", {REPLICATE_TO: f"{home}-team-*"}, data={"ca.crt": "1", "mode": "strict"}))

    def converged(v: str) -> bool:
        found = [read(cluster, ns, "ca") for ns in teams]
        return all(cm is not None and (cm.data or {}).get("ca.crt") == v for cm in found) and \
            [(cm.data or {}).get("mode") for cm in found if cm is not None] == [
                "strict", "audit", "audit"] and all(
                (cm.metadata.annotations or {}).get(ADMITTED) == "data/mode"
                for cm in found[1:] if cm is not None)

    wait_for(lambda: converged("1"), what="3 replicas, the policy's key marked on two")
    operator.wait_idle()
    assert (writes(operator, "create"), writes(operator, "admitted")) == (3, 2), \
        "each replica written once, and the two the policy changed marked once"
    commands_agree_it_is_in_sync(cluster, f"{home}/ca")
    wait_for(lambda: len(events(cluster, home, "ca", "ReplicaMutated")) >= 1,
             what="a ReplicaMutated Event")
    assert "data key mode changed" in events(cluster, home, "ca", "ReplicaMutated")[0].message

    cluster.core.patch_namespaced_config_map("ca", home, {"data": {"ca.crt": "2"}})
    wait_for(lambda: converged("2"), what="the edit to reach the 3 replicas")
    operator.wait_idle()
    assert (writes(operator, "update"), writes(operator, "admitted")) == (3, 2), \
        "a source edit is one write per replica: the writes carry the mark"
    commands_agree_it_is_in_sync(cluster, f"{home}/ca")

    cluster.core.patch_namespaced_config_map("ca", teams[2], {"data": {"ca.crt": "by hand"}})
    wait_for(lambda: converged("2") and writes(operator, "update") == 4,
             what="the hand-edited key to be repaired")
    operator.wait_idle()
    assert operator.writes() == 3 + 2 + 4
    commands_agree_it_is_in_sync(cluster, f"{home}/ca")
    restart_writes_nothing(operator, operators)
