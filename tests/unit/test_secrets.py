"""Secrets: the same contract with their own payload (type), and no value ever shown."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from configmirror.client.kube import ApiError
from configmirror.operator.replicator import redacted
from configmirror.operator.settings import DEFAULT_EXCLUDED
from configmirror.replication.model import CachedObject
from configmirror.replication.plan import decide, desired_body, plan_source
from configmirror.replication.spec import COPY_KEYS, REPLICA_TYPE, REPLICATE_TO, Scope
from configmirror.vocabulary import CONFIGMAP, SECRET
from configmirror_testing.builders import AT_ONCE, cached, ns, world

SCOPE = Scope.from_flags("*", DEFAULT_EXCLUDED)
CERT = base64.b64encode(b"-----BEGIN CERTIFICATE----- marker-123 -----END").decode()


def secret(type_: str = "kubernetes.io/tls", data: dict[str, str] | None = None,
           annotations: dict[str, str] | None = None, namespace: str = "src",
           rv: str = "10") -> CachedObject:
    return cached({
        "metadata": {"namespace": namespace, "name": "tls", "uid": "u", "resourceVersion": rv,
                     "annotations": {REPLICATE_TO: "a"} if annotations is None else annotations},
        "type": type_, "data": {"tls.crt": CERT, "tls.key": "a2V5"} if data is None else data,
    }, SECRET)


def replica(src: CachedObject, namespace: str, **edits: Any) -> CachedObject:
    body = copy.deepcopy(desired_body(src, namespace))
    body["metadata"].update(uid="r", resourceVersion="20")
    body.update(edits)
    return cached(body, SECRET)


def test_a_secret_replica_is_a_secret_of_the_same_type_and_data() -> None:
    src = secret()
    body = desired_body(src, "a")
    assert (body["kind"], body["type"]) == ("Secret", "kubernetes.io/tls")
    assert body["data"] == {"tls.crt": CERT, "tls.key": "a2V5"}
    assert "binaryData" not in body and "immutable" not in body
    assert replica(src, "a").content_hash == src.compiled.content_hash  # type: ignore[union-attr]


def test_a_replica_whose_type_must_change_is_recreated() -> None:
    old, new = secret("Opaque"), secret("kubernetes.io/tls")
    current = replica(old, "a")
    w = world([new, current], [ns("src"), ns("a")], SECRET)
    p = decide("a", "tls", current, w, SCOPE, AT_ONCE)
    assert p.action is not None and p.action.kind == "recreate"
    assert replica(old, "a").type == "Opaque"


def test_a_data_change_is_an_update_and_in_sync_is_nothing() -> None:
    src = secret()
    rotated = secret(data={"tls.crt": "bmV3", "tls.key": "bmV3"})
    replicas = [replica(src, "a")]
    w = world([rotated, *replicas], [ns("src"), ns("a")], SECRET)
    whole = plan_source(src.key, w, w.get, SCOPE, AT_ONCE)
    assert [(a.kind, a.namespace) for a in whole.actions] == [("update", "a")]
    w = world([src, *replicas], [ns("src"), ns("a")], SECRET)
    in_sync = plan_source(src.key, w, w.get, SCOPE, AT_ONCE)
    assert in_sync.in_sync


def test_a_service_account_token_source_is_an_invalid_spec() -> None:
    src = secret("kubernetes.io/service-account-token")
    assert src.compiled is not None and src.compiled.invalid is not None
    assert "service-account-token" in src.compiled.invalid
    w = world([src], [ns("src"), ns("a")], SECRET)
    p = plan_source(src.key, w, w.get, SCOPE, AT_ONCE)
    assert p.invalid is not None and p.actions == ()


def test_a_configmap_and_a_secret_hash_differently_and_type_defaults_to_opaque() -> None:
    untyped = cached({"metadata": {"namespace": "src", "name": "s", "uid": "u",
                                   "resourceVersion": "1", "annotations": {REPLICATE_TO: "a"}},
                      "data": {"k": "dg=="}}, SECRET)
    assert untyped.compiled is not None and untyped.compiled.payload["type"] == "Opaque"


def test_what_plan_shows_of_a_secret_is_key_names_sizes_and_a_hash() -> None:
    src = secret()
    w = world([src], [ns("src"), ns("a")], SECRET)
    p = plan_source(src.key, w, w.get, SCOPE, AT_ONCE)
    assert p.kind == "Secret"
    assert p.content == {"keys": {"tls.crt": len(CERT), "tls.key": 4},
                         "hash": src.compiled.content_hash}  # type: ignore[union-attr]
    assert "marker-123" not in str(p.to_json()) and CERT not in str(p.to_json())


def test_a_compiled_source_never_shows_its_values() -> None:
    src = secret()
    for text in (repr(src), str(src), repr(src.compiled)):
        assert CERT not in text and "marker-123" not in text


def test_api_errors_lose_every_value_of_the_source_in_any_encoding() -> None:
    decoded = base64.b64decode(CERT).decode()
    err = ApiError(422, "Invalid", f'data[tls.crt]: Invalid value: "{decoded}" and {CERT}',
                   "create", "/api/v1/namespaces/a/secrets")
    clean = redacted(err, {"tls.crt": CERT})
    assert CERT not in str(clean) and decoded not in str(clean)
    assert "marker-123" not in str(clean) and "[redacted]" in clean.message
    assert (clean.status, clean.verb, clean.path) == (422, "create", "/api/v1/namespaces/a/secrets")
    plain = ApiError(403, "Forbidden", "no", "create", "/p")
    assert redacted(plain, {"tls.crt": CERT}) is plain


# -- copy-keys and replica-type ------------------------------------------------------------------

CA = base64.b64encode(b"-----BEGIN CERTIFICATE----- ca -----END").decode()


def issued(annotations: dict[str, str], type_: str = "kubernetes.io/tls",
           data: dict[str, str] | None = None) -> CachedObject:
    return cached({
        "metadata": {"namespace": "src", "name": "tls", "uid": "u", "resourceVersion": "10",
                     "annotations": {REPLICATE_TO: "a", **annotations}},
        "type": type_, "data": data or {"tls.crt": CERT, "tls.key": "a2V5", "ca.crt": CA}},
        SECRET)


def test_a_tls_source_that_copies_only_the_ca_needs_another_replica_type() -> None:
    src = issued({COPY_KEYS: "ca.crt"})
    assert src.compiled is not None and src.compiled.invalid is not None
    assert src.compiled.invalid == (
        f"{COPY_KEYS}: a Secret of type kubernetes.io/tls needs tls.crt, tls.key, which it "
        f"leaves out; copy them, or give the replicas another type with {REPLICA_TYPE}: Opaque")
    w = world([src], [ns("src"), ns("a")], SECRET)
    assert plan_source(src.key, w, w.get, SCOPE, AT_ONCE).actions == ()


def test_replica_type_opaque_gives_opaque_replicas_with_only_the_ca() -> None:
    src = issued({COPY_KEYS: "ca.crt", REPLICA_TYPE: "Opaque"})
    assert src.compiled is not None and src.compiled.invalid is None
    body = desired_body(src, "a")
    assert (body["type"], body["data"]) == ("Opaque", {"ca.crt": CA})
    assert replica(src, "a").content_hash == src.compiled.content_hash
    w = world([src], [ns("src"), ns("a")], SECRET)
    p = plan_source(src.key, w, w.get, SCOPE, AT_ONCE)
    assert p.content is not None and set(p.content["keys"]) == {"ca.crt"}


def test_an_existing_replica_whose_replica_type_changes_is_recreated() -> None:
    full = issued({})
    ca_only = issued({COPY_KEYS: "ca.crt", REPLICA_TYPE: "Opaque"})
    current = replica(full, "a")
    w = world([ca_only, current], [ns("src"), ns("a")], SECRET)
    d = decide("a", "tls", current, w, SCOPE, AT_ONCE)
    assert d.action is not None and d.action.kind == "recreate"


def test_an_edit_of_a_key_that_is_not_copied_changes_nothing_a_replica_holds() -> None:
    spec = {COPY_KEYS: "*,!tls.key", REPLICA_TYPE: "Opaque"}
    before = issued(spec)
    rotated = issued(spec, data={"tls.crt": CERT, "tls.key": "bmV3", "ca.crt": CA})
    assert before.compiled is not None and rotated.compiled is not None
    assert before.compiled.content_hash == rotated.compiled.content_hash
    assert "tls.key" not in before.compiled.payload["data"]
    still_tls = issued({COPY_KEYS: "*,!tls.key"})
    assert still_tls.compiled is not None and "needs tls.key" in str(still_tls.compiled.invalid)


@pytest.mark.parametrize(("type_", "annotations", "fault"), [
    ("kubernetes.io/tls", {REPLICA_TYPE: "kubernetes.io/tls", COPY_KEYS: "tls.crt"},
     f"{REPLICA_TYPE}: a Secret of type kubernetes.io/tls needs tls.key"),
    ("Opaque", {REPLICA_TYPE: "kubernetes.io/service-account-token"}, "ServiceAccount"),
    ("Opaque", {REPLICA_TYPE: "not a type"}, "is not a Secret type"),
    ("kubernetes.io/basic-auth", {COPY_KEYS: "ca.crt"}, "needs username or password"),
    ("kubernetes.io/dockerconfigjson", {COPY_KEYS: "ca.crt"}, "needs .dockerconfigjson"),
    ("kubernetes.io/ssh-auth", {COPY_KEYS: "ca.crt"}, "needs ssh-privatekey"),
])
def test_a_replica_type_the_api_would_reject_for_those_keys_is_an_invalid_spec(
        type_: str, annotations: dict[str, str], fault: str) -> None:
    src = issued(annotations, type_)
    assert src.compiled is not None and fault in str(src.compiled.invalid)


def test_replica_type_on_a_configmap_is_an_invalid_spec() -> None:
    cm = cached({"metadata": {"namespace": "src", "name": "cfg", "uid": "u",
                              "resourceVersion": "1",
                              "annotations": {REPLICATE_TO: "a", REPLICA_TYPE: "Opaque"}},
                 "data": {"k": "v"}}, CONFIGMAP)
    assert cm.compiled is not None and "only a Secret has a type" in str(cm.compiled.invalid)


def test_copy_keys_on_a_configmap_filters_data_and_binary_data_with_globs_and_excludes() -> None:
    cm = cached({"metadata": {"namespace": "src", "name": "cfg", "uid": "u",
                              "resourceVersion": "1", "annotations": {
                                  REPLICATE_TO: "a", COPY_KEYS: "app.*,logo.png,!app.secret"}},
                 "data": {"app.yaml": "x", "app.secret": "y", "other": "z"},
                 "binaryData": {"logo.png": "iVBO", "big.bin": "AAAA"}}, CONFIGMAP)
    body = desired_body(cm, "a")
    assert body["data"] == {"app.yaml": "x"} and body["binaryData"] == {"logo.png": "iVBO"}


def test_cert_manager_marks_never_reach_a_replica() -> None:
    src = cached({"metadata": {
        "namespace": "src", "name": "tls", "uid": "u", "resourceVersion": "1",
        "labels": {"controller.cert-manager.io/fao": "true", "team": "a"},
        "annotations": {REPLICATE_TO: "a", "cert-manager.io/certificate-name": "wildcard",
                        "cert-manager.io/issuer-name": "le", "cert-manager.io/issuer-kind":
                        "ClusterIssuer", "cert-manager.io/common-name": "*.example.com",
                        "cert-manager.io/alt-names": "*.example.com", "owner": "platform"}},
        "type": "kubernetes.io/tls", "data": {"tls.crt": CERT, "tls.key": "a2V5"}}, SECRET)
    meta = desired_body(src, "a")["metadata"]
    assert set(meta["labels"]) == {"team", "configmirror.io/replica",
                                   "app.kubernetes.io/managed-by"}
    assert set(meta["annotations"]) == {"owner", "configmirror.io/replica-of",
                                        "configmirror.io/content-hash"}
