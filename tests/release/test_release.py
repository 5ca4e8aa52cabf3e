"""`make release` into a real registry, read back as a user would consume it.

The session's release (tests/fixtures.py) is `make release` into Debian's docker-registry
on 127.0.0.1 (plain HTTP), signed with a key pair made for the session. What is read back: the
OCI image index and its two platforms, the images themselves (run under Docker, the arm64 one
under qemu), cosign's signatures and attestations, the chart with `helm pull oci://`,
install.yaml's digest, the SBOMs, the wheel, the kubectl plugin for krew (its manifest and
archives; the one for this machine installed as krew does and run) and checksums.txt. And the
refusals: no REGISTRY, a VERSION that is not configmirror's, no key without UNSIGNED=1.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from configmirror import __version__
from configmirror_testing.cluster import REPO, require_docker
from configmirror_testing.controlplane import find_assets
from configmirror_testing.helm import Helm
from configmirror_testing.packaging import base_python, host_platform, krew_install
from configmirror_testing.pod import docker
from configmirror_testing.registry import OCI_INDEX, OCI_MANIFEST, Manifest, Registry
from configmirror_testing.release import (
    Release,
    image_reference,
    make_release,
    publish,
)

# The first test's setup may run a cold `make release`: cosign and syft built from Go modules,
# the arm64 base's packages configured under emulation.
pytestmark = [pytest.mark.release, pytest.mark.timeout(3600)]
PLATFORMS = {"linux/amd64", "linux/arm64"}
# What the image must never hold: our test suite and its support package, the test tools, the
# installer (top-level in site-packages; a dependency's own tests inside its package are its).
NOT_SHIPPED = tuple(f"/site-packages/{name}/" for name in (
    "tests", "configmirror_testing", "_pytest", "pytest", "pytest_mock", "hypothesis", "pip",
    "setuptools"))
# Each installed distribution and its version, read inside an image by its own Python.
LIST_DISTRIBUTIONS = ("import importlib.metadata as m, json; print(json.dumps(sorted("
                      "(d.metadata['Name'].lower(), d.version) for d in m.distributions())))")
# Every configmirror module imported (what a missing wheel for the platform would break).
# (__main__ is the CLI itself: importing it runs it.)
IMPORT_ALL = ("import importlib, pkgutil, platform, configmirror; names = [m.name for m in "
              "pkgutil.walk_packages(configmirror.__path__, 'configmirror.') "
              "if m.name != 'configmirror.__main__']; "
              "[importlib.import_module(n) for n in names]; print(platform.machine(), len(names))")


def run(*cmd: str | Path, check: bool = True, timeout: float = 300,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=cwd)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {done.returncode}:\n"
                             f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


@pytest.fixture(scope="module")
def pulled(release: Release) -> Iterator[dict[str, str]]:
    """Each platform's image pulled by Docker from the registry, by the index's tag (Docker
    picks the platform's manifest from the index, as a node does)."""
    require_docker()
    refs = {}
    try:
        for platform in sorted(PLATFORMS):
            docker("pull", "--quiet", "--platform", platform, f"{release.image}:{release.version}",
                   timeout=600)
            tag = f"{release.image}:{release.version}-{platform.replace('/', '-')}"
            docker("tag", f"{release.image}:{release.version}", tag)
            refs[platform] = tag
        yield refs
    finally:
        for ref in [*refs.values(), f"{release.image}:{release.version}"]:
            docker("rmi", "--force", ref, check=False)


def normalized(name: str) -> str:
    """A Python distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def docker_run(image: str, platform: str, *args: str, entrypoint: str | None = None) -> str:
    """Run the image as deploy/'s pod would be: read-only, non-root, no network."""
    flags = ["--rm", "--platform", platform, "--read-only", "--network", "none",
             "--user", "65532:65532", "--cap-drop", "ALL"]
    if entrypoint:
        flags += ["--entrypoint", entrypoint]
    return docker("run", *flags, image, *args, timeout=600).stdout


def verify(cosign: Path, release: Release, reference: str, *extra: str,
           command: str = "verify") -> subprocess.CompletedProcess[str]:
    assert release.public_key is not None
    return run(cosign, command, "--key", release.public_key, "--insecure-ignore-tlog=true",
               "--allow-http-registry", "--allow-insecure-registry", *extra, reference,
               check=False, timeout=120)


# -- refusals (nothing built, nothing pushed) ------------------------------------------------------

def test_release_without_a_registry_fails_and_says_registry_is_required(tmp_path: Path) -> None:
    done = make_release([f"VERSION={__version__}"], {"UNSIGNED": "1"}, tmp_path / "log")
    assert done.returncode != 0
    assert "REGISTRY is required" in done.stderr, done.stderr


def test_release_of_a_version_that_is_not_configmirrors_fails_naming_both(
        registry: Registry, tmp_path: Path) -> None:
    done = make_release([f"REGISTRY={registry.address}/wrong", "VERSION=9.9.9"],
                        {"UNSIGNED": "1"}, tmp_path / "log")
    assert done.returncode != 0
    assert "VERSION=9.9.9" in done.stderr and __version__ in done.stderr, done.stderr
    assert registry.tags_or_none("wrong/configmirror") is None


def test_release_without_a_key_says_it_would_be_unsigned_and_fails_before_building(
        registry: Registry, tmp_path: Path) -> None:
    done = make_release([f"REGISTRY={registry.address}/nokey", f"VERSION={__version__}"], {},
                        tmp_path / "log", timeout=120)
    assert done.returncode != 0
    assert "UNSIGNED" in done.stderr and "COSIGN_KEY" in done.stderr, done.stderr
    assert registry.tags_or_none("nokey/configmirror") is None, "nothing may be pushed"


# -- the image index ------------------------------------------------------------------------------

def test_the_tag_is_an_oci_index_of_linux_amd64_and_linux_arm64(release: Release) -> None:
    index = release.registry.manifest(release.repository, release.version)
    assert index.media_type == OCI_INDEX
    assert dict(release.manifests()).keys() == PLATFORMS
    for platform, digest in release.manifests():
        manifest = release.registry.manifest(release.repository, digest)
        assert manifest.media_type == OCI_MANIFEST
        config = json.loads(release.registry.blob(release.repository,
                                                  manifest.json()["config"]["digest"]))
        assert f"{config['os']}/{config['architecture']}" == platform


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_each_image_runs_configmirror_as_a_numeric_non_root_user_and_holds_no_test_code(
        release: Release, platform: str) -> None:
    digest = dict(release.manifests())[platform]
    manifest = release.registry.manifest(release.repository, digest).json()
    config = json.loads(release.registry.blob(release.repository, manifest["config"]["digest"]))
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["configmirror"]
    assert config["config"]["Cmd"] == ["run"]
    files = release.layer_files(digest)
    assert any(f.startswith("/opt/configmirror/lib/python3") and f.endswith(
                   "/configmirror/cli/main.py")
               for f in files), "configmirror is not in the venv"
    shipped = sorted(f for f in files if any(bad in f for bad in NOT_SHIPPED)
                     or "configmirror_testing" in f or f.startswith("/opt/configmirror/tests"))
    assert shipped == [], shipped[:20]


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_each_image_runs_configmirror_version_and_imports_every_module_read_only(
        pulled: dict[str, str], platform: str) -> None:
    # Under qemu for linux/arm64: the platform's own Python and wheels, emulated.
    assert docker_run(pulled[platform], platform, "version").strip().endswith(__version__)
    machine, count = docker_run(pulled[platform], platform, "-c", IMPORT_ALL,
                                entrypoint="python").split()
    assert machine == {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[platform]
    assert int(count) >= 20, "every module under src/configmirror/"


def test_the_amd64_image_holds_what_make_image_builds(pulled: dict[str, str], image: str) -> None:
    """The release's linux/amd64 image is `make image`'s: the same distributions at the same
    versions and the same run-time configuration."""
    released = json.loads(docker_run(pulled["linux/amd64"], "linux/amd64", "-c",
                                     LIST_DISTRIBUTIONS, entrypoint="python"))
    built = json.loads(docker_run(image, "linux/amd64", "-c", LIST_DISTRIBUTIONS,
                                  entrypoint="python"))
    assert released == built
    def runtime(ref: str) -> dict[str, Any]:
        config = json.loads(docker("image", "inspect", ref).stdout)[0]["Config"]
        return {k: config.get(k) for k in ("User", "Entrypoint", "Cmd", "Env", "ExposedPorts")}
    assert runtime(pulled["linux/amd64"]) == runtime(image)


# -- signatures -----------------------------------------------------------------------------------

def test_cosign_verify_with_the_key_succeeds_for_the_index_by_tag_and_by_digest(
        cosign: Path, release: Release) -> None:
    for reference in (f"{release.image}:{release.version}", f"{release.image}@{release.digest()}"):
        done = verify(cosign, release, reference)
        assert done.returncode == 0, done.stderr
        [claim] = json.loads(done.stdout)
        assert claim["critical"]["image"]["docker-manifest-digest"] == release.digest()


def test_cosign_verify_succeeds_for_each_image_and_its_sbom_attestation(
        cosign: Path, release: Release) -> None:
    for platform, digest in release.manifests():
        assert verify(cosign, release, f"{release.image}@{digest}").returncode == 0, platform
        done = verify(cosign, release, f"{release.image}@{digest}", "--type", "cyclonedx",
                      command="verify-attestation")
        assert done.returncode == 0, (platform, done.stderr)


def test_cosign_verify_fails_once_the_tag_names_a_manifest_the_key_never_signed(
        cosign: Path, release: Release) -> None:
    registry, name = release.registry, release.repository
    original = registry.manifest(name, release.version)
    # A tampered release: the arm64 image's manifest with one annotation more, pushed over
    # the tag (its layers are in the registry already, so the registry takes it).
    arm64 = registry.manifest(name, dict(release.manifests())["linux/arm64"])
    body = arm64.json()
    body.setdefault("annotations", {})["tampered"] = "true"
    tampered = Manifest(json.dumps(body).encode(), arm64.media_type, "")
    try:
        registry.put_manifest(name, release.version, tampered)
        assert release.digest() != original.digest
        done = verify(cosign, release, f"{release.image}:{release.version}")
        assert done.returncode != 0, done.stdout
        assert "no signatures found" in done.stderr.lower(), done.stderr
    finally:
        registry.put_manifest(name, release.version, original)
    assert release.digest() == original.digest


# -- the chart ------------------------------------------------------------------------------------

def test_helm_pull_oci_gets_the_chart_whose_default_image_is_the_release(
        helm: Helm, release: Release, tmp_path: Path) -> None:
    helm("pull", release.chart, "--version", release.version, "--plain-http",
         "--destination", str(tmp_path))
    [tgz] = tmp_path.glob("*.tgz")
    assert tgz.name == f"configmirror-{release.version}.tgz"
    chart = yaml.safe_load(helm("show", "chart", str(tgz)).stdout)
    assert (chart["version"], chart["appVersion"]) == (release.version, release.version)
    values = yaml.safe_load(helm("show", "values", str(tgz)).stdout)
    assert values["image"]["repository"] == release.image
    rendered = helm("template", "configmirror", str(tgz), "--namespace", "configmirror").stdout
    assert image_reference(rendered) == f"{release.image}:{release.version}"
    with tarfile.open(tgz) as tar:
        readme = tar.extractfile("configmirror/README.md").read().decode()  # type: ignore[union-attr]
    assert f"Its default image is `{release.image}`" in readme
    assert "No registry publishes" not in readme
    # Apart from its default image, the chart is charts/configmirror as it is in the tree.
    with tarfile.open(tgz) as tar:
        templates = {m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
                     for m in tar.getmembers() if "/templates/" in m.name}
    tree = REPO / "charts" / "configmirror"
    assert templates == {str(p.relative_to(tree)): p.read_bytes()
                         for p in (tree / "templates").iterdir()}


def test_the_chart_in_the_registry_is_signed(cosign: Path, release: Release) -> None:
    chart = release.registry.manifest(f"{release.path}/charts/configmirror", release.version)
    done = verify(cosign, release, f"{release.prefix}/charts/configmirror@{chart.digest}")
    assert done.returncode == 0, done.stderr


# -- dist/ ----------------------------------------------------------------------------------------

def test_install_yaml_is_deploy_with_the_image_pinned_to_the_index_digest(
        release: Release) -> None:
    reference = image_reference(release.install_yaml.read_text())
    assert reference == f"{release.image}@{release.digest()}"
    assert release.registry.has_manifest(release.repository, release.digest())
    # Everything else is `kubectl kustomize deploy/` (test_chart.py holds that to the chart).
    assets = find_assets(REPO)
    assert assets is not None, "no kubectl (make controlplane)"
    deploy = run(assets / "kubectl", "kustomize", REPO / "deploy").stdout
    expected = deploy.replace(f"image: configmirror:{release.version}\n", f"image: {reference}\n")
    assert expected != deploy, "deploy/ names no image configmirror:<version>"
    assert release.install_documents() == [d for d in yaml.safe_load_all(expected) if d]


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_the_sbom_lists_the_images_python_and_debian_packages_with_versions(
        release: Release, pulled: dict[str, str], platform: str) -> None:
    sbom = json.loads((release.dist / f"sbom-{platform.replace('/', '-')}.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    purls = {c.get("purl", "").split("?")[0] for c in sbom["components"]}
    pypi = {(normalized(p.split("/", 1)[1].split("@")[0]), p.split("@")[1])
            for p in purls if p.startswith("pkg:pypi/")}
    installed = json.loads(docker_run(pulled[platform], platform, "-c", LIST_DISTRIBUTIONS,
                                      entrypoint="python"))
    names = {normalized(name) for name, _ in installed}
    assert {"configmirror", "kubernetes", "prometheus-client"} <= names
    missing = [f"{n}=={v}" for n, v in installed if (normalized(n), v) not in pypi]
    assert missing == [], missing
    debian = {p.split("@")[0] for p in purls if p.startswith("pkg:deb/debian/")}
    assert {"pkg:deb/debian/libc6", "pkg:deb/debian/python3.11"} <= debian, sorted(debian)[:10]


def test_dist_holds_the_wheel_and_the_krew_plugin_whose_archive_installs_and_runs(
        release: Release, tmp_path: Path) -> None:
    assert (release.dist / f"configmirror-{__version__}-py3-none-any.whl").is_file()
    manifest = yaml.safe_load((release.dist / "configmirror.yaml").read_text())
    assert (manifest["apiVersion"], manifest["kind"], manifest["metadata"]["name"]) == (
        "krew.googlecontainertools.github.com/v1alpha2", "Plugin", "configmirror")
    assert manifest["spec"]["version"] == f"v{__version__}"
    platforms = {"{os}/{arch}".format(**p["selector"]["matchLabels"]): p
                 for p in manifest["spec"]["platforms"]}
    assert platforms.keys() == {"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}
    archives = {}
    for name, entry in platforms.items():
        archive = release.dist / (
            f"kubectl-configmirror-{__version__}-{name.replace('/', '-')}.tar.gz")
        # No KREW_URI_BASE: this machine's dist/ (on GitHub Actions, the repository's release).
        assert entry["uri"].endswith(f"/{archive.name}"), entry["uri"]
        assert entry["uri"].startswith(("file:///", "https://")), entry["uri"]
        assert hashlib.sha256(archive.read_bytes()).hexdigest() == entry["sha256"]
        assert entry["bin"] == "kubectl-configmirror"
        archives[name] = archive
    assert {p.name for p in release.dist.glob("kubectl-configmirror-*")} \
        == {a.name for a in archives.values()}
    os_name, arch = host_platform()
    bin_dir = krew_install(manifest, archives[f"{os_name}/{arch}"], tmp_path / "krew")
    (tmp_path / "python").mkdir()
    (tmp_path / "python" / "python3").symlink_to(base_python())
    env = {"PATH": f"{bin_dir}:{tmp_path / 'python'}", "HOME": str(tmp_path)}
    assert run(base_python(), "-I", "-S", bin_dir / "kubectl-configmirror", "version"
               ).stdout.strip() == f"configmirror {__version__}"
    done = subprocess.run(["kubectl-configmirror", "--help"], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    assert done.stdout.startswith("usage: kubectl configmirror"), done.stdout[:200]


def test_checksums_txt_covers_every_file_of_dist_and_they_match(release: Release) -> None:
    listed = {line.split(None, 1)[1].strip()
              for line in (release.dist / "checksums.txt").read_text().splitlines()}
    assert listed == {p.name for p in release.dist.iterdir()} - {"checksums.txt"}
    run("sha256sum", "--check", "--strict", "checksums.txt", cwd=release.dist)


# -- unsigned -------------------------------------------------------------------------------------

def test_an_unsigned_release_says_so_and_carries_no_signature(
        registry: Registry, cosign: Path, release: Release, tmp_path: Path) -> None:
    # One image and one plugin archive: what is asked here is the signatures, and the full
    # set of platforms is the signed release's (the plugin's archives alone take a minute).
    unsigned = publish(registry, "unsigned", __version__, tmp_path / "dist", tmp_path / "log",
                       extra=["PLATFORMS=linux/amd64", "KREW_PLATFORMS=linux/amd64",
                              "KREW_PYTHONS=3.11"])
    assert "UNSIGNED" in unsigned.output
    assert dict(unsigned.manifests()).keys() == {"linux/amd64"}
    done = verify(cosign, release, f"{unsigned.image}:{unsigned.version}")
    assert done.returncode != 0, done.stdout
