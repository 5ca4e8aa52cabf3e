"""The image's promises, checked by reading the Dockerfile (hadolint runs in `make lint`; the
built image runs for real in tests/image/test_pod.py)."""

from __future__ import annotations

import json
import re

import yaml

from configmirror import __version__
from configmirror_testing.cluster import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()


def instructions(name: str, text: str = DOCKERFILE) -> list[str]:
    return [line.split(None, 1)[1] for line in text.splitlines()
            if line.split(None, 1)[:1] == [name]]


def test_default_base_is_the_official_slim_python_pinned_by_version() -> None:
    args = dict(a.split("=", 1) for a in instructions("ARG") if "=" in a)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", args["BASE_IMAGE"])


def stages() -> list[tuple[str, str, str]]:
    """(base, name, body) of each stage, in order; an unnamed stage's name is ""."""
    found = []
    for chunk in DOCKERFILE.split("\nFROM ")[1:]:
        head, _, body = chunk.partition("\n")
        base, _, name = head.partition(" AS ")
        found.append((base.strip(), name.strip(), body))
    return found


def stage(name: str) -> str:
    (body,) = [b for _, n, b in stages() if n == name]
    return body


def runs(text: str) -> list[str]:
    """The RUN instructions of `text`, each on one line with single spaces."""
    lines = [" ".join(line.split()) for line in text.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line.startswith("RUN ")]


def test_runs_as_a_numeric_non_root_user() -> None:
    users = instructions("USER")
    assert users, "no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0)


def test_entrypoint_and_default_command() -> None:
    assert json.loads(instructions("ENTRYPOINT")[-1]) == ["configmirror"]
    assert json.loads(instructions("CMD")[-1]) == ["run"]


def test_every_stage_starts_from_the_base_so_the_venv_runs_in_the_image() -> None:
    names = {name for _, name, _ in stages()}
    for base, name, _ in stages():
        assert base == "${BASE_IMAGE}" or (base in names and base == "runtime"), (name, base)
    assert [b for b, n, _ in stages() if n in ("", "offline")] == ["runtime", "runtime"]


def test_the_image_and_the_offline_target_are_runtime_plus_the_venv_only() -> None:
    """The default (last) stage and `offline` (make image): one COPY of a venv, no RUN."""
    final = stages()[-1]
    assert final[1] == "", "the default target is the last, unnamed stage"
    for body, venv in ((final[2], "venv"), (stage("offline"), "offline-venv")):
        assert [i for i in body.splitlines() if i.strip() and not i.startswith("#")] == [
            f"COPY --from={venv} /opt/configmirror /opt/configmirror"]
    assert "PYTHONDONTWRITEBYTECODE=1" in stage("runtime")
    assert not instructions("RUN", stage("runtime"))


def test_both_venvs_are_made_by_the_same_offline_commands_with_no_pip_cache() -> None:
    """`venv` (docker build .) and `offline-venv` (make image) install the same way; only
    where their wheels come from differs."""
    offline, online = runs(stage("offline-venv")), runs(stage("venv"))
    assert offline == online
    assert len(offline) == 2
    assert all("pip install --no-cache-dir --no-index" in r for r in offline)
    assert re.search(r"pip uninstall --yes [^&]* pip setuptools &&", offline[1])
    assert instructions("COPY", stage("offline-venv")) == [
        "build/image/wheels/deps/ /wheels/deps/", "build/image/wheels/app/ /wheels/app/"]
    assert instructions("COPY", stage("venv")) == [
        "--from=wheels /wheels/deps/ /wheels/deps/", "--from=wheels /wheels/app/ /wheels/app/"]


def test_the_offline_target_needs_no_buildkit_feature() -> None:
    """The classic builder builds every stage up to its --target: none of them may use
    RUN --mount (make image works with either builder)."""
    names = [name for _, name, _ in stages()]
    before = stages()[:names.index("offline") + 1]
    assert not [r for _, _, body in before for r in runs(body) if r.startswith("RUN --")]


def test_only_the_wheels_stage_may_see_a_ca_bundle_and_only_as_a_secret() -> None:
    words = ("ca-certificates.crt", "ssl_cert_file", "pip_cert", "requests_ca_bundle",
             "pip_index_url", "http_proxy", "https_proxy")
    for _, name, body in stages():
        if name != "wheels":
            for word in words:
                assert word not in body.lower(), (name, word)
    (download,) = runs(stage("wheels"))
    assert download.startswith("RUN --mount=type=secret,id=ca ")
    assert "export PIP_CERT=/run/secrets/ca" in download
    assert not instructions("ENV", stage("wheels"))
    assert [a.split("=")[0] for a in instructions("ARG")] == ["BASE_IMAGE"], "no other input"


def test_dockerignore_sends_the_source_and_the_wheels_only() -> None:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"
    sent = {line[1:] for line in lines if line.startswith("!")}
    assert sent == {"pyproject.toml", "README.md", "src/", "build/image/wheels/"}
    copied = {c.split()[0] for c in instructions("COPY") if not c.startswith("--from")}
    assert copied == {"pyproject.toml", "src/", "build/image/wheels/deps/",
                      "build/image/wheels/app/"}
    readme = instructions("COPY", stage("wheels"))[0]
    assert readme == "pyproject.toml README.md ./"


def test_deploy_and_the_chart_run_the_image_make_image_builds() -> None:
    """configmirror:<version>, what `make image` tags by default; nothing unpublished."""
    kustomization = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    (entry,) = kustomization["images"]
    image = f"{entry.get('newName', entry['name'])}:{entry['newTag']}"
    assert image == f"configmirror:{__version__}"
    assert "IMAGE        ?= configmirror:$(VERSION)" in (REPO / "Makefile").read_text()
    values = yaml.safe_load((REPO / "charts" / "configmirror" / "values.yaml").read_text())
    assert values["image"]["repository"] == "configmirror"  # the tag is the chart's appVersion
