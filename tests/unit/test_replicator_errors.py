"""How a failed write becomes the reconcile contract's error (error paths, no API server)."""

from __future__ import annotations

import base64

import pytest
from pytest_mock import MockerFixture

from configmirror.events import EventRecorder
from configmirror.kube import ApiError, Kube
from configmirror.model import (
    CONFIGMAP,
    SECRET,
    Caches,
    Namespace,
    object_indexers,
    target_key,
)
from configmirror.reconcile import (
    ReconcileError,
    RetryableError,
    ServerUnavailable,
    TerminalError,
)
from configmirror.replicator import Expectations, Replicator
from configmirror.settings import DEFAULT_EXCLUDED
from configmirror.spec import REPLICATE_TO, Scope
from configmirror.store import Store
from tests.unit.test_plan import cached, ns, source


def replicator(mocker: MockerFixture, status: int, watching: bool
               ) -> tuple[Replicator, EventRecorder]:
    objects = Store(object_indexers())
    namespaces: Store[Namespace] = Store()
    src = source({REPLICATE_TO: "a"})
    objects.upsert(src.key, src)
    for name in ("src", "a"):
        namespaces.upsert(name, ns(name))
    kube = mocker.create_autospec(Kube, instance=True)
    kube.request.side_effect = ApiError(status, "Reason", "message", "create", "/p")
    recorder = mocker.create_autospec(EventRecorder, instance=True)
    return Replicator(kube, Caches(objects, namespaces, CONFIGMAP),
                      Scope.from_flags("*", DEFAULT_EXCLUDED), recorder,
                      Expectations(lambda key: 0), watching=lambda key: watching,
                      delete_grace=0.0), recorder


@pytest.mark.parametrize(("status", "watching", "raised"), [
    (409, True, RetryableError),        # a newer version: the watch brings it, retry counts
    (409, False, ServerUnavailable),    # the watch is down: wait for it, uncounted
    (404, False, ServerUnavailable),
    (503, True, ServerUnavailable),
    (0, True, ServerUnavailable),
    (403, True, TerminalError),
    (422, True, TerminalError),
])
def test_a_failed_write_raises_what_the_controller_needs(
        mocker: MockerFixture, status: int, watching: bool, raised: type[Exception]) -> None:
    r, recorder = replicator(mocker, status, watching)
    with pytest.raises(raised) as err:
        r.reconcile(target_key(CONFIGMAP, "a", "cfg"))
    assert "create ConfigMap a/cfg" in str(err.value)
    assert recorder.warning.called is (raised is TerminalError), "only terminal ones are told"


# -- no Secret value in any error a failed write becomes --------------------------------------

MARKER = "s3cr3t-marker-value"
ENCODED = base64.b64encode(MARKER.encode()).decode()


@pytest.mark.parametrize(("status", "watching"), [
    (0, True), (503, True), (429, True), (409, True), (409, False), (404, False),
    (403, True), (422, True)])
def test_no_secret_value_reaches_an_error_or_an_event_whatever_the_server_echoes(
        mocker: MockerFixture, status: int, watching: bool) -> None:
    objects = Store(object_indexers())
    namespaces: Store[Namespace] = Store()
    src = cached({"metadata": {"namespace": "src", "name": "tls", "uid": "u",
                               "resourceVersion": "1", "annotations": {REPLICATE_TO: "a"}},
                  "type": "Opaque", "data": {"token": ENCODED}}, SECRET)
    objects.upsert(src.key, src)
    for name in ("src", "a"):
        namespaces.upsert(name, ns(name))
    kube = mocker.create_autospec(Kube, instance=True)
    # A server message that echoes the value as sent, decoded, and inside other text.
    kube.request.side_effect = ApiError(
        status, "Reason", f'data[token]: Invalid value: "{MARKER}" ({ENCODED}), x{MARKER}y',
        "create", "/api/v1/namespaces/a/secrets")
    recorder = mocker.create_autospec(EventRecorder, instance=True)
    r = Replicator(kube, Caches(objects, namespaces, SECRET),
                   Scope.from_flags("src", DEFAULT_EXCLUDED), recorder,
                   Expectations(lambda key: 0), watching=lambda key: watching, delete_grace=0.0)
    with pytest.raises(ReconcileError) as raised:
        r.reconcile(target_key(SECRET, "a", "tls"))
    told = [str(raised.value), repr(raised.value),
            *(str(c) for c in recorder.warning.call_args_list)]
    assert "[redacted]" in str(raised.value)
    for text in told:
        assert MARKER not in text and ENCODED not in text, text
