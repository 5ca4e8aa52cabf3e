"""How a failed write becomes the reconcile contract's error (error paths, no API server)."""

from __future__ import annotations

import base64

import pytest
from pytest_mock import MockerFixture

from configmirror.clock import FakeClock
from configmirror.events import EventRecorder
from configmirror.kube import ApiError
from configmirror.memory import Memory
from configmirror.model import Caches, Namespace, object_indexers, target_key
from configmirror.reconcile import (
    CacheBehind,
    Forbidden,
    ReconcileError,
    RetryableError,
    ServerUnavailable,
    TerminalError,
)
from configmirror.replicator import Replicator, redacted
from configmirror.settings import DEFAULT_EXCLUDED
from configmirror.spec import REPLICATE_TO, Scope
from configmirror.store import Store
from configmirror.vocabulary import CONFIGMAP, SECRET
from configmirror_testing.builders import cached, ns, source
from configmirror_testing.fakekube import FakeKube


def replicator(mocker: MockerFixture, status: int, watching: bool
               ) -> tuple[Replicator, EventRecorder]:
    objects = Store(object_indexers())
    namespaces: Store[Namespace] = Store()
    src = source({REPLICATE_TO: "a"})
    objects.upsert(src.key, src)
    for name in ("src", "a"):
        namespaces.upsert(name, ns(name))
    kube = FakeKube(failures=[ApiError(status, "Reason", "message", "create", "/p")])
    recorder = mocker.create_autospec(EventRecorder, instance=True)
    return Replicator(kube, Caches(objects, namespaces, CONFIGMAP),
                      Scope.from_flags("*", DEFAULT_EXCLUDED), recorder,
                      Memory(lambda key: 0, 0.0, FakeClock()), watching=lambda key: watching
                      ), recorder


@pytest.mark.parametrize(("status", "watching", "raised", "said"), [
    # a newer version: the watch brings it, retry counts
    (409, True, RetryableError, "create ConfigMap a/cfg: create /p: 409"),
    # the watch is down: wait for it, uncounted, and not as an outage (the server answered)
    (409, False, CacheBehind, "(the cache is behind until the watch reconnects)"),
    (404, False, CacheBehind, "(the cache is behind until the watch reconnects)"),
    (503, True, ServerUnavailable, "create ConfigMap a/cfg: create /p: 503"),
    (0, True, ServerUnavailable, "create ConfigMap a/cfg: create /p: 0"),
    (403, True, Forbidden, "create ConfigMap a/cfg forbidden: message"),
    (401, True, Forbidden, "create ConfigMap a/cfg rejected by the API server: message"),
    (404, True, RetryableError, "create ConfigMap a/cfg: create /p: 404"),
    (422, True, TerminalError, "create ConfigMap a/cfg rejected by the API server: message"),
])
def test_a_failed_write_raises_what_the_controller_needs(
        mocker: MockerFixture, status: int, watching: bool, raised: type[Exception],
        said: str) -> None:
    r, recorder = replicator(mocker, status, watching)
    with pytest.raises(raised) as err:
        r.reconcile(target_key(CONFIGMAP, "a", "cfg"))
    assert type(err.value) is raised
    assert said in str(err.value)
    terminal = issubclass(raised, TerminalError)
    assert recorder.warning.called is terminal, "only terminal ones are told"
    if terminal:
        assert recorder.warning.call_args.args[1:] == ("ReplicationFailed", str(err.value))


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
    # A server message that echoes the value as sent, decoded, and inside other text.
    kube = FakeKube(failures=[ApiError(
        status, "Reason", f'data[token]: Invalid value: "{MARKER}" ({ENCODED}), x{MARKER}y',
        "create", "/api/v1/namespaces/a/secrets")], resource="secrets")
    recorder = mocker.create_autospec(EventRecorder, instance=True)
    r = Replicator(kube, Caches(objects, namespaces, SECRET),
                   Scope.from_flags("src", DEFAULT_EXCLUDED), recorder,
                   Memory(lambda key: 0, 0.0, FakeClock()), watching=lambda key: watching)
    with pytest.raises(ReconcileError) as raised:
        r.reconcile(target_key(SECRET, "a", "tls"))
    told = [str(raised.value), repr(raised.value),
            *(str(c) for c in recorder.warning.call_args_list)]
    assert "[redacted]" in str(raised.value)
    for text in told:
        assert MARKER not in text and ENCODED not in text, text


# -- redacted(): what is cut out of a server's message --------------------------------------


def cut(message: str, data: dict[str, str]) -> str:
    return redacted(ApiError(422, "Invalid", message, "create", "/p"), data).message


def test_a_value_of_four_characters_or_more_is_cut_and_a_shorter_one_is_not() -> None:
    assert cut("a abc abcd b", {"x": "abc", "y": "abcd"}) == "a abc [redacted] b"


def test_a_base64_value_is_cut_decoded_too_from_four_characters() -> None:
    data = {"x": base64.b64encode(b"abc").decode(), "y": base64.b64encode(b"wxyz").decode()}
    assert cut(f"abc wxyz {data['y']}", data) == "abc [redacted] [redacted]"


def test_a_value_that_is_not_base64_has_no_decoded_form() -> None:
    # Decoded loosely (skipping what is no base64), "Zm9v YmFy" would be "foobar".
    assert cut("foobar: Zm9v YmFy", {"x": "Zm9v YmFy"}) == "foobar: [redacted]"


def test_a_value_inside_another_is_cut_after_it_so_no_part_of_the_longer_one_is_left() -> None:
    assert cut("xabcdefghx", {"short": "abcd", "long": "abcdefgh"}) == "x[redacted]x"


def test_a_cut_error_keeps_all_but_its_message_and_an_uncut_one_is_returned_as_it_is() -> None:
    err = ApiError(429, "TooManyRequests", "slow down: sekret", "update", "/p", retry_after=3.0)
    same = redacted(err, {"k": "other"})
    assert same is err
    changed = redacted(err, {"k": "sekret"})
    assert (changed.status, changed.reason, changed.message, changed.verb, changed.path,
            changed.retry_after) == (429, "TooManyRequests", "slow down: [redacted]", "update",
                                     "/p", 3.0)
