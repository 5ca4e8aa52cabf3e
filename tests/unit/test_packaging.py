"""configmirror installed without the development toolchain.

The wheel (`make dist`, `pip install .`): built by hack/release/wheel.sh as `make dist` builds
it (here without build isolation, on the test extra's setuptools, so no package index is
needed), it requires the run-time dependencies only, carries every module of src/configmirror
and gives both commands; installed alone into a fresh venv, both run.

The kubectl plugin for krew (hack/release/krew.py, which `make release` runs): its archive and
manifest made from a wheelhouse of configmirror's wheel and its run-time dependencies (the
ones installed here, packed back into wheels, so no index is needed either), then installed
the way krew installs a plugin (its sha256 checked, the `files` moved, `bin` linked into a bin
folder), and run from PATH on this machine's own python3 with nothing but the archive.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from configmirror import __version__
from configmirror_testing.packaging import (
    PYPROJECT,
    base_python,
    forbidden,
    host_platform,
    krew_install,
    normalized,
)

REPO = Path(__file__).resolve().parents[2]
COMMANDS = {"configmirror", "kubectl-configmirror"}
ENTRY_POINT = "configmirror.cli.main:main"


def run(*cmd: str | Path, env: dict[str, str] | None = None, check: bool = True,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {done.returncode}:\n"
                             f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configmirror's wheel as `make dist` builds it (hack/release/wheel.sh)."""
    dest = tmp_path_factory.mktemp("dist")
    done = run(REPO / "hack" / "release" / "wheel.sh", dest, "--no-build-isolation",
               env={**os.environ, "PYTHON": sys.executable})
    built = Path(done.stdout.strip().splitlines()[-1])
    assert built.name == f"configmirror-{__version__}-py3-none-any.whl"
    assert built.parent == dest.resolve()
    return built


