"""The command line: mistakes end in one clear line and exit code 1, never a traceback."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from configmirror import __version__
from configmirror.cli import flags, reference
from configmirror.cli import main as cli
from configmirror.cli.arguments import EXIT_ATTENTION, EXIT_ERROR, EXIT_OK, NAMESPACE_HELP
from configmirror.operator.settings import Settings
from configmirror.vocabulary import CONFIGMAP, SECRET
from configmirror_testing.commands import parsed
from configmirror_testing.controlplane import free_port


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONFIGMIRROR_")}
    clean.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run([sys.executable, "-m", "configmirror", *args], capture_output=True,
                          text=True, timeout=60, env={**clean, **(env or {})}, check=False)


def assert_one_line_error(done: subprocess.CompletedProcess[str], contains: str) -> None:
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("configmirror: ") and contains in lines[0], lines[0]
    assert "Traceback" not in done.stderr


def unreachable_kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    return path


def test_version() -> None:
    done = run("version")
    assert (done.returncode, done.stdout.strip()) == (0, f"configmirror {__version__}")


@pytest.mark.parametrize(("args", "contains"), [
    (("run", "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    (("run", "--workers", "zero"), "argument --workers: 'zero' is not an integer"),
    (("run", "--workers", "0"), "--workers must be at least 1"),
    (("run", "--max-retries", "0"), "--max-retries must be at least 1"),
    (("run", "--log-format", "xml"), "argument --log-format: 'xml' is not one of text, json"),
    (("run", "--exclude-namespaces", "kube-["), "--exclude-namespaces: invalid namespace"),
    (("run", "--metrics-bind-address", "nowhere"), "--metrics-bind-address must be host:port"),
    (("frobnicate",), "invalid choice: 'frobnicate'"),
    ((), "the following arguments are required"),
])
def test_bad_flags_end_in_one_line_and_exit_1(args: tuple[str, ...], contains: str) -> None:
    assert_one_line_error(run(*args), contains)


def test_flags_come_from_the_environment_too() -> None:
    assert_one_line_error(run("run", env={"CONFIGMIRROR_WORKERS": "0"}),
                          "--workers must be at least 1")
    assert_one_line_error(run("run", env={"CONFIGMIRROR_MAX_RETRIES": "many"}),
                          "CONFIGMIRROR_MAX_RETRIES='many' (for --max-retries) is not an "
                          "integer")


def test_missing_kubeconfig_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(run("run", "--kubeconfig", str(tmp_path / "nope")),
                          "cannot load cluster configuration")


@pytest.mark.parametrize("command", [("run",), ("plan",), ("status",), ("wait", "ns/cfg"),
                                     ("migrate", "--from", "reflector")])
def test_unreachable_cluster_is_one_line(tmp_path: Path, command: tuple[str, ...]) -> None:
    assert_one_line_error(run(*command, "--kubeconfig", str(unreachable_kubeconfig(tmp_path))),
                          "cannot reach the API server at https://127.0.0.1:")


@pytest.mark.parametrize(("command", "contains"), [
    (("status", "configmap/ns/name/extra"), "'configmap/ns/name/extra' is not [KIND/]NAMESPACE"),
    (("plan", "-n", "ns", "a/b/c/d"), "'a/b/c/d' is not [KIND/]NAME (with -n ns)"),
    (("wait", "pod/ns/cfg"), "'pod' is not a kind"),
    (("-n", "ns", "status", "cm/other/cfg"), "'cm/other/cfg' is in namespace other, -n says ns"),
])
def test_a_bad_reference_fails_before_any_connection(
        tmp_path: Path, command: tuple[str, ...], contains: str) -> None:
    """With no kubeconfig anywhere: the reference's fault, not the kubeconfig's."""
    done = run(*command, env={"KUBECONFIG": str(tmp_path / "absent"), "HOME": str(tmp_path)})
    assert_one_line_error(done, contains)


# -- in-process: the parser is pure ------------------------------------------------------


@pytest.fixture(autouse=True)
def clean_environment(cli_environment: None) -> None:
    """No CONFIGMIRROR_* variable of the caller's leaks in (tests/unit/conftest.py)."""


@pytest.mark.parametrize(("argv", "command", "values"), [
    (["-n", "platform", "status"], "status", {"namespace": "platform"}),
    (["-nplatform", "status", "cm/cfg"], "status", {"namespace": "platform", "source": "cm/cfg"}),
    (["-o", "json", "wait", "ns/cfg"], "wait", {"output": "json", "source": "ns/cfg"}),
    (["--kubeconfig=/k", "--context", "c", "plan", "-o", "yaml"], "plan",
     {"kubeconfig": "/k", "context": "c", "output": "yaml"}),
    (["--namespace", "status", "plan"], "plan", {"namespace": "status"}),  # a value, not a command
    (["--output=yaml", "version"], "version", {"output": "yaml"}),
    (["status", "-n", "platform"], "status", {"namespace": "platform"}),
])
def test_global_flags_may_come_before_the_command_as_with_kubectl(
        argv: list[str], command: str, values: dict[str, str]) -> None:
    args = parsed(*cli.command_first(argv))
    assert args.command == command
    assert {name: getattr(args, name) for name in values} == values


