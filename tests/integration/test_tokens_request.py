"""A member's token renewed as the operator renews it (configmirror.client.tokens), against the
real API server: a ServiceAccount asks a TokenRequest for itself, with its own token, and the
kubeconfig with the new token in it is a working credential whose times are the granted ones.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client

from configmirror.client.kube import ApiError, Failure, Kube, configuration_from_text
from configmirror.client.tokens import renewal_due, request_token, token_times, with_token
from configmirror_testing.cluster import Cluster
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane

ACCOUNT = "configmirror-member"
LIFETIME = 7200


def _kube(text: str) -> Kube:
    return Kube(configuration_from_text(text, "the member's kubeconfig"))


def _renews(kube: Kube, namespace: str) -> bool:
    try:
        request_token(kube, namespace, ACCOUNT, LIFETIME)
    except ApiError as err:
        if err.status == 403:
            return False
        raise
    return True


def test_a_service_account_renews_its_own_token(cluster: Cluster, namespace: str,
                                               tmp_path: Path) -> None:
    path = cluster.service_account_kubeconfig(namespace, ACCOUNT, tmp_path / "member.kubeconfig")
    text = path.read_text()
    times = token_times(text)
    assert times is not None, "a TokenRequest token is a JWT with iat and exp"
    iat, exp = times
    assert exp - iat == 3600  # what the suite's helper asks for
    assert iat < renewal_due(iat, exp) < exp
    kube = _kube(text)
    try:
        # Without the Role `cluster add` installs, the ServiceAccount may not ask.
        with pytest.raises(ApiError) as refused:
            request_token(kube, namespace, ACCOUNT, LIFETIME)
        assert refused.value.status == 403 and refused.value.failure is Failure.REJECTED

        cluster.rbac.create_namespaced_role(namespace, client.V1Role(
            metadata=client.V1ObjectMeta(name=ACCOUNT),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["serviceaccounts/token"],
                                       resource_names=[ACCOUNT], verbs=["create"])]))
        cluster.rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=ACCOUNT),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                                      name=ACCOUNT),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=ACCOUNT,
                                           namespace=namespace)]))
        wait_for(lambda: _renews(kube, namespace), what="the Role to take effect")

        before = time.time()
        token, expires = request_token(kube, namespace, ACCOUNT, LIFETIME)
        renewed = with_token(text, token)
        new_times = token_times(renewed)
        assert new_times is not None
        new_iat, new_exp = new_times
        assert new_exp == expires  # status.expirationTimestamp is the JWT's exp
        assert new_exp - new_iat == LIFETIME
        assert before - 5 <= new_iat <= time.time() + 5
    finally:
        kube.close()

    # The renewed kubeconfig is a working credential of the same ServiceAccount.
    again = _kube(renewed)
    try:
        token2, _ = request_token(again, namespace, ACCOUNT, LIFETIME)
        assert token2 != token
        with pytest.raises(ApiError) as other:  # only its own ServiceAccount's tokens
            request_token(again, namespace, "default", LIFETIME)
        assert other.value.status == 403
    finally:
        again.close()