def dist_info(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(f"configmirror-{__version__}.dist-info/{name}").decode()


def runtime_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist a plain `pip install` of it installs (no extra asked for)."""
    meta = Parser().parsestr(dist_info(wheel, "METADATA"))
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


# -- the wheel ------------------------------------------------------------------------------------

def test_the_wheel_requires_the_projects_dependencies_and_no_test_or_lint_package(
        wheel: Path) -> None:
    names = {normalized(r.name) for r in runtime_requirements(wheel)}
    declared = {normalized(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    assert names == declared
    assert {"kubernetes", "prometheus-client", "pyyaml", "orjson"} <= names
    assert not names & forbidden(), sorted(names & forbidden())
    # The tools are there, as extras only: `pip install 'configmirror[test,lint]'`.
    meta = Parser().parsestr(dist_info(wheel, "METADATA"))
    assert {"test", "lint"} <= set(meta.get_all("Provides-Extra") or [])
    assert meta["Requires-Python"] == ">=3.11"


def test_the_wheel_gives_both_commands_one_entry_point(wheel: Path) -> None:
    entry_points = configparser.ConfigParser()
    entry_points.read_string(dist_info(wheel, "entry_points.txt"))
    scripts = dict(entry_points["console_scripts"])
    assert scripts == dict.fromkeys(COMMANDS, ENTRY_POINT)
    assert dict(PYPROJECT["project"]["scripts"]) == scripts


def test_the_wheel_holds_every_module_of_src_and_nothing_else(wheel: Path) -> None:
    src = REPO / "src"
    shipped = sorted(p.relative_to(src).as_posix() for p in (src / "configmirror").rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts)
    assert shipped, "src/configmirror is empty?"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    meta = f"configmirror-{__version__}.dist-info/"
    assert sorted(n for n in names if not n.startswith(meta)) == shipped
    assert f"{meta}licenses/LICENSE" in names
    assert not [n for n in names if n.endswith(".pyc") or "/tests/" in n or "testing" in n]


def test_the_wheel_alone_in_a_fresh_venv_gives_both_commands(
        wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-index",
        "--no-deps", "--disable-pip-version-check", wheel)
    # The dependencies from this venv's site-packages, after the fresh venv's own: the .pth
    # adds the folder only (its own .pth files, the editable install's, are not read).
    purelib = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
                   .stdout.strip())
    (purelib / "zz-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    where = run(python, "-c", "import configmirror; print(configmirror.__file__)", env=env)
    assert Path(where.stdout.strip()).is_relative_to(purelib), where.stdout
    for command in COMMANDS:
        assert (venv / "bin" / command).is_file(), command
    helped = run("kubectl-configmirror", "--help", env=env).stdout
    assert helped.startswith("usage: kubectl configmirror"), helped[:200]
    assert run("configmirror", "--help", env=env).stdout.startswith("usage: configmirror")
    assert run("configmirror", "version", env=env).stdout.strip().endswith(__version__)
    assert run("kubectl-configmirror", "version", env=env).stdout.strip().endswith(__version__)


# -- the kubectl plugin (krew) --------------------------------------------------------------------

def repack(dist: metadata.Distribution, dest: Path) -> Path:
    """An installed distribution packed back into the wheel it was installed from (its files
    under site-packages and its .dist-info; its tag from its WHEEL file)."""
    [tag] = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
             if line.startswith("Tag:")][:1]
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    out = dest / f"{name}-{dist.version}-{tag}.whl"
    root = Path(str(dist.locate_file("")))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for file in dist.files or []:
            path = PurePosixPath(str(file))
            if ".." in path.parts or "__pycache__" in path.parts:
                continue
            zf.write(root / str(file), str(path))
    return out


def runtime_distributions(wheel: Path) -> Iterator[metadata.Distribution]:
    """The distributions installed here that `pip install` of the wheel would install."""
    seen: set[str] = set()
    queue = [(r, {""}) for r in runtime_requirements(wheel)]
    while queue:
        req, extras = queue.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        name = normalized(req.name)
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(req.name)
        yield dist
        queue += [(Requirement(r), {"", *req.extras}) for r in dist.requires or []]


@pytest.fixture(scope="module")
def plugin(wheel: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[dict[str, Any], Path, Path]:
    """(manifest, archive, krew root): krew.py's archive of a wheelhouse for this CPython
    (configmirror's wheel, its dependencies packed back from this venv), its manifest, and the
    plugin installed from them as krew does."""
    folder = tmp_path_factory.mktemp("krew")
    house = folder / "wheelhouse" / f"cp{sys.version_info[0]}{sys.version_info[1]}"
    house.mkdir(parents=True)
    shutil.copy(wheel, house)
    for dist in runtime_distributions(wheel):
        repack(dist, house)
    os_name, arch = host_platform()
    archive = folder / "dist" / f"kubectl-configmirror-{__version__}-{os_name}-{arch}.tar.gz"
    krew = REPO / "hack" / "release" / "krew.py"
    run(sys.executable, krew, "archive", house.parent, REPO / "LICENSE", archive)
    manifest_file = folder / "dist" / "configmirror.yaml"
    run(sys.executable, krew, "manifest", "--version", __version__,
        "--homepage", "https://example.invalid/configmirror",
        "--uri-base", "https://example.invalid/download/", manifest_file,
        f"{os_name}/{arch}={archive}")
    manifest = yaml.safe_load(manifest_file.read_text())
    return manifest, archive, krew_install(manifest, archive, folder / "root")


def test_the_manifest_is_a_krew_plugin_named_configmirror_at_this_version(
        plugin: tuple[dict[str, Any], Path, Path]) -> None:
    manifest, archive, _ = plugin
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"] == {"name": "configmirror"}
    spec = manifest["spec"]
    assert spec["version"] == f"v{__version__}"
    assert spec["homepage"] == "https://example.invalid/configmirror"
    assert spec["shortDescription"] and spec["description"]
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in spec["caveats"]
    [only] = spec["platforms"]
    assert only["uri"] == f"https://example.invalid/download/{archive.name}"
    assert re.fullmatch(r"[0-9a-f]{64}", only["sha256"])
    assert only["bin"] == "kubectl-configmirror"
    assert only["files"] == [{"from": "kubectl-configmirror", "to": "."},
                             {"from": "LICENSE", "to": "."}, {"from": "lib", "to": "lib"}]


def test_the_archive_holds_the_launcher_license_and_runtime_code_only(
        plugin: tuple[dict[str, Any], Path, Path]) -> None:
    _, archive, _ = plugin
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["kubectl-configmirror"].mode & 0o111
    assert "LICENSE" in members
    tops = {PurePosixPath(n).parts[2] for n in members if n.count("/") >= 2}
    packages = {normalized(t.split("-")[0]) for t in tops if t.endswith(".dist-info")}
    assert {"configmirror", "kubernetes", "orjson", "pyyaml", "prometheus-client"} <= packages
    assert not packages & forbidden(), sorted(packages & forbidden())
    # Left out as the image leaves it out: the client's asyncio half and the aiohttp stack.
    assert not {"aiohttp", "multidict", "yarl", "frozenlist", "propcache"} & tops
    assert not [n for n in members if "/kubernetes/aio/" in n]


def test_kubectl_configmirror_from_the_krew_bin_folder_runs_on_this_machines_python3(
        plugin: tuple[dict[str, Any], Path, Path], tmp_path: Path) -> None:
    _, _, bin_dir = plugin
    interpreter = tmp_path / "python"
    interpreter.mkdir()
    (interpreter / "python3").symlink_to(base_python())
    env = {"PATH": f"{bin_dir}:{interpreter}", "HOME": str(tmp_path)}
    helped = run("kubectl-configmirror", "--help", env=env)
    assert helped.stdout.startswith("usage: kubectl configmirror"), helped.stdout[:200]
    assert run("kubectl-configmirror", "version", env=env).stdout.strip() \
        == f"configmirror {__version__}"
    # Nothing but the archive: no site-packages at all (-S), no environment (-I).
    alone = run(base_python(), "-I", "-S", bin_dir / "kubectl-configmirror", "status", "--help",
                env=env)
    assert alone.stdout.startswith("usage: kubectl configmirror status"), alone.stdout[:200]


def test_the_launcher_names_the_pythons_it_was_built_for_on_any_other(
        plugin: tuple[dict[str, Any], Path, Path], tmp_path: Path) -> None:
    _, _, bin_dir = plugin
    other = tmp_path / "plugin"
    (other / "lib" / "cp39").mkdir(parents=True)
    shutil.copy((bin_dir / "kubectl-configmirror").resolve(), other)
    done = run(base_python(), other / "kubectl-configmirror", "version", check=False)
    assert done.returncode == 1
    current = ".".join(map(str, sys.version_info[:3]))
    assert "needs python3 on PATH to be CPython 3.9; it is cpython " + current in done.stderr
