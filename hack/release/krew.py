#!/usr/bin/env python3
"""configmirror's CLI as a kubectl plugin that krew installs: the archive and its manifest.

`make release` (hack/release/release.sh) writes both into dist/, beside the wheel and the chart:

  krew.py wheelhouse --os linux --arch amd64 --pythons 3.11,3.12 WHEEL DEST
      WHEEL (configmirror's) and its run-time dependencies as wheels for that OS and CPU, one
      folder per CPython (DEST/cp311/, ...): `pip download`, with this Python's pip.
  krew.py archive WHEELHOUSE LICENSE OUT
      the plugin archive OUT (.tar.gz) of a wheelhouse as `wheelhouse` lays it out.
  krew.py manifest --version X.Y.Z --homepage URL --uri-base URL OUT OS/ARCH=ARCHIVE...
      the krew plugin manifest OUT (configmirror.yaml): one platform per archive, its uri
      URL/<archive's name>, its sha256.

What the archive holds, and what runs: configmirror is Python, so the plugin is a launcher and
the code it runs, no interpreter. `kubectl-configmirror` is a Python script
(`#!/usr/bin/env python3`) that puts lib/ beside it (found through krew's symlink) first on
sys.path and runs configmirror.cli.main, the same entry point as the wheel's commands. lib/ is
the wheels unpacked, nothing installed: lib/py3 the pure-Python ones (configmirror, the
kubernetes client, ...), lib/cp3XX the compiled ones (orjson, PyYAML, pydantic-core, ...) for
that CPython. So it needs python3 on PATH, CPython 3.11 or later of a version it was built for
(the manifest's caveats name them); nothing else is installed, downloaded or written but
Python's own bytecode cache under lib/. The client's asyncio half (kubernetes.aio and the
aiohttp stack) is left out, as the image leaves it out (Dockerfile): configmirror never
imports it.

Only the standard library: it runs on any python3 (the `wheelhouse` step needs its pip).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

NAME = "configmirror"
BIN = "kubectl-configmirror"
API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"
# What configmirror never imports, as the Dockerfile removes it from the image's venv.
EXCLUDED_PROJECTS = frozenset({
    "aiohttp", "aiohttp-retry", "aiohappyeyeballs", "aiosignal", "attrs", "frozenlist",
    "multidict", "propcache", "yarl", "pip", "setuptools", "wheel"})
EXCLUDED_PATHS = ("kubernetes/aio/",)
# krew's os/arch (Go's) -> pip's platform tags for `pip download`. Linux as hack/wheels.sh
# (glibc 2.28 or later); macOS 11 or later (pip also takes older macOS tags, and universal2).
PIP_PLATFORMS = {
    "linux/amd64": ["manylinux2014_x86_64", "manylinux_2_28_x86_64"],
    "linux/arm64": ["manylinux2014_aarch64", "manylinux_2_28_aarch64"],
    "darwin/amd64": ["macosx_11_0_x86_64"],
    "darwin/arm64": ["macosx_11_0_arm64"],
}
# Zip and tar times: same input, same archive bytes (hack/wheels.sh's epoch).
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
SHORT_DESCRIPTION = "Replicate ConfigMaps and Secrets across namespaces"
DESCRIPTION = """\
The command line of configmirror, the operator that keeps ConfigMaps (and named
Secrets) replicated across namespaces: `kubectl configmirror plan` shows what the
operator would change, `status` what each source's targets hold, `wait` waits for
them to be in sync, judging with the running operator's own policy.
"""

LAUNCHER = '''\
#!/usr/bin/env python3
# kubectl-configmirror {version}: configmirror's command line as a kubectl plugin (krew).
# It runs on the python3 on PATH: CPython {versions}. configmirror and its
# dependencies are the wheels unpacked in lib/ beside this file (lib/py3: pure Python;
# lib/cp3XX: compiled for that CPython); nothing is installed or downloaded.
import os
import sys

here = os.path.dirname(os.path.realpath(__file__))  # krew runs us through a symlink
tag = "cp%d%d" % sys.version_info[:2]
lib = os.path.join(here, "lib")
if sys.implementation.name != "cpython" or not os.path.isdir(os.path.join(lib, tag)):
    built = sorted((n for n in os.listdir(lib) if n[:3] == "cp3" and n[3:].isdigit()),
                   key=lambda n: int(n[3:]))
    sys.stderr.write(
        "kubectl-configmirror: needs python3 on PATH to be CPython %s; it is %s %s (%s)\\n"
        % (", ".join("%s.%s" % (n[2], n[3:]) for n in built), sys.implementation.name,
           ".".join(map(str, sys.version_info[:3])), sys.executable))
    sys.exit(1)
sys.path[:0] = [os.path.join(lib, tag), os.path.join(lib, "py3")]

from configmirror.cli.main import main

sys.exit(main())
'''


def project(wheel: str) -> str:
    """A wheel file's project name, normalized (PEP 503)."""
    return re.sub(r"[-_.]+", "-", wheel.split("-", maxsplit=1)[0]).lower()


