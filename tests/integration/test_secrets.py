"""Secrets, opt-in and least-privilege: the same contract as ConfigMaps, nothing leaked.

The operator runs as deploy/'s ServiceAccount with only deploy/'s RBAC plus the
deploy/components/secrets component, exactly as a user would install it.
"""

from __future__ import annotations

import base64
import json
import os
import secrets as random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from configmirror.replication.spec import PULL, PULL_ALLOWED, REPLICATE_TO, REPLICATE_TO_MATCHING
from configmirror_testing.cluster import REPO, Cluster, Namespaces
from configmirror_testing.e2e import Operators, events, restart_writes_nothing
from configmirror_testing.installs import deploy_with_components, read_secret
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane
COMPONENT = REPO / "deploy" / "components" / "secrets"
TLS, REGISTRY = "wildcard-tls", "registry-credentials"
USER = "system:serviceaccount:configmirror:configmirror"


@pytest.fixture(scope="module")
def secrets_kubeconfig(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
                       ) -> Iterator[Path]:
    """deploy/ with the Secrets component applied for real; a kubeconfig holding only a
    token of its ServiceAccount."""
    with deploy_with_components(
            cluster, tmp_path_factory.mktemp("secrets-install"), ["secrets"],
            [Path("secrets") / part for part in ("rbac.yaml", "admission.yaml")]) as kubeconfig:
        yield kubeconfig


@pytest.fixture
def start(operators: Operators, secrets_kubeconfig: Path) -> Any:
    def start(*flags: str, wait: bool = True) -> Any:
        return operators("--secret-names", f"{TLS},{REGISTRY}",
                         "--secret-source-namespaces", "*", *flags,
                         kubeconfig=secrets_kubeconfig, wait=wait)
    return start


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def tls_secret(name: str, annotations: dict[str, str], cert: bytes, key: bytes,
               type_: str = "kubernetes.io/tls") -> dict[str, Any]:
    data = {"tls.crt": b64(cert), "tls.key": b64(key)} if type_ == "kubernetes.io/tls" \
        else {"blob": b64(cert)}
    return {"apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": {"name": name, "annotations": annotations}, "data": data}


def test_the_admission_policy_refuses_the_service_account_a_secret_of_another_name(
        cluster: Cluster, namespaces: Namespaces, secrets_kubeconfig: Path) -> None:
    ns = namespaces()
    core = client.CoreV1Api(config.new_client_from_config(str(secrets_kubeconfig)))

    def create(name: str, dry_run: bool = False) -> int:
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                "data": {"k": b64(b"v")}}
        try:
            core.create_namespaced_secret(ns, body, dry_run="All" if dry_run else None)
        except client.ApiException as err:
            return int(err.status)
        return 201

    # RBAC lets the create through (it cannot check a name); the policy, once the API server
    # has loaded it, does not. A dry run asks admission without writing anything.
    wait_for(lambda: create("db-password", dry_run=True) == 403, timeout=30,
             what="the admission policy to be in force")
    assert create("db-password") == 403
    assert cluster.core.list_namespaced_secret(ns).items == []
    assert create(TLS) == 201 and create(REGISTRY) == 201, "the listed names pass"
    # Anyone else is untouched by it.
    cluster.core.create_namespaced_secret(ns, {"apiVersion": "v1", "kind": "Secret",
                                               "metadata": {"name": "db-password"}})


