"""The command line: mistakes end in one clear line and exit code 1, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from configmirror import __version__
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
    (("run", "--workers", "zero"), "invalid int value: 'zero'"),
    (("run", "--workers", "0"), "--workers must be at least 1"),
    (("run", "--max-retries", "0"), "--max-retries must be at least 1"),
    (("run", "--log-format", "xml"), "invalid choice: 'xml'"),
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
                          "CONFIGMIRROR_MAX_RETRIES='many' is not a valid int")


def test_missing_kubeconfig_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(run("run", "--kubeconfig", str(tmp_path / "nope")),
                          "cannot load cluster configuration")


@pytest.mark.parametrize("command", ["run", "plan"])
def test_unreachable_cluster_is_one_line(tmp_path: Path, command: str) -> None:
    assert_one_line_error(run(command, "--kubeconfig", str(unreachable_kubeconfig(tmp_path))),
                          "cannot reach the API server at https://127.0.0.1:")
