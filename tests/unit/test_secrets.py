"""Secrets: the same contract with their own payload (type), and no value ever shown."""

from __future__ import annotations

import base64
import copy
from typing import Any

from configmirror.kube import ApiError
from configmirror.model import SECRET, CachedObject
from configmirror.plan import decide, desired_body, nothing_admitted, plan_source
from configmirror.replicator import redacted
from configmirror.settings import DEFAULT_EXCLUDED
from configmirror.spec import REPLICATE_TO, Scope
from tests.unit.test_plan import AT_ONCE, cached, ns, world

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
    p = decide("a", "tls", current, w, SCOPE, nothing_admitted, AT_ONCE)
    assert p.action is not None and p.action.kind == "recreate"
    assert replica(old, "a").type == "Opaque"


def test_a_data_change_is_an_update_and_in_sync_is_nothing() -> None:
    src = secret()
    rotated = secret(data={"tls.crt": "bmV3", "tls.key": "bmV3"})
    replicas = [replica(src, "a")]
    w = world([rotated, *replicas], [ns("src"), ns("a")], SECRET)
    whole = plan_source(src.key, w, w.get, SCOPE, nothing_admitted, AT_ONCE)
    assert [(a.kind, a.namespace) for a in whole.actions] == [("update", "a")]
    w = world([src, *replicas], [ns("src"), ns("a")], SECRET)
    in_sync = plan_source(src.key, w, w.get, SCOPE, nothing_admitted, AT_ONCE)
    assert in_sync.in_sync


def test_a_service_account_token_source_is_an_invalid_spec() -> None:
    src = secret("kubernetes.io/service-account-token")
    assert src.compiled is not None and src.compiled.invalid is not None
    assert "service-account-token" in src.compiled.invalid
    w = world([src], [ns("src"), ns("a")], SECRET)
    p = plan_source(src.key, w, w.get, SCOPE, nothing_admitted, AT_ONCE)
    assert p.invalid is not None and p.actions == ()


def test_a_configmap_and_a_secret_hash_differently_and_type_defaults_to_opaque() -> None:
    untyped = cached({"metadata": {"namespace": "src", "name": "s", "uid": "u",
                                   "resourceVersion": "1", "annotations": {REPLICATE_TO: "a"}},
                      "data": {"k": "dg=="}}, SECRET)
    assert untyped.compiled is not None and untyped.compiled.payload["type"] == "Opaque"


def test_what_plan_shows_of_a_secret_is_key_names_sizes_and_a_hash() -> None:
    src = secret()
    w = world([src], [ns("src"), ns("a")], SECRET)
    p = plan_source(src.key, w, w.get, SCOPE, nothing_admitted, AT_ONCE)
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
