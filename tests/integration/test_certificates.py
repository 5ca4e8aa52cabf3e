"""Certificates done right, end to end: no cert-manager marks on replicas, only the keys a
namespace needs (copy-keys), and the replicas' own type (replica-type) where those keys make
another type. What the operator writes is read from the API server's audit log."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
from typing import Any

import pytest
from kubernetes import client

from configmirror.replication.spec import COPY_KEYS, REPLICA_TYPE, REPLICATE_TO
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import (
    Operators,
    configmap,
    events,
    operator_writes,
    read,
    wait_replica,
)
from configmirror_testing.wait import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.operator_process]
NAME = "wildcard-tls"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def read_secret(cluster: Cluster, namespace: str, name: str = NAME) -> client.V1Secret | None:
    try:
        return cluster.core.read_namespaced_secret(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def as_cert_manager_writes_it(annotations: dict[str, str], cert: bytes, key: bytes,
                              ca: bytes) -> dict[str, Any]:
    """A Secret exactly as cert-manager's certificates controller writes one: its type, its
    annotations and label, and the three keys (secretTemplate adds `annotations`)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {
        "name": NAME,
        "labels": {"controller.cert-manager.io/fao": "true", "team": "platform"},
        "annotations": {
            "cert-manager.io/alt-names": "*.example.com,example.com",
            "cert-manager.io/certificate-name": "wildcard",
            "cert-manager.io/common-name": "*.example.com",
            "cert-manager.io/ip-sans": "", "cert-manager.io/uri-sans": "",
            "cert-manager.io/issuer-group": "cert-manager.io",
            "cert-manager.io/issuer-kind": "ClusterIssuer",
            "cert-manager.io/issuer-name": "letsencrypt", "owner": "platform-team",
            **annotations}},
        "data": {"tls.crt": b64(cert), "tls.key": b64(key), "ca.crt": b64(ca)}}


@pytest.fixture
def start(operators: Operators) -> Any:
    def start(*flags: str) -> Any:
        return operators("--secret-names", NAME, "--secret-source-namespaces", "*", *flags)
    return start


def test_a_cert_manager_secret_replicates_without_any_of_cert_managers_marks(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    src, a = namespaces(), namespaces()
    cert, key, ca = (secrets.token_bytes(900) for _ in range(3))
    cluster.core.create_namespaced_secret(src, as_cert_manager_writes_it(
        {REPLICATE_TO: a}, cert, key, ca))
    start()
    replica = wait_for(lambda: read_secret(cluster, a), what="the replica")
    assert replica.type == "kubernetes.io/tls"
    assert {k: base64.b64decode(v) for k, v in replica.data.items()} == {
        "tls.crt": cert, "tls.key": key, "ca.crt": ca}
    assert replica.metadata.labels == {"team": "platform", "configmirror.io/replica": "true",
                                       "app.kubernetes.io/managed-by": "configmirror"}
    assert set(replica.metadata.annotations) == {"owner", "configmirror.io/replica-of",
                                                 "configmirror.io/content-hash"}


def test_a_ca_only_copy_of_a_tls_secret_needs_replica_type_and_then_carries_only_the_ca(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    src, a = namespaces(), namespaces()
    cert, key, ca = b"cert-marker", secrets.token_hex(16).encode(), b"ca-bundle"
    cluster.core.create_namespaced_secret(src, as_cert_manager_writes_it(
        {REPLICATE_TO: a, COPY_KEYS: "ca.crt"}, cert, key, ca))
    operator = start()
    (invalid,) = wait_for(lambda: events(cluster, src, NAME, "InvalidSpec"),
                          what="the InvalidSpec Event")
    assert "needs tls.crt, tls.key" in invalid.message and f"{REPLICA_TYPE}: Opaque" in \
        invalid.message
    operator.wait_idle()
    assert read_secret(cluster, a) is None, "nothing is written for an invalid spec"
    cluster.core.patch_namespaced_secret(NAME, src, {"metadata": {"annotations": {
        REPLICA_TYPE: "Opaque"}}})
    replica = wait_for(lambda: read_secret(cluster, a), what="the CA-only replica")
    assert replica.type == "Opaque" and list(replica.data) == ["ca.crt"]
    assert base64.b64decode(replica.data["ca.crt"]) == ca
    # The private key is rotated: a key the replicas do not carry, so nothing is written.
    operator.wait_idle()
    written = len(operator_writes_of(cluster, [a], "secrets"))
    seen = modified(operator, f"secrets:{NAME}")
    cluster.core.patch_namespaced_secret(NAME, src, {"data": {"tls.key": b64(b"new key")}})
    wait_for(lambda: modified(operator, f"secrets:{NAME}") > seen,
             what="the operator to see the rotated source")
    operator.wait_idle()
    assert len(operator_writes_of(cluster, [a], "secrets")) == written
    # plan shows key names and sizes, never a value.
    shown = subprocess.run([sys.executable, "-m", "configmirror", "plan", "--kubeconfig",
                            str(cluster.kubeconfig), "--secret-names", NAME,
                            "--secret-source-namespaces", "*", "--namespace", src, "--output",
                            "json"], capture_output=True, text=True, timeout=60, check=False)
    (p,) = json.loads(shown.stdout)["plans"]
    assert set(p["content"]["keys"]) == {"ca.crt"}
    for value in (cert, key, ca):
        assert value.decode() not in shown.stdout and b64(value) not in shown.stdout


def modified(operator: Any, informer: str) -> float:
    """MODIFIED events the operator's informer has received: it has seen an edit once this
    grows (and has planned it once it is idle after that)."""
    return float(operator.metric("configmirror_informer_events_total", resource=informer,
                                 type="MODIFIED"))


def operator_writes_of(cluster: Cluster, namespaces: list[str], resource: str
                       ) -> list[dict[str, Any]]:
    return [e for e in cluster.audit() if e.get("userAgent", "").startswith("configmirror/")
            and e.get("verb") in ("create", "update", "patch", "delete")
            and (e.get("objectRef") or {}).get("resource") == resource
            and (e.get("objectRef") or {}).get("namespace") in namespaces]


def test_copy_keys_on_a_configmap_and_an_edit_of_a_key_not_copied_writes_nothing(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: a, COPY_KEYS: "app.*, logo.png, !app.internal"},
        data={"app.yaml": "1", "app.internal": "x", "notes.txt": "n"},
        binaryData={"logo.png": b64(b"\x89PNG"), "raw.bin": b64(b"\x00")}))
    operator = operators()
    replica = wait_replica(cluster, a, {"app.yaml": "1"})
    assert replica.binary_data == {"logo.png": b64(b"\x89PNG")}
    operator.wait_idle()
    written = len(operator_writes(cluster, [a]))
    seen = modified(operator, "configmaps")
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"notes.txt": "edited",
                                                                   "app.internal": "y"}})
    wait_for(lambda: modified(operator, "configmaps") > seen,
             what="the operator to see the edited source")
    operator.wait_idle()
    assert len(operator_writes(cluster, [a])) == written, "no write for keys not copied"
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"app.yaml": "2"}})
    wait_replica(cluster, a, {"app.yaml": "2"})
    assert read(cluster, a, "cfg").binary_data == {"logo.png": b64(b"\x89PNG")}  # type: ignore[union-attr]
