"""A member cluster's ServiceAccount token: when it was issued and expires, when to renew it,
a fresh one by TokenRequest, and the kubeconfig with it in place of the old.

A member's kubeconfig (replication.clusters) holds one context whose user authenticates with
a bearer token (`user.token`) of the ServiceAccount `configmirror cluster add` made there. A
TokenRequest token is a JWT whose payload says when it was issued (`iat`) and when it expires
(`exp`); it is read here without verifying the signature (the API server verifies it; we only
want its times). Any other credential (a client certificate, an exec plugin, a token that is
no JWT or lacks either time) has no times here, and is not renewed.

Nothing here logs or puts a token in an error message: they are credentials.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from datetime import datetime
from typing import Any

import yaml

from configmirror.client.kube import ApiError, Kube

__all__ = ["TOKEN_REQUEST", "renewal_due", "request_token", "token_path", "token_times",
           "with_token"]

TOKEN_REQUEST = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}


def token_times(kubeconfig_text: str) -> tuple[float, float] | None:
    """(iat, exp), Unix seconds, of the bearer token of the kubeconfig's one user (its
    context's); None when that credential is no JWT holding both (a client certificate, an
    exec plugin, a static token), or the text is no kubeconfig with one such user."""
    try:
        user = _user(yaml.safe_load(kubeconfig_text))
    except (yaml.YAMLError, ValueError):
        return None
    token = user.get("token")
    if not isinstance(token, str):
        return None
    claims = _claims(token)
    if claims is None:
        return None
    iat, exp = _seconds(claims.get("iat")), _seconds(claims.get("exp"))
    if iat is None or exp is None:
        return None
    return iat, exp


def renewal_due(iat: float, exp: float) -> float:
    """When a token issued at `iat` and expiring at `exp` is renewed: once a third of its
    lifetime is left (kubelet renews a projected token once 80% of its life has passed; a
    third left gives a member that does not answer more time to be reached)."""
    return exp - (exp - iat) / 3


def with_token(kubeconfig_text: str, token: str) -> str:
    """The kubeconfig with its one user's token replaced by `token`, everything else kept
    (YAML; keys in their order). ValueError when it has no such user holding a token."""
    try:
        doc = yaml.safe_load(kubeconfig_text)
    except yaml.YAMLError:
        raise ValueError("not a kubeconfig: not YAML") from None
    user = _user(doc)
    if "token" not in user:
        raise ValueError("the kubeconfig's user holds no token to replace")
    user["token"] = token
    return yaml.safe_dump(doc, sort_keys=False)


def token_path(namespace: str, account: str) -> str:
    """The TokenRequest subresource of ServiceAccount `namespace/account`."""
    return f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"


def request_token(kube: Kube, namespace: str, account: str, seconds: int,
                  timeout: float = 10.0) -> tuple[str, float]:
    """A new token of ServiceAccount `namespace/account`, asked to last `seconds` (the API
    server may cap it: the expiry returned is the one it granted), by a TokenRequest with the
    API server's own audience. Returns (token, expirationTimestamp as Unix seconds).

    Raises ApiError as Kube.request does; an answer without a token or a readable
    expirationTimestamp is an ApiError too (status 500, reason InvalidTokenResponse: the
    server's fault, Failure.UNAVAILABLE, so a caller retries it as it retries an outage).
    """
    path = token_path(namespace, account)
    answer = kube.request("create", path, body={**TOKEN_REQUEST,
                                                "spec": {"expirationSeconds": int(seconds)}},
                          timeout=timeout)
    status = answer.get("status")
    status = status if isinstance(status, dict) else {}
    token = status.get("token")
    expires = _timestamp(status.get("expirationTimestamp"))
    if not isinstance(token, str) or not token or expires is None:
        raise ApiError(500, "InvalidTokenResponse", "the TokenRequest's answer holds no "
                       "status.token and status.expirationTimestamp", "create", path)
    return token, expires


# -- internals --------------------------------------------------------------------------------

def _user(doc: Any) -> dict[str, Any]:
    """The `user` mapping of the kubeconfig's context (its current context, or its only one);
    ValueError saying why there is none."""
    if not isinstance(doc, dict):
        raise ValueError("not a kubeconfig (a YAML mapping)")
    contexts = [c for c in doc.get("contexts") or () if isinstance(c, dict)]
    current = doc.get("current-context")
    chosen = [c for c in contexts if c.get("name") == current] if current else contexts
    if len(chosen) != 1:
        raise ValueError(f"the kubeconfig's context is not one: {len(chosen)} found")
    named = (chosen[0].get("context") or {}).get("user")
    users = [u for u in doc.get("users") or ()
             if isinstance(u, dict) and u.get("name") == named]
    if len(users) != 1 or not isinstance(users[0].get("user"), dict):
        raise ValueError(f"the kubeconfig holds no user {named!r} for its context")
    user: dict[str, Any] = users[0]["user"]
    return user


def _claims(token: str) -> dict[str, Any] | None:
    """The payload of a JWT (header.payload.signature, base64url without padding),
    unverified; None when `token` is no JWT."""
    parts = token.split(".")
    if len(parts) != 3 or not parts[1]:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (binascii.Error, UnicodeError, ValueError):
        return None
    return claims if isinstance(claims, dict) else None


def _seconds(value: Any) -> float | None:
    """A NumericDate claim's seconds; None unless it is a finite number (true is none)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value):
        return float(value)
    return None


def _timestamp(value: Any) -> float | None:
    """An RFC 3339 time (metav1.Time: `2024-05-01T12:00:00Z`) as Unix seconds; None when it
    is none or carries no zone."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None else None
