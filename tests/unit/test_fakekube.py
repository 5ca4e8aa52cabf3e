"""configmirror_testing's FakeKube, where it answers by logic of its own: what an update's
resourceVersion asks of the server, and a server that holds its answers."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from configmirror.client.kube import ApiError
from configmirror_testing.fakekube import HOLD_LIMIT, FakeKube

PATH = "/api/v1/namespaces/a/configmaps/cfg"


def held(version: str = "5") -> FakeKube:
    return FakeKube({"a/cfg": {"metadata": {"namespace": "a", "name": "cfg",
                                            "resourceVersion": version}, "data": {"k": "old"}}},
                    revision=5)


def body(**meta: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "a", "name": "cfg", **meta}, "data": {"k": "new"}}


@pytest.mark.parametrize("meta", [{}, {"resourceVersion": ""}], ids=["absent", "empty"])
def test_an_update_naming_no_resource_version_is_unconditional(meta: dict[str, str]) -> None:
    kube = held()
    answer = kube.request("update", PATH, body=body(**meta))
    assert answer["metadata"]["resourceVersion"] == "6"
    assert kube.objects["a/cfg"]["data"] == {"k": "new"}


def test_an_update_naming_the_stored_version_is_written() -> None:
    kube = held()
    kube.request("update", PATH, body=body(resourceVersion="5"))
    assert kube.objects["a/cfg"]["data"] == {"k": "new"}


def test_an_update_naming_another_version_is_a_conflict_and_writes_nothing() -> None:
    kube = held()
    with pytest.raises(ApiError) as raised:
        kube.request("update", PATH, body=body(resourceVersion="4"))
    assert raised.value.status == 409
    assert kube.objects["a/cfg"]["data"] == {"k": "old"} and not kube.writes


def test_a_held_request_is_recorded_at_once_and_answered_only_once_released() -> None:
    release = threading.Event()
    kube = held()
    kube.held = release
    answers: list[dict[str, Any]] = []
    asking = threading.Thread(target=lambda: answers.append(kube.request("get", PATH)))
    asking.start()
    try:
        assert kube.holding.wait(10)
        seen: list[list[str]] = []  # read from a thread of its own: a blocked read fails
        reader = threading.Thread(target=lambda: seen.append(kube.verbs()))
        reader.start()
        reader.join(HOLD_LIMIT / 2)
        assert seen == [["get"]], "the request is seen while it waits"
        assert answers == [] and asking.is_alive()
    finally:
        release.set()
        asking.join(10)
    assert not asking.is_alive() and answers[0]["data"] == {"k": "old"}


def test_a_request_not_held_never_says_it_is_holding() -> None:
    kube = held()
    kube.request("get", PATH)
    assert not kube.holding.is_set()
