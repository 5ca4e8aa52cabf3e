"""The image's promises, checked by reading the Dockerfile (hadolint runs in `make lint`; the
built image runs for real in tests/image/test_pod.py)."""

from __future__ import annotations

import json
import re

import yaml

from configmirror import __version__
from configmirror_testing.cluster import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
FINAL_STAGE = DOCKERFILE.split("\nFROM ")[-1]


def instructions(name: str, text: str = DOCKERFILE) -> list[str]:
    return [line.split(None, 1)[1] for line in text.splitlines()
            if line.split(None, 1)[:1] == [name]]


def test_default_base_is_the_official_slim_python_pinned_by_version() -> None:
    args = dict(a.split("=", 1) for a in instructions("ARG") if "=" in a)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", args["BASE_IMAGE"])


def test_both_stages_start_from_the_same_base_so_the_venv_runs_in_the_final_one() -> None:
    bases = [f.split()[0] for f in instructions("FROM")]
    assert bases == ["${BASE_IMAGE}", "${BASE_IMAGE}"], "a build stage and a runtime stage"


def test_runs_as_a_numeric_non_root_user() -> None:
    users = instructions("USER")
    assert users, "no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0)


def test_entrypoint_and_default_command() -> None:
    assert json.loads(instructions("ENTRYPOINT")[-1]) == ["configmirror"]
    assert json.loads(instructions("CMD")[-1]) == ["run"]


def test_final_stage_holds_the_venv_only_and_writes_no_bytecode_at_run_time() -> None:
    assert instructions("COPY", FINAL_STAGE) == [
        "--from=build /opt/configmirror /opt/configmirror"]
    assert not instructions("RUN", FINAL_STAGE), "nothing installed or compiled at this stage"
    assert "PYTHONDONTWRITEBYTECODE=1" in FINAL_STAGE


def test_build_installs_offline_with_no_pip_cache_and_removes_the_installer() -> None:
    build_stage = " ".join(DOCKERFILE.split("\nFROM ")[1].replace("\\\n", " ").split())
    assert build_stage.count("pip install --no-cache-dir --no-index") == 2
    assert re.search(r"pip uninstall --yes [^&]* pip setuptools &&", build_stage)


def test_no_ca_bundle_or_proxy_setting_reaches_the_image() -> None:
    for word in ("ca-certificates.crt", "SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE",
                 "PIP_INDEX_URL", "http_proxy"):
        assert word.lower() not in DOCKERFILE.lower(), word


def test_dockerignore_sends_only_the_wheels() -> None:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines == ["*", "!build/image/wheels/"]
    copied = [c.split()[0] for c in instructions("COPY") if not c.startswith("--from")]
    assert copied == ["build/image/wheels/deps/", "build/image/wheels/app/"]


def test_deploy_and_the_chart_run_the_image_make_image_builds() -> None:
    """configmirror:<version>, what `make image` tags by default; nothing unpublished."""
    kustomization = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    (entry,) = kustomization["images"]
    image = f"{entry.get('newName', entry['name'])}:{entry['newTag']}"
    assert image == f"configmirror:{__version__}"
    assert "IMAGE        ?= configmirror:$(VERSION)" in (REPO / "Makefile").read_text()
    values = yaml.safe_load((REPO / "charts" / "configmirror" / "values.yaml").read_text())
    assert values["image"]["repository"] == "configmirror"  # the tag is the chart's appVersion
