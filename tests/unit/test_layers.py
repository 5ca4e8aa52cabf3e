"""The layers of DESIGN.md section 3 are a contract: `lint-imports` (in `make lint`) refuses a
back-edge, and every module of the package has a floor in it."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "configmirror"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["contracts"])


def lint_copy(tmp_path: Path, module: str = "", line: str = "") -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the package (with `line` added to `module`)."""
    shutil.copytree(PACKAGE, tmp_path / "configmirror",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    if module:
        path = tmp_path / "configmirror" / f"{module}.py"
        path.write_text(path.read_text() + f"\n{line}\n")
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})


def test_the_tree_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    done = lint_copy(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken." in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    # The domain reaching for the wire (model once imported kube for Resource).
    ("model", "from configmirror.kube import Kube", "forbidden"),
    # The wire reaching up into the controller's layer (kube once imported ratelimit).
    ("kube", "from configmirror.ratelimit import RateLimiter", "layers"),
    # The annotation language reaching up to the command line's settings.
    ("spec", "from configmirror.settings import Settings", "layers"),
    # Two siblings on one floor: the replicator may not drive the controller.
    ("replicator", "from configmirror.controller import Controller", "layers"),
])
def test_a_back_edge_breaks_the_lint(tmp_path: Path, module: str, line: str,
                                     contract: str) -> None:
    done = lint_copy(tmp_path, module, line)
    said = " ".join(done.stdout.split())  # lint-imports wraps long lines
    (name,) = [c["name"] for c in contracts() if c["type"] == contract]
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{name} BROKEN" in said and "1 broken" in said, done.stdout
    assert f"configmirror.{module} -> " in said, done.stdout


def test_every_module_has_a_floor() -> None:
    (layers,) = [c for c in contracts() if c["type"] == "layers"]
    floors = {m.strip() for floor in layers["layers"] for m in str(floor).split("|")}
    modules = {f"configmirror.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert modules - floors == set(), "add the new module to a floor in pyproject.toml"
    assert floors - modules == set(), "a floor names a module that is gone"


def imports_of_tests(source: str) -> list[str]:
    """The modules of `tests` a file imports (test modules share only configmirror_testing)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "tests"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "tests":
            found.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append("." * node.level + (node.module or ""))
    return found


def test_no_test_module_imports_another() -> None:
    importing = {str(path.relative_to(REPO)): names
                 for path in sorted((REPO / "tests").rglob("*.py"))
                 if (names := imports_of_tests(path.read_text()))}
    assert importing == {}, "builders and helpers belong in configmirror_testing"


@pytest.mark.parametrize("line", ["from tests.unit.test_plan import source",
                                  "import tests.fixtures", "from . import conftest"])
def test_an_import_of_a_test_module_is_found(line: str) -> None:
    assert imports_of_tests(f"import os\n{line}\n") != []
