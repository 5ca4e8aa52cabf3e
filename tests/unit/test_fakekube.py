"""configmirror_testing's FakeKube, where it answers by logic of its own: what an update's
resourceVersion asks of the server."""

from __future__ import annotations

from typing import Any

import pytest

from configmirror.kube import ApiError
from configmirror_testing.fakekube import FakeKube

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