@pytest.mark.parametrize(("verb", "resource", "scope", "allowed"), [
    ("list", f"secrets/{TLS}", [], True),
    ("watch", f"secrets/{REGISTRY}", [], True),
    ("update", f"secrets/{TLS}", ["-n", "default"], True),
    ("delete", f"secrets/{TLS}", ["-n", "default"], True),
    ("patch", f"secrets/{TLS}", ["-n", "default"], True),  # releasing a replica
    ("patch", "secrets/db-password", ["-n", "default"], False),
    ("create", "secrets", ["-n", "default"], True),
    ("get", "secrets/db-password", ["-n", "default"], False),
    ("update", "secrets/db-password", ["-n", "default"], False),
    ("list", "secrets", [], False),
    ("watch", "secrets", [], False),
    ("get", f"secrets/{TLS}", ["-n", "default"], False),
])
def test_the_service_account_may_touch_only_the_listed_names(
        cluster: Cluster, secrets_kubeconfig: Path, verb: str, resource: str,
        scope: list[str], allowed: bool) -> None:
    done = cluster.require_plane().kubectl(
        "auth", "can-i", verb, resource, *(scope or ["--all-namespaces"]),
        kubeconfig=secrets_kubeconfig, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stdout + done.stderr


def test_tls_and_pull_secrets_replicate_by_glob_and_selector_byte_exact_and_rotate(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    src, a, b = namespaces(), namespaces(), namespaces(labels={"pull": "yes"})
    cert, key = random.token_bytes(1500), random.token_bytes(1200)  # binary, not text
    dockercfg = json.dumps({"auths": {"registry.example.com": {"auth": b64(b"u:p")}}})
    cluster.core.create_namespaced_secret(src, tls_secret(TLS, {REPLICATE_TO: a}, cert, key))
    cluster.core.create_namespaced_secret(src, {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": REGISTRY, "annotations": {REPLICATE_TO_MATCHING: "pull=yes"}},
        "data": {".dockerconfigjson": b64(dockercfg.encode())}})
    operator = start()
    tls = wait_for(lambda: read_secret(cluster, a, TLS), what="the TLS replica")
    pull = wait_for(lambda: read_secret(cluster, b, REGISTRY), what="the pull-secret replica")
    assert tls.type == "kubernetes.io/tls" and pull.type == "kubernetes.io/dockerconfigjson"
    assert base64.b64decode(tls.data["tls.crt"]) == cert
    assert base64.b64decode(tls.data["tls.key"]) == key
    assert base64.b64decode(pull.data[".dockerconfigjson"]).decode() == dockercfg
    assert tls.metadata.labels["configmirror.io/replica"] == "true"
    assert read_secret(cluster, b, TLS) is None and read_secret(cluster, a, REGISTRY) is None

    new_cert, new_key = random.token_bytes(1500), random.token_bytes(1200)
    cluster.core.patch_namespaced_secret(TLS, src, {"data": {
        "tls.crt": b64(new_cert), "tls.key": b64(new_key)}})
    wait_for(lambda: base64.b64decode(read_secret(cluster, a, TLS).data["tls.crt"])  # type: ignore[union-attr]
             == new_cert, what="the rotation to reach the replica")
    assert base64.b64decode(read_secret(cluster, a, TLS).data["tls.key"]) == new_key  # type: ignore[union-attr]
    operator.wait_idle()
    assert operator.metric("configmirror_replica_writes_total", resource="secrets") == 3


def test_a_pulled_secret_replicates_with_its_type_under_the_same_rbac(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    src, team, other = namespaces(), namespaces(), namespaces()
    cert, key = random.token_bytes(800), random.token_bytes(600)
    cluster.core.create_namespaced_secret(src, tls_secret(TLS, {PULL_ALLOWED: team}, cert, key))
    for ns in (team, other):
        cluster.core.patch_namespace(ns, {"metadata": {"annotations": {
            PULL: f"secret/{src}/{TLS}, secret/{src}/db-password"}}})
    operator = start()  # deploy/'s Secrets component: no new permission for pulls
    tls = wait_for(lambda: read_secret(cluster, team, TLS), what="the pulled TLS replica")
    assert tls.type == "kubernetes.io/tls" and base64.b64decode(tls.data["tls.crt"]) == cert
    operator.wait_idle()
    assert read_secret(cluster, other, TLS) is None, "consent is for team only"
    said = [e.message for e in cluster.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.kind=Namespace,involvedObject.name={team}"
    ).items if e.reason == "PullNotAllowed"]
    assert len(said) == 1 and "db-password" in said[0] and "--secret-names" in said[0]


def test_a_replica_whose_source_changed_type_is_recreated_with_the_new_type(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_secret(src, tls_secret(
        TLS, {REPLICATE_TO: a}, b"opaque", b"", type_="Opaque"))
    first = start()
    opaque = wait_for(lambda: read_secret(cluster, a, TLS), what="the Opaque replica")
    assert opaque.type == "Opaque"
    assert first.stop() == 0
    # A Secret's type cannot change in place: its owner deletes it and creates it again.
    cluster.core.delete_namespaced_secret(TLS, src)
    cluster.core.create_namespaced_secret(src, tls_secret(
        TLS, {REPLICATE_TO: a}, b"cert", b"key"))
    start()
    recreated = wait_for(lambda: (s := read_secret(cluster, a, TLS)) is not None
                         and s.type == "kubernetes.io/tls" and s, what="the replica recreated")
    assert recreated.metadata.uid != opaque.metadata.uid
    assert base64.b64decode(recreated.data["tls.crt"]) == b"cert"


def test_a_foreign_secret_of_a_listed_name_is_never_modified_and_unlisted_names_never_read(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    src, a, b = namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_secret(a, {"metadata": {"name": TLS},
                                              "data": {"mine": b64(b"theirs")}})
    cluster.core.create_namespaced_secret(src, tls_secret(
        TLS, {REPLICATE_TO: f"{a},{b}"}, b"cert", b"key"))
    cluster.core.create_namespaced_secret(src, tls_secret(
        "db-password", {REPLICATE_TO: f"{a},{b}"}, b"pw", b"", type_="Opaque"))
    operator = start()
    wait_for(lambda: read_secret(cluster, b, TLS), what="the replica where the name is free")
    conflict = wait_for(lambda: events(cluster, src, TLS, "TargetConflict"),
                        what="TargetConflict")
    assert "not a replica" in conflict[0].message
    operator.wait_idle()
    foreign = read_secret(cluster, a, TLS)
    assert foreign is not None and foreign.data == {"mine": b64(b"theirs")}
    assert read_secret(cluster, a, "db-password") is None
    for event in cluster.audit(USER):
        ref = event.get("objectRef") or {}
        if ref.get("resource") != "secrets":
            continue
        # In this test's namespaces (the admission-policy test makes the same identity try
        # an unlisted name on purpose, elsewhere).
        assert ref.get("name") != "db-password" or ref.get("namespace") not in (src, a, b), \
            "an unlisted Secret was touched"
        if event["verb"] in ("list", "watch"):  # only ever by a listed name
            assert any(f"metadata.name%3D{n}" in event["requestURI"] for n in (TLS, REGISTRY)), \
                event["requestURI"]


def test_a_service_account_token_source_is_an_invalid_spec_and_nothing_else_happens(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_service_account(src, {"metadata": {"name": "robot"}})
    cluster.core.create_namespaced_secret(src, {
        "metadata": {"name": TLS, "annotations": {
            REPLICATE_TO: a, "kubernetes.io/service-account.name": "robot"}},
        "type": "kubernetes.io/service-account-token"})
    operator = start()
    invalid = wait_for(lambda: events(cluster, src, TLS, "InvalidSpec"), what="InvalidSpec")
    assert "service-account-token" in invalid[0].message
    operator.wait_idle()
    assert read_secret(cluster, a, TLS) is None and operator.writes() == 0


def test_restart_with_nothing_changed_writes_no_secret(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    src, a = namespaces(), namespaces()
    cluster.core.create_namespaced_secret(src, tls_secret(TLS, {REPLICATE_TO: a}, b"c", b"k"))
    first = start()
    wait_for(lambda: read_secret(cluster, a, TLS), what="the replica")
    restart_writes_nothing(first, start)


def plan_output(cluster: Cluster, kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "configmirror", "plan", "--kubeconfig", str(kubeconfig),
         "--secret-names", f"{TLS},{REGISTRY}", "--secret-source-namespaces", "*", *args],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "CONFIGMIRROR_LOG_LEVEL": "debug"})
    assert done.returncode in (0, 2), done.stderr
    return done.stdout + done.stderr


def test_no_secret_value_appears_in_logs_events_plan_or_metrics(
        cluster: Cluster, namespaces: Namespaces, start: Any,
        secrets_kubeconfig: Path) -> None:
    marker = f"leak-{random.token_hex(8)}"
    src, a, b = namespaces(), namespaces(), namespaces()
    cluster.core.create_namespaced_secret(a, {"metadata": {"name": REGISTRY},
                                              "data": {"x": b64(marker.encode())}})
    for name, target in ((TLS, f"{a},{b}"), (REGISTRY, f"{a},{b}")):
        cluster.core.create_namespaced_secret(src, tls_secret(
            name, {REPLICATE_TO: target}, marker.encode() * 3, marker.encode(), "Opaque"))
    cluster.core.create_namespaced_secret(src, {  # an invalid one, whose Event has a message
        "metadata": {"name": "db-password", "annotations": {REPLICATE_TO: "["}},
        "data": {"pw": b64(marker.encode())}})
    before = plan_output(cluster, secrets_kubeconfig, "--namespace", src)
    operator = start("--log-level", "debug", "--dry-run", wait=True)
    operator.wait_idle()
    assert operator.stop() == 0
    operator = start("--log-level", "debug")
    wait_for(lambda: read_secret(cluster, b, TLS) and read_secret(cluster, b, REGISTRY),
             what="the replicas")
    wait_for(lambda: events(cluster, src, REGISTRY, "TargetConflict"), what="the conflict")
    operator.wait_idle()
    cluster.core.patch_namespaced_secret(TLS, src, {"data": {"blob": b64(marker.encode() * 5)}})
    wait_for(lambda: read_secret(cluster, b, TLS).data == {  # type: ignore[union-attr]
        "blob": b64(marker.encode() * 5)}, what="the rotation")
    operator.wait_idle()
    metrics = "\n".join(f"{name} {labels} {value}" for name, labels, value in
                        operator.scrape().samples)
    after = plan_output(cluster, secrets_kubeconfig, "--namespace", src, "--output", "json")
    assert operator.stop() == 0
    every_event = "\n".join(f"{e.reason} {e.message}" for ns in (src, a, b)
                            for e in cluster.core.list_namespaced_event(ns).items)
    places = {"operator log (debug)": operator.log(), "Events": every_event,
              "plan (text)": before, "plan (json)": after, "/metrics": metrics}
    forms = {marker, b64(marker.encode()), b64(marker.encode() * 3), b64(marker.encode() * 5)}
    for where, text in places.items():
        for form in forms:
            assert form not in text, f"a Secret value leaked into the {where}"
    assert "tls.crt" in before or "blob" in before, "plan shows key names"
    assert '"hash"' in after and '"keys"' in after
