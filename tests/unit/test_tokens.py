"""A member cluster's token (configmirror.client.tokens): its times read from the JWT, when it
is renewed, the kubeconfig with a new one, and the TokenRequest that makes one; and the member
clusters' metrics (configmirror.metrics), whose series leave with their cluster."""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import pytest
import yaml
from prometheus_client import generate_latest

from configmirror.client.kube import ApiError, Failure, Kube
from configmirror.client.tokens import (
    renewal_due,
    request_token,
    token_path,
    token_times,
    with_token,
)
from configmirror.metrics import Metrics
from configmirror.replication.clusters import MEMBER_ACCOUNT, MEMBER_NAMESPACE, check_kubeconfig

IAT = 1_700_000_000
EXP = IAT + 7 * 86400


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims: Any, header: Any = None) -> str:
    """A JWT as the API server writes one (header.payload.signature, base64url unpadded); the
    signature is no signature: nothing here verifies it."""
    head = header if header is not None else {"alg": "RS256", "kid": "k1"}
    return ".".join([_b64(json.dumps(head).encode()), _b64(json.dumps(claims).encode()),
                     _b64(b"not-a-signature")])


def sa_claims(iat: Any = IAT, exp: Any = EXP) -> dict[str, Any]:
    return {"aud": ["https://kubernetes.default.svc"], "exp": exp, "iat": iat, "nbf": iat,
            "iss": "https://kubernetes.default.svc",
            "kubernetes.io": {"namespace": MEMBER_NAMESPACE,
                              "serviceaccount": {"name": MEMBER_ACCOUNT, "uid": "u-1"}},
            "sub": f"system:serviceaccount:{MEMBER_NAMESPACE}:{MEMBER_ACCOUNT}"}


def kubeconfig(user: dict[str, Any], **extra: Any) -> str:
    """A member's kubeconfig: one cluster, one user, one context, as `cluster add` writes."""
    doc = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": "east", "cluster": {
               "server": "https://east.example:6443",
               "certificate-authority-data": _b64(b"-----BEGIN CERTIFICATE-----")}}],
           "users": [{"name": "configmirror-member", "user": user}],
           "contexts": [{"name": "east", "context": {"cluster": "east",
                                                     "user": "configmirror-member"}}],
           "current-context": "east", **extra}
    return yaml.safe_dump(doc, sort_keys=False)


# -- token_times ----------------------------------------------------------------------------

def test_token_times_reads_iat_and_exp_of_the_users_jwt() -> None:
    assert token_times(kubeconfig({"token": jwt(sa_claims())})) == (IAT, EXP)


def test_token_times_takes_fractional_times_and_a_payload_needing_padding() -> None:
    for pad in ("", "x", "xy", "xyz"):  # every payload length modulo 4
        claims = {**sa_claims(IAT + 0.5, EXP + 0.25), "pad": pad}
        assert token_times(kubeconfig({"token": jwt(claims)})) == (IAT + 0.5, EXP + 0.25)


def test_token_times_reads_the_user_of_the_context_not_another() -> None:
    text = kubeconfig({"token": jwt(sa_claims())})
    doc = yaml.safe_load(text)
    doc["users"].insert(0, {"name": "someone-else",
                            "user": {"token": jwt(sa_claims(1, 2))}})
    assert token_times(yaml.safe_dump(doc)) == (IAT, EXP)


@pytest.mark.parametrize("user", [
    {"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"},   # a certificate
    {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}},
    {"token": "0123456789abcdef"},                       # a static token
    {"token": "abc.def.ghi"},                            # three parts, no JSON inside
    {"token": jwt(["iat", "exp"])},                      # a payload that is no object
    {"token": jwt({"iat": IAT})},                        # no exp: a legacy Secret token
    {"token": jwt({"exp": EXP})},                        # no iat
    {"token": jwt(sa_claims(iat="1700000000"))},         # a time that is no number
    {"token": jwt(sa_claims(exp=True))},
    {"token": jwt(sa_claims(exp=None))},
    {"tokenFile": "/var/run/token"},
    {},
])
def test_token_times_is_none_for_a_credential_that_is_no_jwt_with_both_times(
        user: dict[str, Any]) -> None:
    assert token_times(kubeconfig(user)) is None


def test_token_times_reads_no_signature_an_unsigned_jwt_gives_its_times() -> None:
    head, payload, _ = jwt(sa_claims()).split(".")
    assert token_times(kubeconfig({"token": f"{head}.{payload}."})) == (IAT, EXP)
    # An empty payload is no JWT's, signed or not.
    assert token_times(kubeconfig({"token": f"{head}..{_b64(b'sig')}"})) is None


def test_token_times_is_none_for_a_nonfinite_time() -> None:
    payload = _b64(b'{"iat": NaN, "exp": 1700000000}')  # json.loads takes NaN
    token = f"{_b64(b'{}')}.{payload}.{_b64(b'sig')}"
    assert token_times(kubeconfig({"token": token})) is None