def is_pure(wheel: str) -> bool:
    """Whether a wheel file runs on every CPython and platform (abi `none`, platform `any`)."""
    _, abi, platform = wheel[:-len(".whl")].split("-")[-3:]
    return abi == "none" and platform == "any"


# -- wheelhouse --------------------------------------------------------------------------------

def wheelhouse(wheel: Path, dest: Path, platform: str, pythons: list[str]) -> None:
    """One `pip download` per CPython, all at once: each spends most of its time resolving on
    one core, and a release runs them while the other core is often idle."""
    if platform not in PIP_PLATFORMS:
        raise SystemExit(f"krew: {platform}: not one of {', '.join(PIP_PLATFORMS)}")
    for version in pythons:
        if not re.fullmatch(r"3\.\d+", version):
            raise SystemExit(f"krew: {version}: not a CPython version 3.X")
    flags = [f"--platform={p}" for p in PIP_PLATFORMS[platform]]
    downloads = []
    for version in pythons:
        folder = dest / f"cp{version.replace('.', '')}"
        folder.mkdir(parents=True, exist_ok=True)
        downloads.append((version, subprocess.Popen([
            sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--only-binary=:all:", "--implementation", "cp", "--python-version", version,
            *flags, "--dest", str(folder), str(wheel)])))
    failed = [version for version, proc in downloads if proc.wait() != 0]
    if failed:
        raise SystemExit(f"krew: pip download for {platform} failed for CPython "
                         f"{', '.join(failed)} (pip's error is above)")


# -- archive -----------------------------------------------------------------------------------

