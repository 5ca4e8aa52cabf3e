"""How a failed write becomes the reconcile contract's error (error paths, no API server)."""

from __future__ import annotations

import pytest
from pytest_mock import MockerFixture

from configmirror.events import EventRecorder
from configmirror.kube import ApiError, Kube
from configmirror.model import CONFIGMAP, Caches, Namespace, object_indexers, target_key
from configmirror.reconcile import RetryableError, ServerUnavailable, TerminalError
from configmirror.replicator import Expectations, Replicator
from configmirror.settings import DEFAULT_EXCLUDED
from configmirror.spec import REPLICATE_TO, Scope
from configmirror.store import Store
from tests.unit.test_plan import ns, source


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
                      Expectations(lambda key: 0), watching=lambda key: watching), recorder


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
