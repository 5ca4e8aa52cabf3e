"""The layers are packages, and the packages are contracts: `lint-imports` (in `make lint`)
refuses an import against the stack (cli > operator > controller > client), into the wire
from the domain, or from a leaf into any package; each contract is shown to catch one."""

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
LAYERS = ("cli", "operator", "controller", "client")


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["contracts"])


def lint_copy(tmp_path: Path, module: str = "", line: str = "") -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the package (with `line` added to `module`, a path such as
    "replication/model")."""
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
    # The wire reaching up into the controller's layer.
    ("client/kube", "from configmirror.controller.ratelimit import RateLimiter", "Layers"),
    # The controller's machinery reaching up into the application.
    ("controller/controller", "from configmirror.operator.replicator import Replicator",
     "Layers"),
    # The domain reaching for the wire (model once imported kube for Resource).
    ("replication/model", "from configmirror.client.kube import Kube", "The domain is pure"),
    # A leaf reaching into a package (the clock reading the domain's grace).
    ("clock", "from configmirror.replication.plan import Grace", "The leaves"),
])
def test_a_bad_import_breaks_its_contract(tmp_path: Path, module: str, line: str,
                                          contract: str) -> None:
    done = lint_copy(tmp_path, module, line)
    said = " ".join(done.stdout.split())  # lint-imports wraps long lines
    (name,) = [c["name"] for c in contracts() if str(c["name"]).startswith(contract)]
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{name} BROKEN" in said and "1 broken" in said, done.stdout
    assert f"configmirror.{module.replace('/', '.')} -> " in said, done.stdout


def test_no_contract_names_a_module_inside_a_package() -> None:
    named = [str(m) for c in contracts() for key in ("layers", "source_modules",
                                                     "forbidden_modules")
             for m in c.get(key, [])]  # type: ignore[attr-defined]
    assert [m for m in named if m.count(".") > 1] == []


def test_every_package_is_in_a_contract_and_the_top_holds_at_most_eight_modules() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == {*LAYERS, "replication"}
    leaves = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    (leaf_contract,) = [c for c in contracts() if str(c["name"]).startswith("The leaves")]
    assert {f"configmirror.{m}" for m in leaves} == set(leaf_contract["source_modules"])  # type: ignore[arg-type]
    assert len(list(PACKAGE.glob("*.py"))) <= 8


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
