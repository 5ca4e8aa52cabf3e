"""What an API failure means is decided in one place: kube.classify."""

from __future__ import annotations

import pytest

from configmirror.kube import CONFIGMAPS, ApiError, Failure, classify, resource_of


@pytest.mark.parametrize(("status", "failure"), [
    (0, Failure.UNAVAILABLE),      # no answer at all
    (429, Failure.UNAVAILABLE),    # API Priority and Fairness: slow down
    (500, Failure.UNAVAILABLE),
    (503, Failure.UNAVAILABLE),
    (504, Failure.UNAVAILABLE),
    (409, Failure.CONFLICT),       # stale resourceVersion, or AlreadyExists
    (404, Failure.NOT_FOUND),
    (403, Failure.REJECTED),       # forbidden: the permission's fault
    (422, Failure.REJECTED),       # invalid: the object's fault
    (400, Failure.REJECTED),
    (413, Failure.REJECTED),
])
def test_every_status_has_one_meaning(status: int, failure: Failure) -> None:
    assert classify(status) is failure
    assert ApiError(status, "R", "m", "create", "/x").failure is failure


def test_a_terminating_namespace_is_recognised_in_a_403() -> None:
    err = ApiError(403, "Forbidden", 'unable to create new content in namespace x because it '
                   'is being terminated', "create", "/api/v1/namespaces/x/configmaps")
    assert err.namespace_terminating and err.failure is Failure.REJECTED
    assert not ApiError(403, "Forbidden", "nope", "create", "/p").namespace_terminating


def test_an_error_names_the_verb_path_status_and_message_and_keeps_retry_after() -> None:
    err = ApiError(429, "TooManyRequests", "slow down", "update", "/p", retry_after=3.0)
    assert str(err) == "update /p: 429 TooManyRequests: slow down"
    assert err.retry_after == 3.0


def test_resource_paths() -> None:
    assert CONFIGMAPS.collection() == "/api/v1/configmaps"
    assert CONFIGMAPS.collection("a") == "/api/v1/namespaces/a/configmaps"
    assert CONFIGMAPS.item("a", "b") == "/api/v1/namespaces/a/configmaps/b"
    assert resource_of(CONFIGMAPS.item("a", "b")) == "configmaps"
    assert resource_of("/api/v1/namespaces/a") == "namespaces"
