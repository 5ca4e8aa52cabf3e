""".github/workflows/: what they run, and that actionlint (in `make lint`) checks them for real.

GitHub is out of reach here, so the workflows never run in this suite; these tests hold them to
the release and CI they describe, and prove that actionlint, built from its Go module, rejects
a broken workflow and passes ours.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from configmirror_testing.cluster import REPO
from configmirror_testing.tools import require_tool

WORKFLOWS = REPO / ".github" / "workflows"


def workflow(name: str) -> dict[Any, Any]:
    return dict(yaml.safe_load((WORKFLOWS / name).read_text()))


def steps(doc: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in doc["jobs"].values() for step in job["steps"]]


@pytest.fixture(scope="module")
def actionlint() -> Path:
    return require_tool("actionlint") / "actionlint"


def lint(actionlint: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(actionlint), *map(str, files)], capture_output=True, text=True,
                          timeout=120, check=False, cwd=REPO)


def test_actionlint_passes_both_workflows(actionlint: Path) -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["ci.yml", "release.yml"]
    done = lint(actionlint, *files)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_rejects_a_workflow_with_an_unknown_key_and_a_bad_expression(
        actionlint: Path, tmp_path: Path) -> None:
    broken = tmp_path / ".github" / "workflows" / "release.yml"
    broken.parent.mkdir(parents=True)
    text = (WORKFLOWS / "release.yml").read_text()
    broken.write_text(text.replace("    runs-on: ubuntu-24.04\n",
                                   "    runs-on: ubuntu-24.04\n    run-on: typo\n", 1)
                      .replace("${{ github.workflow_ref }}", "${{ github.no_such_field }}", 1))
    done = lint(actionlint, broken)
    assert done.returncode == 1
    assert 'unexpected key "run-on"' in done.stdout, done.stdout
    assert "no_such_field" in done.stdout, done.stdout


def test_make_lint_runs_actionlint_on_the_workflows() -> None:
    done = subprocess.run(["make", "--dry-run", "--no-print-directory", "lint"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)
    assert "actionlint .github/workflows/*.yml" in done.stdout, done.stdout


def test_the_release_workflow_runs_make_release_on_a_version_tag_signed_keyless() -> None:
    doc = workflow("release.yml")
    assert doc[True]["push"]["tags"] == ["v[0-9]+.[0-9]+.[0-9]+"]  # YAML 1.1 reads `on` as True
    assert doc["permissions"] == {"contents": "write", "packages": "write", "id-token": "write"}
    [release] = [s for s in steps(doc) if "make release" in s.get("run", "")]
    assert release["env"]["COSIGN_KEYLESS"] == "1"
    assert release["env"]["COSIGN_CERTIFICATE_OIDC_ISSUER"] == \
        "https://token.actions.githubusercontent.com"
    assert 'REGISTRY="$REGISTRY"' in release["run"]
    uses = [s.get("uses", "") for s in steps(doc)]
    assert any(u.startswith("docker/setup-qemu-action@") for u in uses)
    assert any("gh release create" in s.get("run", "") and "dist/*" in s["run"]
               for s in steps(doc)), "dist/ is uploaded to the GitHub release"
    env = "\n".join(s.get("run", "") for s in steps(doc))
    assert "REGISTRY=ghcr.io/${GITHUB_REPOSITORY_OWNER,,}" in env


def test_the_ci_workflow_runs_ci_run_as_root() -> None:
    doc = workflow("ci.yml")
    assert set(doc[True]) == {"push", "pull_request"}
    runs = [s["run"] for s in steps(doc) if "run" in s]
    assert runs == ['sudo env "PATH=$PATH" "HOME=$HOME" bash .ci/run']
