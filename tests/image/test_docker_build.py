"""`docker build .` from a clean checkout: the Dockerfile's default target makes the wheels
inside the build (from the source and PyPI), so nothing but the checkout is needed.

Here PyPI's certificate verifies only with this machine's CA bundle, which the build gets the
way the Dockerfile documents it: a BuildKit secret, mounted for the one RUN that downloads.
The test then reads every layer of the image (`docker save`) and proves none holds a
certificate of that bundle that the base image did not ship, nor the bundle itself.
`make image` (the offline target) is what tests/image/test_pod.py builds and runs; both images
hold configmirror and its run-time dependencies only, no test or lint package (checked here).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import ssl
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from configmirror import __version__
from configmirror_testing.cluster import REPO, missing, require_docker
from configmirror_testing.packaging import forbidden, normalized
from configmirror_testing.pod import docker, remove_image

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]
# Each installed distribution and the names its Requires-Dist lists outside any extra, read
# inside an image by its own Python (the image has no pip: `pip list` is not there to ask).
REQUIRES = ("import importlib.metadata as m, json, re; print(json.dumps({d.metadata['Name']: "
            "[re.match(r'[A-Za-z0-9._-]+', r).group() for r in d.requires or [] "
            "if 'extra ==' not in r] for d in m.distributions()}))")
PEM = re.compile(rb"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----")


def buildkit_cli() -> str | None:
    """A docker CLI that builds with BuildKit: one with the buildx plugin, else one older than
    23 (BuildKit built in, turned on by DOCKER_BUILDKIT=1), anywhere on PATH."""
    seen = set()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        cli = Path(folder) / "docker"
        if not cli.is_file() or cli.resolve() in seen:
            continue
        seen.add(cli.resolve())
        if subprocess.run([cli, "buildx", "version"], capture_output=True,
                          timeout=30, check=False).returncode == 0:
            return str(cli)
        version = subprocess.run([cli, "version", "--format", "{{.Client.Version}}"],
                                 capture_output=True, text=True, timeout=30, check=False)
        major = version.stdout.strip().split(".")[0]
        if major.isdigit() and int(major) < 23:
            return str(cli)
    return None


def ca_bundle() -> Path:
    """The CA bundle this machine's pip verifies PyPI with."""
    found = os.environ.get("PIP_CERT") or ssl.get_default_verify_paths().cafile
    if not found or not Path(found).is_file():
        missing("no CA bundle found (PIP_CERT, or OpenSSL's default cafile)")
    return Path(found)


def clean_checkout(dest: Path) -> Path:
    """The tree as a fresh clone has it: the files git tracks or would (not ignored), as they
    are in the working tree; no build/, no venv, no wheels."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True, timeout=60).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is not there
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    assert not (dest / "build").exists()
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(image, base, CA bundle): `docker build .` of a clean checkout, on the base `make image`
    uses here, with the CA bundle as the secret `ca`."""
    require_docker()
    cli = buildkit_cli()
    if cli is None:
        missing("no docker CLI that builds with BuildKit (the buildx plugin, or Docker < 23)")
    bundle = ca_bundle()
    folder = tmp_path_factory.mktemp("docker-build")
    context = clean_checkout(folder / "checkout")
    base = subprocess.run([str(REPO / "hack" / "image.sh"), "--base"], cwd=REPO,
                          capture_output=True, text=True, timeout=1800,
                          check=True).stdout.strip().splitlines()[-1]
    tag = f"configmirror-build-e2e:{secrets.token_hex(4)}"
    log = folder / "build.log"
    with open(log, "w") as out:
        done = subprocess.run(
            [cli, "build", "--secret", f"id=ca,src={bundle}", "--build-arg",
             f"BASE_IMAGE={base}", "--tag", tag, "."],
            cwd=context, env={**os.environ, "DOCKER_BUILDKIT": "1"}, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=1500, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        pytest.fail(f"docker build . exited with {done.returncode}:\n{tail}", pytrace=False)
    try:
        yield tag, base, bundle
    finally:
        remove_image(tag)


def layers(image: str, folder: Path) -> list[list[tuple[str, bytes]]]:
    """The regular files of each layer of `image`, base first: (path, content)."""
    archive = folder / "image.tar"
    docker("save", "--output", str(archive), image, timeout=600)
    result = []
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer in manifest[0]["Layers"]:
            files = []
            with tarfile.open(fileobj=outer.extractfile(layer)) as inner:
                for member in inner:
                    if member.isfile():
                        files.append((member.name, inner.extractfile(member).read()))  # type: ignore[union-attr]
            result.append(files)
    archive.unlink()
    return result


def certificates(content: bytes) -> set[bytes]:
    return {b"".join(block.split()) for block in PEM.findall(content)}


def test_the_image_runs_configmirror(built: tuple[str, str, Path]) -> None:
    image, _, _ = built
    done = docker("run", "--rm", "--network", "none", image, "version")
    assert __version__ in done.stdout, done.stdout + done.stderr
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["configmirror"] and config["Cmd"] == ["run"]


def test_no_layer_holds_the_build_secret_or_a_certificate_the_base_did_not_ship(
        built: tuple[str, str, Path], tmp_path: Path) -> None:
    image, base, bundle = built
    secret = bundle.read_bytes()
    base_layers = len(json.loads(docker("image", "inspect", base).stdout)[0]["RootFS"]["Layers"])
    image_layers = layers(image, tmp_path)
    assert len(image_layers) > base_layers, "the venv is a layer of its own"
    shipped = {cert for files in image_layers[:base_layers] for _, content in files
               for cert in certificates(content)}
    # What the bundle holds beyond the base's own trust store: this machine's own CAs.
    private = certificates(secret) - shipped
    found = []
    for files in image_layers[base_layers:]:
        for name, content in files:
            assert content != secret, f"{name} is the CA bundle the build was given"
            assert not name.startswith(("run/secrets", "./run/secrets")), name
            added = certificates(content) & private
            if added:
                found.append((name, len(added)))
    # A dependency's own bundle (certifi's) holds public roots only: none of the machine's.
    assert not found, f"certificates of the build's CA bundle in the image: {found}"
    history = docker("image", "history", "--no-trunc", "--format", "{{.CreatedBy}}", image)
    assert "BEGIN CERTIFICATE" not in history.stdout
    env = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]["Env"]
    assert not [e for e in env if e.split("=")[0] in ("PIP_CERT", "SSL_CERT_FILE",
                                                      "REQUESTS_CA_BUNDLE")], env


@pytest.mark.parametrize("build", ["docker build .", "make image"])
def test_the_image_holds_configmirror_and_its_runtime_dependencies_only(
        build: str, request: pytest.FixtureRequest) -> None:
    image = request.getfixturevalue("built")[0] if build == "docker build ." \
        else request.getfixturevalue("image")  # tests/fixtures.py: hack/image.sh, make image's
    done = docker("run", "--rm", "--network", "none", "--entrypoint", "python", image,
                  "-c", REQUIRES)
    requires = {normalized(name): {normalized(r) for r in reqs}
                for name, reqs in json.loads(done.stdout).items()}
    installed = set(requires)
    assert {"configmirror", "kubernetes", "prometheus-client", "pyyaml", "orjson"} <= installed
    assert not installed & forbidden(), sorted(installed & forbidden())
    # Nothing but what configmirror needs: each distribution reached from it by Requires-Dist.
    reached: set[str] = set()
    queue = ["configmirror"]
    while queue:
        name = queue.pop()
        if name not in reached:
            reached.add(name)
            queue += requires.get(name, set())
    assert installed <= reached, sorted(installed - reached)