def test_a_global_flag_before_a_command_without_it_is_refused_by_that_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["-n", "platform", "version"]) == EXIT_ERROR
    assert "unrecognized arguments: -n platform" in capsys.readouterr().err


def test_the_top_level_help_names_no_file_and_says_the_exit_codes() -> None:
    text = cli.parser().format_help()
    assert "README" not in text
    assert "0 on success, 1 on an error, 2 when what it found needs" in text
    assert "-n, -o, --kubeconfig and --context may also come before the command" in text


@pytest.mark.parametrize("command", ["plan", "status", "wait"])
def test_a_read_commands_help_points_to_run_for_the_policy_flags_it_takes(
        command: str) -> None:
    text = helps()[command]
    options = text.split("options:")[1].split("exit codes:")[0]
    assert "--source-namespaces" not in options and "--delete-grace" not in options
    policy = " ".join(text.split("\npolicy: ")[1].split())
    assert "--source-namespaces, --source-namespace-selector," in policy
    assert "--adopt-from, --cluster-name, --member-clusters) is taken here too" in policy
    extra = ("ns/cfg",) if command == "wait" else ()
    assert parsed(command, *extra, "--source-namespaces", "team-*").source_namespaces == "team-*"


def test_dash_dash_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"configmirror {__version__}\n"


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_version_prints_json_or_yaml(capsys: pytest.CaptureFixture[str], output: str) -> None:
    assert cli.main(["version", "-o", output]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(printed) if output == "json" else yaml.safe_load(printed)
    assert doc["version"] == __version__
    assert set(doc) == {"version", "python", "kubernetes_client"}


def helps() -> dict[str, str]:
    parser = cli.parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"": parser.format_help(), **{name: p.format_help()
                                         for name, p in commands.choices.items()}}


@pytest.mark.parametrize("command", ["", "run", "plan", "status", "wait", "version"])
def test_help_says_each_default_once_and_never_none(command: str) -> None:
    text = helps()[command]
    assert "None" not in text and "(default: )" not in text
    parser = cli.parser()
    sub = parser if not command else next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    ).choices[command]
    for action in sub._actions:
        assert (action.help or "").count("default:") <= 1, action.option_strings


def test_help_shows_defaults_as_their_flags_take_them() -> None:
    run, wait = " ".join(helps()["run"].split()), " ".join(helps()["wait"].split())
    assert "(default: 10m0s) [env CONFIGMIRROR_RESYNC_PERIOD]" in run
    assert "(default: 25s) [env CONFIGMIRROR_DRAIN_TIMEOUT]" in run
    assert "(default: 1m0s) [env CONFIGMIRROR_DELETE_GRACE]" in run
    assert "--leader-elect, --no-leader-elect elect a leader" in run
    assert "(default: false) [env CONFIGMIRROR_LEADER_ELECT]" in run
    assert "(default: 5m0s) [env CONFIGMIRROR_TIMEOUT]" in wait


@pytest.mark.parametrize(("command", "codes"), [
    ("plan", ["0  in sync", "1  error", "2  not in sync"]),
    ("status", ["0  shown", "1  error"]),
    ("wait", ["0  in sync", "1  error", "2  not in sync when --timeout passed"]),
    ("migrate", ["0  every source converts exactly", "1  error", "2  some need a human"]),
    ("run", ["0  stopped by SIGTERM", "1  error"]),
])
def test_help_documents_one_exit_code_scheme(command: str, codes: list[str]) -> None:
    text = helps()[command]
    listed = text.split("exit codes:\n")[1].split("\n\n")[0].splitlines()
    assert [line.strip()[:len(code)] for line, code in zip(listed, codes, strict=True)] == [
        code for code in codes]


def test_the_exit_codes_are_success_error_and_attention() -> None:
    assert (EXIT_OK, EXIT_ERROR, EXIT_ATTENTION) == (0, 1, 2)


@pytest.mark.parametrize("argv", [
    ("wait",), ("wait", "ns/name", "--timeout=soon"), ("wait", "pod/ns/name"),
    ("wait", "ns/name", "--kubeconfig", "/nonexistent/kubeconfig"),
    ("migrate",), ("migrate", "--from", "kyverno"), ("plan", "a/b/c/d"), ("status", "--nope")])
