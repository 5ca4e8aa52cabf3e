"""The operator's published policy as the commands follow it: what they judge with, and the
one line each that says which operator, which flag overrides it, or that there is none."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from configmirror.cli.main import parser
from configmirror.cli.settings import given as given_in
from configmirror.client.kube import ApiError
from configmirror.clock import FakeClock
from configmirror.operator.policy import (
    POLICY,
    PUBLISHED_BY,
    PolicyError,
    Published,
    Publisher,
    home,
    judge_with,
    own_namespace,
    policy_data,
    policy_name,
)
from configmirror.operator.settings import Settings
from configmirror_testing.fakekube import FakeKube, Write
from configmirror_testing.wait import wait_for

# deploy/deployment.yaml's policy flags.
DEPLOYED = Settings(source_namespace_selector="configmirror.io/source=true", delete_grace=60.0,
                    leader_elect=True, leader_election_namespace="configmirror")


def published(settings: Settings = DEPLOYED, namespace: str = "configmirror",
              **values: str) -> Published:
    return Published(namespace, policy_name(settings), "configmirror-7d9f_0a1b",
                     "2026-12-02T06:40:00Z", {**policy_data(settings), **values})


def test_no_operator_found_says_so_in_one_line_and_keeps_the_flags() -> None:
    ours = Settings(delete_grace=5.0)
    settings, notices = judge_with([], ours, {})
    assert settings == ours
    assert notices == ["no running operator found (no ConfigMap labelled "
                       "configmirror.io/policy=true): judging with this command's flags"]


def test_no_operator_in_the_namespace_asked_names_it() -> None:
    _, notices = judge_with([], Settings(), {}, "platform")
    assert notices == ["no running operator found (no ConfigMap labelled configmirror.io/"
                       "policy=true in namespace platform): judging with this command's flags"]


def test_without_flags_the_command_judges_with_the_operators_policy() -> None:
    settings, notices = judge_with([published()], Settings(), {})
    assert {f: getattr(settings, f) for f in POLICY} == {f: getattr(DEPLOYED, f) for f in POLICY}
    assert settings.source_namespace_selector == "configmirror.io/source=true"
    assert settings.delete_grace == 60.0
    assert notices == ["following the operator in namespace configmirror (configmirror-7d9f_0a1b,"
                       " since 2026-12-02T06:40:00Z; its policy: configmap "
                       "configmirror/configmirror-policy)"]


def test_a_flag_given_overrides_the_operator_with_a_warning_naming_the_difference() -> None:
    ours = Settings(delete_grace=0.0, source_namespace_selector="")
    settings, notices = judge_with([published()], ours, {
        "delete_grace": "--delete-grace", "source_namespace_selector":
        "--source-namespace-selector"})
    assert (settings.delete_grace, settings.source_namespace_selector) == (0.0, "")
    assert notices[1:] == [
        "warning: --source-namespace-selector='' overrides the operator's "
        "configmirror.io/source=true",
        "warning: --delete-grace=0s overrides the operator's 60s"]


def test_a_flag_given_with_the_operators_own_value_warns_of_nothing() -> None:
    settings, notices = judge_with([published()], Settings(delete_grace=60.0),
                                   {"delete_grace": "--delete-grace"})
    assert settings.delete_grace == 60.0
    assert len(notices) == 1 and notices[0].startswith("following the operator")


def test_a_setting_from_the_environment_is_named_by_its_variable() -> None:
    _, notices = judge_with([published()], Settings(exclude_namespaces="kube-*"),
                            {"exclude_namespaces": "CONFIGMIRROR_EXCLUDE_NAMESPACES"})
    assert notices[1:] == ["warning: CONFIGMIRROR_EXCLUDE_NAMESPACES=kube-* overrides the "
                           "operator's kube-system,kube-public,kube-node-lease"]


def test_a_key_the_operator_did_not_publish_keeps_the_commands_value() -> None:
    older = published()
    older = Published(older.namespace, older.name, older.by, older.at,
                      {k: v for k, v in older.values.items() if k != "secret-names"})
    settings, _ = judge_with([older], Settings(secret_names="tls"), {})
    assert settings.secret_names == "tls"


def test_two_operators_are_refused_naming_both() -> None:
    with pytest.raises(PolicyError, match=r"2 operators publish a policy \(a/configmirror-policy, "
                       r"b/configmirror-policy\): choose one with --operator-namespace"):
        judge_with([published(namespace="a"), published(namespace="b")], Settings(), {})


def test_a_grace_that_does_not_parse_names_the_configmap_and_key() -> None:
    with pytest.raises(PolicyError, match="configmap configmirror/configmirror-policy: "
                       "delete-grace: not a duration"):
        judge_with([published(**{"delete-grace": "soon"})], Settings(), {})


def test_published_from_json_reads_what_the_publisher_writes() -> None:
    obj = {"metadata": {"namespace": "ops", "name": "cm-policy", "annotations": {
        "configmirror.io/published-by": "pod_1", "configmirror.io/published-at": "t"}},
        "data": {"delete-grace": "1m"}}
    assert Published.from_json(obj) == Published("ops", "cm-policy", "pod_1", "t",
                                                 {"delete-grace": "1m"})


def test_an_elected_operator_publishes_beside_its_lease_a_pod_in_its_namespace(
        tmp_path: Path) -> None:
    pod = tmp_path / "namespace"
    assert home(DEPLOYED, pod) == "configmirror"
    assert home(Settings(), pod) is None  # a laptop's run: nowhere
    pod.write_text("platform\n")
    assert home(Settings(), pod) == "platform"


def test_the_operators_namespace_is_its_pods_else_the_flag(tmp_path: Path) -> None:
    pod = tmp_path / "namespace"
    assert own_namespace(Settings(), pod) == "configmirror"
    assert own_namespace(Settings(operator_namespace="ops"), pod) == "ops"
    pod.write_text("platform\n")
    assert own_namespace(Settings(operator_namespace="ops"), pod) == "platform"


def test_the_operators_namespace_is_published_and_followed() -> None:
    assert policy_data(Settings(operator_namespace="platform"))["operator-namespace"] == \
        "platform"
    theirs = published(DEPLOYED, "platform", **{"operator-namespace": "platform"})
    settings, _ = judge_with([theirs], Settings(), {})
    assert settings.operator_namespace == "platform"


# -- what the user set, as the command line parser says ---------------------------------------

def test_only_flags_on_the_command_line_are_given(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONFIGMIRROR_DELETE_GRACE", "CONFIGMIRROR_SOURCE_NAMESPACE_SELECTOR"):
        monkeypatch.delenv(name, raising=False)
    assert _given(["status", "--kubeconfig", "k", "-o", "json"]) == {}
    assert _given(["plan", "--delete-grace", "0s", "--source-namespace-selector="]) == {
        "delete_grace": "--delete-grace",
        "source_namespace_selector": "--source-namespace-selector"}  # '' is a value too
    assert _given(["wait", "a/b", "--secret-names=x"]) == {"secret_names": "--secret-names"}


def test_a_policy_variable_in_the_environment_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFIGMIRROR_DELETE_GRACE", "5s")
    assert _given(["status"]) == {"delete_grace": "CONFIGMIRROR_DELETE_GRACE"}
    assert _given(["status", "--delete-grace=1s"]) == {"delete_grace": "--delete-grace"}


# -- the publisher's error paths (the API server's side is tests/e2e/test_policy.py) -----------

def _given(argv: list[str]) -> dict[str, str]:
    return given_in(parser().parse_args(argv))


POLICY_PATH = "/api/v1/namespaces/configmirror/configmaps/configmirror-policy"


def version_of(write: Write) -> str:
    assert write.after is not None
    return str(write.after["metadata"]["resourceVersion"])


def test_a_policy_not_there_yet_is_created() -> None:
    kube = FakeKube()
    publisher = Publisher(kube, DEPLOYED, "configmirror", "me")
    publisher.publish()
    assert [r[:2] for r in kube.written()] == [
        ("update", POLICY_PATH), ("create", "/api/v1/namespaces/configmirror/configmaps")]
    (created,) = kube.writes
    publisher.stop()  # deletes the version it wrote, and only that
    delete = kube.written()[-1]
    assert delete.verb == "delete"
    assert delete.body["preconditions"] == {"resourceVersion": version_of(created)}
    assert "configmirror/configmirror-policy" not in kube.objects


def test_a_policy_written_since_by_someone_else_is_not_withdrawn() -> None:
    kube = FakeKube()
    publisher = Publisher(kube, DEPLOYED, "configmirror", "me")
    publisher.publish()
    theirs = Publisher(kube, DEPLOYED, "configmirror", "next")
    theirs.publish()  # the next leader's, over ours
    publisher.stop()
    assert kube.written()[-1].verb == "delete", "asked, with ours as its precondition"
    stored = kube.objects["configmirror/configmirror-policy"]
    assert stored["metadata"]["annotations"][PUBLISHED_BY] == "next"


def test_a_refused_write_is_raised_not_created() -> None:
    kube = FakeKube(failures=[ApiError(403, "Forbidden", "no", "update", "p")])
    with pytest.raises(ApiError):
        Publisher(kube, DEPLOYED, "configmirror", "me").publish()
    assert len(kube.written()) == 1 and not kube.objects


def test_the_withdrawal_gets_only_what_is_left_of_the_stop_and_none_when_nothing_is() -> None:
    kube = FakeKube()
    publisher = Publisher(kube, DEPLOYED, "configmirror", "me")
    publisher.publish()
    assert publisher.stop(2)
    delete = kube.written()[-1]
    assert delete.verb == "delete" and 0 < delete.options["timeout"] <= 2
    late = Publisher(kube, DEPLOYED, "configmirror", "late")
    late.publish()
    assert late.stop(0), "no thread to end"
    assert kube.written()[-1].verb != "delete", "a shutdown out of time leaves it to the next"


@pytest.mark.parametrize(("left", "withdrawn"), [(0.4, False), (0.5, True), (0.7, True)])
def test_the_withdrawal_needs_half_a_second_of_the_stop_left(left: float,
                                                             withdrawn: bool) -> None:
    kube = FakeKube()
    publisher = Publisher(kube, DEPLOYED, "configmirror", "me", FakeClock())
    publisher.publish()
    publisher.stop(left)  # the fake clock stands still: exactly `left` is left
    assert (kube.written()[-1].verb == "delete") is withdrawn


def test_a_publisher_that_never_published_withdraws_nothing() -> None:
    kube = FakeKube()
    Publisher(kube, DEPLOYED, "configmirror", "me").stop()
    assert not kube.written()


UNAVAILABLE = ApiError(503, "ServiceUnavailable", "", "update", "p")


def published_before(clock: FakeClock, failures: list[ApiError | None]) -> FakeKube:
    """A server holding an earlier leader's policy (so each publish is one update), whose
    next requests get `failures`."""
    kube = FakeKube(clock=clock)
    Publisher(kube, DEPLOYED, "configmirror", "before").publish()
    kube.forget()
    kube.writes.clear()
    kube.failures = failures
    return kube


def test_an_unanswered_publish_backs_off_is_logged_once_then_refreshes(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(0.0)
    kube = published_before(clock, [UNAVAILABLE] * 7)
    publisher = Publisher(kube, DEPLOYED, "configmirror", "me", clock)
    with caplog.at_level(logging.INFO, "configmirror.operator.policy"):
        publisher.start()
        try:
            # 1 s after the first failure, doubling up to 30 s; 60 s after a success.
            for attempt, pause in enumerate([1, 2, 4, 8, 16, 30, 30, 60], start=1):
                wait_for(lambda n=attempt: clock.waiters() == 1 and len(kube.written()) == n,
                         what=f"attempt {attempt} to wait")
                assert clock.wake_times() == [clock.now() + pause], attempt
                clock.step(pause)
            wait_for(lambda: len(kube.written()) == 9, what="the refresh")
        finally:
            publisher.stop()
    assert not publisher._thread or not publisher._thread.is_alive(), "stop() joins its thread"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot publish the policy" in warnings[0].getMessage()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "published the policy to configmap configmirror/configmirror-policy"]
    assert [r[:2] for r in kube.written()] == [("update", POLICY_PATH)] * 9 + [
        ("delete", POLICY_PATH)]
    refreshed = kube.writes[1]
    assert kube.written()[-1].body["preconditions"] == {
        "resourceVersion": version_of(refreshed)}, "the version it wrote last"
    assert [w.verb for w in kube.writes] == ["update", "update", "delete"]


def test_after_a_success_the_next_outage_backs_off_from_the_start_and_is_logged_again(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(0.0)
    kube = published_before(clock, [UNAVAILABLE, None, UNAVAILABLE])
    publisher = Publisher(kube, DEPLOYED, "configmirror", "me", clock)
    with caplog.at_level(logging.INFO, "configmirror.operator.policy"):
        publisher.start()
        try:
            for attempt, pause in enumerate([1, 60, 1], start=1):  # not 2: the success reset it
                wait_for(lambda n=attempt: clock.waiters() == 1 and len(kube.written()) == n,
                         what=f"attempt {attempt} to wait")
                assert clock.wake_times() == [clock.now() + pause], attempt
                clock.step(pause)
        finally:
            publisher.stop()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, "once per outage: the second is a new one"


def test_the_commands_adopt_as_the_operator_does() -> None:
    settings, _ = judge_with([published(replace(DEPLOYED, adopt_from="reflector"))],
                             Settings(), {})
    assert settings.adopt_from == "reflector"
    assert policy_data(DEPLOYED)["adopt-from"] == ""  # off, and said so
