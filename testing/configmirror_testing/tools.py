"""The tools the tests, the benchmarks and `make demo` need, and the one rule for finding them.

A tool is found in the folder its environment variable names (KUBEBUILDER_ASSETS, or what a
developer exports), else in the cache of its build script under hack/ (hack/lib/cache.sh),
which builds it first when building is allowed: in CI (CI=true) and under `make test` or
`make cluster-test` (CONFIGMIRROR_BUILD=1). Elsewhere only a finished build is used, and
nothing needs Go.

`require_tool` is what a test or fixture calls: the tool's folder, or, without it, the test
skips with one line saying how to get it, and in CI, where everything is built or installed,
fails. `missing` and `require` apply the same rule to anything else a test needs (Docker, a
registry, root).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 3600.0  # a cold kube-apiserver build takes minutes, 25 on a slow machine
FIND_TIMEOUT = 60.0
CONTROL_PLANE = ("kube-apiserver", "etcd", "etcdctl", "kubectl")
OLDEST = ("kube-apiserver", "etcd")
NODE = (*CONTROL_PLANE, "kubelet", "kubeadm", "kube-scheduler", "kube-controller-manager",
        "kube-proxy", "pause")
GO = "needs Go 1.26+"


@dataclass(frozen=True)
class Tool:
    """A tool: the build script (and its arguments) that prints where it is, the variables
    that may name a folder holding it instead, the files that folder must hold, and how a
    developer gets it."""

    script: tuple[str, ...]
    files: tuple[str, ...]
    hint: str
    env: tuple[str, ...] = ()


def _pinned(name: str, env: tuple[str, ...] = ()) -> Tool:
    return Tool(("hack/tools/build.sh", name), (name,), f"run `make {name}` ({GO})", env)


TOOLS = {
    "controlplane": Tool(
        ("hack/controlplane/build.sh",), CONTROL_PLANE,
        f"run `make controlplane` ({GO}) or set KUBEBUILDER_ASSETS to a folder with "
        + ", ".join(CONTROL_PLANE), ("CONFIGMIRROR_CONTROLPLANE_ASSETS", "KUBEBUILDER_ASSETS")),
    # The oldest Kubernetes minor the docs claim (versions.env's OLDEST_*): kube-apiserver and
    # etcd only; kubectl and etcdctl are the control plane's.
    "controlplane-oldest": Tool(
        ("hack/controlplane/build.sh", "--oldest"), OLDEST,
        f"run `make controlplane-oldest` ({GO}) or set CONFIGMIRROR_OLDEST_ASSETS to a folder "
        "with " + ", ".join(OLDEST), ("CONFIGMIRROR_OLDEST_ASSETS",)),
    "node": Tool(("hack/controlplane/build.sh", "--node"), NODE,
                 f"run `make node` ({GO}, gcc and libc6-dev)",
                 ("CONFIGMIRROR_CONTROLPLANE_ASSETS", "KUBEBUILDER_ASSETS")),
    "promtool": Tool(("hack/promtool/build.sh",), ("promtool", "promql-selectors"),
                     f"run `make promtool` ({GO})", ("CONFIGMIRROR_PROMTOOL_DIR",)),
    "helm": _pinned("helm", ("CONFIGMIRROR_HELM_DIR",)),
    "kind": _pinned("kind", ("CONFIGMIRROR_KIND_DIR",)),
    **{name: _pinned(name) for name in ("cosign", "crane", "syft", "actionlint")},
}

# What a long build's output passes through: the test suite's conftest makes it reach the
# terminal past pytest's capture, so a 20-minute build is not a silent one.
uncaptured: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext


def building() -> bool:
    """Whether a missing tool is built here (CI, or `make` asked for it)."""
    return os.environ.get("CI") == "true" or os.environ.get("CONFIGMIRROR_BUILD") == "1"


def find_tool(name: str, build: bool | None = None, repo: Path = REPO) -> Path | None:
    """The folder holding tool `name` (a key of TOOLS), or None: from its variables, else its
    build script's cache, built first when `build` (default: `building()`)."""
    tool = TOOLS[name]
    for var in tool.env:
        folder = os.environ.get(var)
        if folder and _holds(Path(folder), tool.files):
            return Path(folder)
    build = building() if build is None else build
    script = repo / tool.script[0]
    if not script.is_file():
        return None
    # "Already built?" first, quietly; only a build's output (minutes of it) is shown.
    return _run(tool, script, build=False) or (_run(tool, script, build=True) if build else None)


def _run(tool: Tool, script: Path, build: bool) -> Path | None:
    env = dict(os.environ)
    if not build:
        env["CONFIGMIRROR_FIND_ONLY"] = "1"
    with uncaptured() if build else contextlib.nullcontext():
        done = subprocess.run([str(script), *tool.script[1:]], stdout=subprocess.PIPE,
                              stderr=None if build else subprocess.DEVNULL, text=True, env=env,
                              check=False, timeout=BUILD_TIMEOUT if build else FIND_TIMEOUT)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return None
    found = Path(lines[-1])
    folder = found if found.is_dir() else found.parent
    return folder if _holds(folder, tool.files) else None


def _holds(folder: Path, files: tuple[str, ...]) -> bool:
    return all((folder / f).is_file() for f in files)


def missing(reason: str) -> NoReturn:
    """Skip the calling test for `reason`; in CI, where everything a test needs is built or
    installed, fail it."""
    import pytest  # only the tests call this; the benchmarks import this module without it

    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def require(reason: str | None) -> None:
    """`missing(reason)`, unless reason is None."""
    if reason is not None:
        missing(reason)


def require_tool(name: str) -> Path:
    """The folder holding tool `name`, built first when `building()`; without it the test
    skips, and in CI fails, saying how to get it."""
    found = find_tool(name)
    if found is None:
        tool = TOOLS[name]
        how = (f"{' '.join(tool.script)} failed (its output is above)" if building()
               else tool.hint)
        missing(f"no {name}: {how}")
    return found