def test_a_command_that_cannot_start_is_an_error_never_needs_attention(
        argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(list(argv)) == EXIT_ERROR
    assert capsys.readouterr().err.startswith("configmirror: ")


# -- one way to name a source: [KIND/]NS/NAME, or -n NS [KIND/]NAME ----------------------------


@pytest.mark.parametrize(("text", "namespace", "said", "key"), [
    ("ns/name", None, None, "ns/name"),
    ("configmap/ns/name", None, "configmap", "ns/name"),
    ("secret/ns/name", None, "secret", "ns/name"),
    ("cm/ns/name", None, "configmap", "ns/name"),
    ("configmaps/ns/name", None, "configmap", "ns/name"),
    ("Secrets/ns/name", None, "secret", "ns/name"),
    ("name", "ns", None, "ns/name"),
    ("configmap/name", "ns", "configmap", "ns/name"),
    ("secret/name", "ns", "secret", "ns/name"),
    ("secret/ns/name", "ns", "secret", "ns/name"),
    ("cm/a.b-c", "ns-1", "configmap", "ns-1/a.b-c"),
])
def test_a_source_is_named_as_in_the_pull_annotation_or_as_kubectl_names_it(
        text: str, namespace: str | None, said: str | None, key: str) -> None:
    assert reference.parse(text, namespace) == (said, key)


@pytest.mark.parametrize(("text", "namespace", "message"), [
    ("name", None, "'name' is not [KIND/]NAMESPACE/NAME"),
    ("a/b/c/d", None, "'a/b/c/d' is not [KIND/]NAMESPACE/NAME"),
    ("a/b/c/d", "ns", "'a/b/c/d' is not [KIND/]NAME (with -n ns)"),
    ("pod/ns/name", None, "'pod/ns/name': 'pod' is not a kind (configmap, cm, configmaps, "
     "secret, secrets, networkpolicy"),
    ("other/name", "ns", "'other/name': 'other' is not a kind"),
    ("secret/other/name", "ns", "'secret/other/name' is in namespace other, -n says ns"),
    ("NS/name", None, "'NS/name': 'NS' is not a namespace name"),
    ("ns/Name", None, "'ns/Name': 'Name' is not an object name"),
    ("ns/", None, "'ns/': '' is not an object name"),
    ("name", "Bad_NS", "'name': 'Bad_NS' is not a namespace name"),
])
def test_a_source_named_otherwise_is_refused_saying_how(
        text: str, namespace: str | None, message: str) -> None:
    with pytest.raises(flags.UsageError) as raised:
        reference.parse(text, namespace)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize("command", ["plan", "status", "wait"])
def test_plan_status_and_wait_take_n_and_o_with_one_meaning(command: str) -> None:
    short = parsed(command, "-n", "team", "-o", "yaml", "cm/cfg")
    long = parsed(command, "--namespace=team", "--output=json", "cm/cfg")
    assert (short.namespace, short.output, short.source) == ("team", "yaml", "cm/cfg")
    assert (long.namespace, long.output) == ("team", "json")
    assert " ".join(helps()[command].split()).count(" ".join(NAMESPACE_HELP.split())) == 1


def test_n_is_never_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFIGMIRROR_NAMESPACE", "team")
    assert parsed("plan").namespace is None


def settings(secrets: bool) -> Settings:
    return Settings(secret_names="creds" if secrets else "",
                    secret_source_namespaces="*" if secrets else "")


def test_the_kind_of_a_source_is_the_one_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert reference.named_in(parsed("status", "secret/ns/creds"), settings(True)) == (
        SECRET, "ns/creds")
    assert reference.named_in(parsed("wait", "-n", "ns", "cm/cfg"), settings(True)) == (
        CONFIGMAP, "ns/cfg")
    assert reference.named_in(parsed("wait", "ns/cfg"), settings(True)) == (CONFIGMAP, "ns/cfg")
    assert capsys.readouterr().err == ""


def test_kind_is_a_deprecated_alias_that_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    assert reference.named_in(parsed("wait", "ns/creds", "--kind", "secret"), settings(True)) == (
        SECRET, "ns/creds")
    assert capsys.readouterr().err == (
        "configmirror: warning: --kind is deprecated: write secret/ns/creds\n")
    with pytest.raises(flags.UsageError, match="'configmap/ns/creds' is a configmap, --kind "
                                               "says secret"):
        reference.named_in(parsed("wait", "configmap/ns/creds", "--kind=secret"), settings(True))


def test_a_secret_source_needs_the_secret_flags() -> None:
    with pytest.raises(flags.UsageError, match="a secret source needs the operator's "
                                               "--secret-names"):
        reference.named_in(parsed("status", "secret/ns/creds"), settings(False))


def test_status_shows_a_namespaces_holdings_with_target_namespace() -> None:
    status = parsed("status", "--target-namespace", "team", "-n", "platform")
    assert (status.target_namespace, status.namespace, status.source) == (
        "team", "platform", None)
