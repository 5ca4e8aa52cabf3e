"""The image's promises, checked by reading the Dockerfile (hadolint runs in `make lint`)."""

from __future__ import annotations

import json
import re

from tests.conftest import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()


def instructions(name: str) -> list[str]:
    return [line.split(None, 1)[1] for line in DOCKERFILE.splitlines()
            if line.split(None, 1)[:1] == [name]]


def test_base_images_are_official_slim_python_pinned_by_version() -> None:
    bases = [f.split()[0] for f in instructions("FROM")]
    assert len(bases) == 2, "multi-stage: a build stage and a runtime stage"
    for base in bases:
        assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", base), base


def test_runs_as_a_numeric_non_root_user() -> None:
    users = instructions("USER")
    assert users, "no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0)


def test_entrypoint_and_default_command() -> None:
    assert json.loads(instructions("ENTRYPOINT")[-1]) == ["configmirror"]
    assert json.loads(instructions("CMD")[-1]) == ["run"]


def test_final_stage_installs_only_wheels_and_writes_no_bytecode_at_run_time() -> None:
    final = DOCKERFILE.split("\nFROM ")[-1]
    assert "COPY --from=build /wheels" in final and "tests" not in final
    assert "PYTHONDONTWRITEBYTECODE=1" in final


def test_dockerignore_keeps_the_context_to_what_the_build_needs() -> None:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", "start from nothing, then allow what the build needs"
    assert {"!pyproject.toml", "!README.md", "!src/"} <= set(lines)
