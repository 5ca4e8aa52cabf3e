"""How a failed write becomes the reconcile contract's error (error paths, no API server)."""

from __future__ import annotations

import base64

import pytest
from pytest_mock import MockerFixture

from configmirror.client.events import EventRecorder
from configmirror.client.kube import ApiError
from configmirror.client.store import Store
from configmirror.clock import FakeClock
from configmirror.controller.reconcile import (
    CacheBehind,
    Forbidden,
    ReconcileError,
    RetryableError,
    ServerUnavailable,
    TerminalError,
)
from configmirror.operator.memory import Memory
from configmirror.operator.replicator import Replicator, redacted
from configmirror.operator.settings import DEFAULT_EXCLUDED
from configmirror.replication.model import Caches, Namespace, object_indexers, target_key
from configmirror.replication.spec import REPLICATE_TO, Scope
from configmirror.vocabulary import CONFIGMAP, ROLE, SECRET
from configmirror_testing.builders import cached, ns, source
from configmirror_testing.fakekube import FakeKube
from configmirror_testing.objects import of_kind


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


# -- RBAC's escalation check: a Role (or RoleBinding) the operator may not grant ------------

ESCALATION = ('roles.rbac.authorization.k8s.io "reader" is forbidden: user "system:'
              'serviceaccount:configmirror:configmirror" (groups=["system:authenticated"]) '
              'is attempting to grant RBAC permissions not currently held:\n'
              '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}')


def role_replicator(mocker: MockerFixture, refusal: ApiError
                    ) -> tuple[Replicator, FakeKube, EventRecorder]:
    objects = Store(object_indexers())
    namespaces: Store[Namespace] = Store()
    body = of_kind(ROLE, "reader", {"rules": [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]},
        {REPLICATE_TO: "a"}, namespace="src")
    body["metadata"].update(uid="u-src", resourceVersion="10")
    src = cached(body, ROLE)
    objects.upsert(src.key, src)
    for name in ("src", "a"):
        namespaces.upsert(name, ns(name))
    kube = FakeKube(resource=ROLE.plural, failures=[refusal])
    recorder = mocker.create_autospec(EventRecorder, instance=True)
    return Replicator(kube, Caches(objects, namespaces, ROLE),
                      Scope.from_flags("*", DEFAULT_EXCLUDED), recorder,
                      Memory(lambda key: 0, 0.0, FakeClock())), kube, recorder


def test_a_role_the_operator_may_not_grant_is_the_sources_invalid_spec_told_once_not_retried(
        mocker: MockerFixture) -> None:
    r, kube, recorder = role_replicator(
        mocker, ApiError(403, "Forbidden", ESCALATION, "create", "/p"))
    result = r.reconcile(target_key(ROLE, "a", "reader"))  # no error: nothing to retry
    assert not result.changed and not result.requeue_after
    assert kube.verbs() == ["create"]
    ((ref, reason, message),) = [c.args for c in recorder.warning.call_args_list]
    assert (ref.namespace, ref.name, reason) == ("src", "reader", "InvalidSpec"), \
        "on the source: its fault, not the operator's rights"
    assert message.startswith("create Role a/reader: the API server refuses the operator a "
                              "Role that grants permissions it does not hold itself (RBAC's "
                              "escalation check): ")
    assert "not currently held" in message
    kube.failures.append(ApiError(403, "Forbidden", ESCALATION, "create", "/p"))
    r.reconcile(target_key(ROLE, "a", "reader"))
    assert kube.verbs() == ["create", "create"] and not kube.failures, "refused again"
    assert recorder.warning.call_count == 1, "once per version of the source"


@pytest.mark.parametrize("status", [401, 404, 422])
def test_only_a_403_is_read_as_the_escalation_check(mocker: MockerFixture, status: int) -> None:
    r, _, recorder = role_replicator(
        mocker, ApiError(status, "Reason", ESCALATION, "create", "/p"))
    with pytest.raises(ReconcileError):
        r.reconcile(target_key(ROLE, "a", "reader"))
    assert all(c.args[1] != "InvalidSpec" for c in recorder.warning.call_args_list)


def test_a_403_that_is_not_the_escalation_check_is_the_operators_own_refusal(
        mocker: MockerFixture) -> None:
    r, _, recorder = role_replicator(
        mocker, ApiError(403, "Forbidden", "cannot create roles", "create", "/p"))
    with pytest.raises(Forbidden, match="create Role a/reader forbidden: cannot create roles"):
        r.reconcile(target_key(ROLE, "a", "reader"))
    assert [c.args[1] for c in recorder.warning.call_args_list] == ["ReplicationFailed"]