def unpack(wheel: Path, into: Path) -> None:
    """A wheel's files as an installer puts them on sys.path: the packages and .dist-info, the
    .data folder's purelib and platlib merged in, its scripts, headers and data left out."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = PurePosixPath(info.filename)
            if info.is_dir() or path.is_absolute() or ".." in path.parts:
                continue
            if path.parts[0].endswith(".data"):
                if len(path.parts) < 3 or path.parts[1] not in ("purelib", "platlib"):
                    continue
                path = PurePosixPath(*path.parts[2:])
            if str(path).startswith(EXCLUDED_PATHS):
                continue
            target = into / path
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)


def layout(house: Path, root: Path) -> list[str]:
    """lib/ under `root` from the wheelhouse `house` (cp3XX/*.whl); the CPython tags."""
    tags = sorted(d.name for d in house.iterdir() if d.is_dir() and re.fullmatch(r"cp3\d+", d.name))
    if not tags:
        raise SystemExit(f"krew: {house} holds no cp3XX/ folder of wheels")
    wheels = {tag: sorted(p for p in (house / tag).glob("*.whl")
                          if project(p.name) not in EXCLUDED_PROJECTS) for tag in tags}
    for tag, found in wheels.items():
        if not any(project(p.name) == NAME for p in found):
            raise SystemExit(f"krew: {house / tag} holds no {NAME} wheel")
    # A pure wheel goes to lib/py3 when every CPython that has its project has that same file;
    # else (another version picked for another CPython) to each one's own folder.
    files: dict[str, set[str]] = {}
    for found in wheels.values():
        for p in found:
            if is_pure(p.name):
                files.setdefault(project(p.name), set()).add(p.name)
    shared = {name for name, names in files.items() if len(names) == 1}
    lib = root / "lib"
    done: set[str] = set()
    for tag, found in wheels.items():
        for p in found:
            if is_pure(p.name) and project(p.name) in shared:
                if p.name not in done:
                    unpack(p, lib / "py3")
                    done.add(p.name)
            else:
                unpack(p, lib / tag)
    return tags


def add(tar: tarfile.TarFile, path: Path, name: str) -> None:
    info = tar.gettarinfo(str(path), arcname=name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
    if info.isdir():
        info.mode = 0o755
        tar.addfile(info)
    elif info.isfile():
        info.mode = 0o755 if name == BIN else 0o644
        with open(path, "rb") as f:
            tar.addfile(info, f)
    else:  # krew extracts regular files and folders only
        raise SystemExit(f"krew: {path} is neither a file nor a folder")


def archive(house: Path, license_file: Path, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tags = layout(house, root)
        [wheel] = sorted((house / tags[0]).glob(f"{NAME}-*.whl"))
        version = wheel.name.split("-")[1]
        versions = ", ".join(f"{t[2]}.{t[3:]}" for t in tags)
        (root / BIN).write_text(LAUNCHER.format(version=version, versions=versions))
        shutil.copyfile(license_file, root / "LICENSE")
        buffer = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for top in (BIN, "LICENSE", "lib"):
                add(tar, root / top, top)
            for path in sorted((root / "lib").rglob("*")):
                add(tar, path, path.relative_to(root).as_posix())
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(buffer.getvalue())


def built_for(archive_file: Path) -> list[str]:
    """The CPython versions an archive holds a lib/cp3XX of ("3.11", ...)."""
    with tarfile.open(archive_file) as tar:
        tags = {m.name.split("/")[1] for m in tar.getmembers()
                if m.isdir() and re.fullmatch(r"lib/cp3\d+", m.name)}
    return [f"{t[2]}.{t[3:]}" for t in sorted(tags, key=lambda t: int(t[2:]))]


# -- manifest ----------------------------------------------------------------------------------

def quoted(text: str) -> str:
    return json.dumps(text)  # a JSON string is a YAML scalar


def block(text: str, indent: str) -> str:
    return "|\n" + "".join(f"{indent}{line}\n" if line else "\n"
                           for line in text.rstrip("\n").split("\n"))


def manifest(version: str, homepage: str, uri_base: str,
             archives: list[tuple[str, Path]]) -> str:
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise SystemExit(f"krew: version {version} is not X.Y.Z")
    pythons = sorted({v for _, a in archives for v in built_for(a)},
                     key=lambda v: int(v.split(".")[1]))
    caveats = (f"kubectl configmirror runs on the python3 on PATH, which must be CPython\n"
               f"{', '.join(pythons)} (configmirror is Python; the plugin holds its code and\n"
               "dependencies, not an interpreter). `kubectl configmirror version` checks it.\n")
    lines = [
        f"apiVersion: {API_VERSION}",
        "kind: Plugin",
        "metadata:",
        f"  name: {NAME}",
        "spec:",
        f"  version: {quoted('v' + version)}",
        f"  homepage: {quoted(homepage)}",
        f"  shortDescription: {quoted(SHORT_DESCRIPTION)}",
        "  description: " + block(DESCRIPTION, "    ").rstrip("\n"),
        "  caveats: " + block(caveats, "    ").rstrip("\n"),
        "  platforms:",
    ]
    for platform, path in archives:
        os_name, _, arch = platform.partition("/")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines += [
            "  - selector:",
            "      matchLabels:",
            f"        os: {os_name}",
            f"        arch: {arch}",
            f"    uri: {quoted(uri_base.rstrip('/') + '/' + path.name)}",
            f"    sha256: {quoted(digest)}",
            f"    bin: {BIN}",
            "    files:",
            f"    - from: {BIN}",
            "      to: .",
            "    - from: LICENSE",
            "      to: .",
            "    - from: lib",
            "      to: lib",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog="krew.py", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = top.add_subparsers(dest="step", required=True)
    w = steps.add_parser("wheelhouse")
    w.add_argument("--os", required=True)
    w.add_argument("--arch", required=True)
    w.add_argument("--pythons", required=True, help="e.g. 3.11,3.12,3.13")
    w.add_argument("wheel", type=Path)
    w.add_argument("dest", type=Path)
    a = steps.add_parser("archive")
    a.add_argument("wheelhouse", type=Path)
    a.add_argument("license", type=Path)
    a.add_argument("out", type=Path)
    m = steps.add_parser("manifest")
    m.add_argument("--version", required=True)
    m.add_argument("--homepage", required=True)
    m.add_argument("--uri-base", required=True)
    m.add_argument("out", type=Path)
    m.add_argument("archives", nargs="+", metavar="OS/ARCH=ARCHIVE")
    args = top.parse_args(argv)
    if args.step == "wheelhouse":
        wheelhouse(args.wheel, args.dest, f"{args.os}/{args.arch}", args.pythons.split(","))
    elif args.step == "archive":
        archive(args.wheelhouse, args.license, args.out)
    else:
        pairs = []
        for item in args.archives:
            platform, sep, path = item.partition("=")
            if not sep or not re.fullmatch(r"[a-z0-9]+/[a-z0-9]+", platform):
                raise SystemExit(f"krew: {item}: give OS/ARCH=ARCHIVE")
            pairs.append((platform, Path(path)))
        args.out.write_text(manifest(args.version, args.homepage, args.uri_base, pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
