"""Replicas that admission changes: a real mutating webhook (the kind a policy engine runs)
labels and stamps every replica the operator writes. configmirror keeps what the server
stores instead of rewriting it forever, still repairs a replica edited by hand, and says
once per source version what the server changed.
"""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from configmirror.model import REPLICA_LABEL
from configmirror.spec import REPLICATE_TO_MATCHING
from configmirror_testing.cluster import Cluster, Namespaces, unique_name
from configmirror_testing.e2e import Operator, Operators, configmap, events, read
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
    wait_for(lambda: restarted.metric("configmirror_reconciles_total", role="target") >= 3,
             what="the restarted operator to look at the replicas")
    restarted.wait_idle()
    assert writes(restarted, "update") == 3 and restarted.writes() == 3, \
        "what the server made of the writes is not kept across a restart: one write each"
    assert all(cm.data == {"v": "2"} for cm in replicas(cluster, token).values())