@pytest.mark.parametrize("text", [
    "", "- a list", "{unclosed", "users: []",
    kubeconfig({"token": jwt(sa_claims())}, **{"current-context": "west"}),
])
def test_token_times_is_none_for_what_is_no_kubeconfig_with_one_user(text: str) -> None:
    assert token_times(text) is None


def _with_users(users: list[Any]) -> str:
    doc = yaml.safe_load(kubeconfig({"token": jwt(sa_claims())}))
    doc["users"] = users
    return yaml.safe_dump(doc, sort_keys=False)


# The context's user named twice (which one: not ours to guess), or not a mapping.
NO_ONE_USER = [
    _with_users([{"name": "configmirror-member", "user": {"token": jwt(sa_claims())}}] * 2),
    _with_users([{"name": "configmirror-member", "user": jwt(sa_claims())}]),
    _with_users([{"name": "configmirror-member", "user": None}]),
    _with_users([{"name": "configmirror-member"}]),
    _with_users([]),
]


@pytest.mark.parametrize("text", NO_ONE_USER)
def test_token_times_is_none_unless_the_context_names_one_user_mapping(text: str) -> None:
    assert token_times(text) is None


def test_token_times_without_current_context_uses_the_one_context() -> None:
    doc = yaml.safe_load(kubeconfig({"token": jwt(sa_claims())}))
    del doc["current-context"]
    assert token_times(yaml.safe_dump(doc)) == (IAT, EXP)
    doc["contexts"].append({"name": "west", "context": {"cluster": "east",
                                                        "user": "configmirror-member"}})
    assert token_times(yaml.safe_dump(doc)) is None  # which one: not ours to guess


# -- renewal_due ----------------------------------------------------------------------------

def test_renewal_is_due_when_a_third_of_the_lifetime_is_left() -> None:
    assert renewal_due(0, 3600) == 2400
    assert renewal_due(IAT, EXP) == EXP - 7 * 86400 / 3
    assert renewal_due(100.0, 100.0) == 100.0
    # Always inside the lifetime, two thirds of the way through.
    for iat, exp in [(IAT, IAT + 600), (IAT, IAT + 86400), (IAT + 0.5, IAT + 31.5)]:
        due = renewal_due(iat, exp)
        assert iat < due < exp
        assert exp - due == pytest.approx((exp - iat) / 3)


# -- with_token -----------------------------------------------------------------------------

def test_with_token_replaces_only_the_token() -> None:
    old = kubeconfig({"token": jwt(sa_claims())}, preferences={"colors": True})
    new_token = jwt(sa_claims(IAT + 100, EXP + 100))
    new = with_token(old, new_token)
    before, after = yaml.safe_load(old), yaml.safe_load(new)
    assert after["users"][0]["user"] == {"token": new_token}
    after["users"][0]["user"]["token"] = before["users"][0]["user"]["token"]
    assert after == before
    assert token_times(new) == (IAT + 100, EXP + 100)
    check_kubeconfig(new, "renewed")  # still a member's kubeconfig


def test_with_token_keeps_the_order_of_keys_and_the_other_users_fields() -> None:
    old = kubeconfig({"token": "old", "as": "admin", "as-groups": ["ops"]})
    new = with_token(old, "new")
    assert list(yaml.safe_load(new)) == list(yaml.safe_load(old))
    assert yaml.safe_load(new)["users"][0]["user"] == {"token": "new", "as": "admin",
                                                       "as-groups": ["ops"]}
    # What yaml.safe_dump(sort_keys=False) writes: the old text, the token apart.
    assert new == old.replace("token: old", "token: new")


def test_with_token_of_a_kubeconfig_in_another_layout_keeps_its_content() -> None:
    old = ("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
           "contexts:\n- context: {cluster: k, user: u}\n  name: c\n"
           "clusters:\n- cluster: {server: 'https://k:6443'}\n  name: k\n"
           "users:\n- name: u\n  user: {token: old}\n")
    new = with_token(old, "new")
    assert yaml.safe_load(new) == {**yaml.safe_load(old), "users": [
        {"name": "u", "user": {"token": "new"}}]}
    assert [line.split(":")[0] for line in new.splitlines() if not line.startswith((" ", "-"))
            ] == ["apiVersion", "kind", "current-context", "contexts", "clusters", "users"]


@pytest.mark.parametrize("text", [
    kubeconfig({"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"}),
    kubeconfig({"exec": {"command": "aws"}}),
    "{unclosed", "[]",
    kubeconfig({"token": "t"}, **{"current-context": "west"}),
    *NO_ONE_USER,
])
def test_with_token_refuses_a_kubeconfig_without_a_users_token(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        with_token(text, "secret-new-token")
    assert "secret-new-token" not in str(caught.value)


# -- request_token --------------------------------------------------------------------------

class StubKube:
    """Kube.request, answering each call with the next answer (or raising it)."""

    def __init__(self, *answers: dict[str, Any] | ApiError) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, Any, dict[str, Any]]] = []

    def request(self, verb: str, path: str, query: Any = None, body: Any = None,
                **options: Any) -> dict[str, Any]:
        self.calls.append((verb, path, body, options))
        answer = self.answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer


def token_answer(token: str, expires: str) -> dict[str, Any]:
    return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": MEMBER_ACCOUNT, "namespace": MEMBER_NAMESPACE},
            "spec": {"audiences": ["https://kubernetes.default.svc"],
                     "expirationSeconds": 604800, "boundObjectRef": None},
            "status": {"token": token, "expirationTimestamp": expires}}


def test_request_token_posts_a_token_request_and_returns_the_granted_expiry() -> None:
    token = jwt(sa_claims())
    kube = StubKube(token_answer(token, "2023-11-21T22:13:20Z"))
    got = request_token(cast(Kube, kube), MEMBER_NAMESPACE, MEMBER_ACCOUNT, 604800)
    assert got == (token, 1_700_604_800.0)
    [(verb, path, body, options)] = kube.calls
    assert verb == "create"
    assert path == token_path(MEMBER_NAMESPACE, MEMBER_ACCOUNT) == (
        "/api/v1/namespaces/configmirror/serviceaccounts/configmirror-member/token")
    assert body == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": 604800}}
    assert options == {"timeout": 10.0}


def test_request_token_passes_its_timeout_and_reads_an_offset_time() -> None:
    kube = StubKube(token_answer("t", "2023-11-22T00:13:20+02:00"))
    assert request_token(cast(Kube, kube), "ns", "sa", 3600, timeout=2.5) == (
        "t", 1_700_604_800.0)
    assert kube.calls[0][3] == {"timeout": 2.5}


@pytest.mark.parametrize("status", [403, 404, 0, 503])
def test_request_token_raises_the_clients_api_error(status: int) -> None:
    error = ApiError(status, "Forbidden", "no", "create", token_path("ns", "sa"))
    with pytest.raises(ApiError) as caught:
        request_token(cast(Kube, StubKube(error)), "ns", "sa", 3600)
    assert caught.value is error


@pytest.mark.parametrize("answer", [
    {}, {"status": {}}, {"status": None}, {"status": "Success"},
    {"status": {"token": "", "expirationTimestamp": "2023-11-21T22:13:20Z"}},
    {"status": {"token": "t"}},
    {"status": {"token": "t", "expirationTimestamp": "tomorrow"}},
    {"status": {"token": "t", "expirationTimestamp": "2023-11-21T22:13:20"}},  # no zone
    {"status": {"token": 7, "expirationTimestamp": "2023-11-21T22:13:20Z"}},
])
def test_request_token_refuses_an_answer_without_token_or_expiry(
        answer: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as caught:
        request_token(cast(Kube, StubKube(answer)), "ns", "sa", 3600)
    assert (caught.value.status, caught.value.reason) == (500, "InvalidTokenResponse")
    assert caught.value.failure is Failure.UNAVAILABLE  # the server's fault: tried again later


# -- the member clusters' metrics -----------------------------------------------------------

def _exposed(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_cluster_metrics_are_exported_and_leave_with_their_cluster() -> None:
    metrics = Metrics()
    text = _exposed(metrics)
    for family in ("configmirror_cluster_token_expiry_timestamp_seconds",
                   "configmirror_cluster_reachable", "configmirror_cluster_replica_writes_total"):
        assert f"# TYPE {family} " in text  # before any cluster has a series
    for name in ("east", "west"):
        metrics.cluster_token_expiry.labels(name).set(EXP)
        metrics.cluster_reachable.labels(name).set(1)
        metrics.child(metrics.cluster_replica_writes, name, "create").inc()
        metrics.child(metrics.cluster_replica_writes, name, "update").inc()
    east = metrics.child(metrics.cluster_replica_writes, "east", "create")
    east.inc()
    text = _exposed(metrics)
    assert 'configmirror_cluster_replica_writes_total{action="create",cluster="east"} 2.0' in text
    assert 'configmirror_cluster_reachable{cluster="west"} 1.0' in text

    metrics.forget_cluster("east")
    text = _exposed(metrics)
    assert 'cluster="east"' not in text
    assert 'configmirror_cluster_token_expiry_timestamp_seconds{cluster="west"} 1.7006048e+09' \
        in text
    assert 'configmirror_cluster_replica_writes_total{action="update",cluster="west"} 1.0' in text
    # A cluster back in the inventory starts from zero, with a new cached child.
    again = metrics.child(metrics.cluster_replica_writes, "east", "create")
    assert again is not east
    again.inc()
    assert 'configmirror_cluster_replica_writes_total{action="create",cluster="east"} 1.0' \
        in _exposed(metrics)
    metrics.forget_cluster("nowhere")  # a cluster with no series: nothing to do
