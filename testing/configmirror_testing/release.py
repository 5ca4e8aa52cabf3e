"""`make release` run by the tests, and what they read of the result.

`publish()` runs `make release` into a registry (configmirror_testing.registry) with its dist/
in a folder of the caller's; `Release` is what came out: the image, the chart, dist/ and the
public key. The tests verify with the cosign `make release` itself uses (hack/tools/build.sh,
found by configmirror_testing.tools).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from configmirror_testing.registry import Registry

REPO = Path(__file__).resolve().parents[2]
RELEASE_TIMEOUT = 3600.0  # a cold machine builds cosign, syft, the arm64 base under emulation
# Whatever make passed its children (a jobserver, -j) stays with the make that runs the suite.
MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


class ReleaseError(RuntimeError):
    """`make release` failed; the message holds the end of its output."""


def release_missing() -> str | None:
    """Why `make release` cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return ("make release needs root here: buildah's storage, and binfmt_misc for the "
                "arm64 image's emulation")
    absent = [f"{p} ({pkg})" for p, pkg in (("buildah", "buildah"), ("go", "golang"),
                                           ("docker-registry", "docker-registry"))
              if shutil.which(p) is None]
    if not Path("/usr/lib/binfmt.d/qemu-aarch64.conf").is_file():
        absent.append("/usr/lib/binfmt.d/qemu-aarch64.conf (qemu-user-static)")
    if absent:
        return "missing: " + ", ".join(absent) + " (apt-get install them; .ci/run does)"
    return None


def make_release(args: Sequence[str], env: dict[str, str], log: Path,
                 timeout: float = RELEASE_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """`make release ARGS...` in the repository with `env` added, its output in `log`."""
    full = {k: v for k, v in os.environ.items() if k not in MAKE_VARIABLES}
    for var in ("COSIGN_KEY", "COSIGN_PASSWORD", "COSIGN_KEYLESS", "UNSIGNED", "PLATFORMS",
                "BASE_IMAGE", "PLAIN_HTTP"):
        full.pop(var, None)  # only what the test passes
    done = subprocess.run(["make", "--no-print-directory", "release", *args], cwd=REPO,
                          env={**full, **env}, capture_output=True, text=True,
                          timeout=timeout, check=False)
    log.write_text(done.stdout + done.stderr)
    return done


@dataclass(frozen=True)
class Release:
    """One `make release` into `registry` under `path`, and its dist/."""

    registry: Registry
    path: str
    version: str
    dist: Path
    public_key: Path | None
    output: str

    @property
    def prefix(self) -> str:
        """REGISTRY as `make release` was given it."""
        return f"{self.registry.address}/{self.path}"

    @property
    def repository(self) -> str:
        """The image's repository name in the registry's API."""
        return f"{self.path}/configmirror"

    @property
    def image(self) -> str:
        return f"{self.prefix}/configmirror"

    @property
    def chart(self) -> str:
        return f"oci://{self.prefix}/charts/configmirror"

    @property
    def install_yaml(self) -> Path:
        return self.dist / "install.yaml"

    def digest(self) -> str:
        """The index's digest, as the registry resolves the tag now."""
        return self.registry.manifest(self.repository, self.version).digest

    def manifests(self) -> Iterator[tuple[str, str]]:
        """(platform, digest) of each image in the index."""
        index = self.registry.manifest(self.repository, self.version).json()
        for entry in index["manifests"]:
            platform = entry.get("platform") or {}
            yield f"{platform.get('os')}/{platform.get('architecture')}", entry["digest"]

    def layer_files(self, digest: str) -> set[str]:
        """Every path in the layers of the image `digest` (each layer a gzip'd tar)."""
        manifest = self.registry.manifest(self.repository, digest).json()
        names: set[str] = set()
        for layer in manifest["layers"]:
            blob = self.registry.blob(self.repository, layer["digest"])
            data = zlib.decompress(blob, 16 + zlib.MAX_WBITS) if "gzip" in layer["mediaType"] \
                else blob
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                names |= {"/" + m.name.lstrip("./") for m in tar.getmembers()}
        return names

    def install_documents(self) -> list[dict[str, object]]:
        return [d for d in yaml.safe_load_all(self.install_yaml.read_text()) if d]


def generate_key_pair(cosign: Path, folder: Path, password: str) -> tuple[Path, Path]:
    """A cosign key pair in `folder` (cosign.key encrypted with `password`, cosign.pub)."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(cosign), "generate-key-pair"], cwd=folder, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "COSIGN_PASSWORD": password})
    if done.returncode != 0:
        raise ReleaseError(f"cosign generate-key-pair: {done.stderr.strip()}")
    return folder / "cosign.key", folder / "cosign.pub"


def publish(registry: Registry, path: str, version: str, dist: Path, log: Path,
            key: Path | None = None, password: str = "", extra: Sequence[str] = ()) -> Release:
    """`make release REGISTRY=<registry>/<path> VERSION=<version>` signed with `key` (or
    UNSIGNED=1 without one); raises ReleaseError when it fails."""
    env = {"DIST": str(dist)}
    if key is not None:
        env |= {"COSIGN_KEY": str(key), "COSIGN_PASSWORD": password}
    else:
        env["UNSIGNED"] = "1"
    done = make_release([f"REGISTRY={registry.address}/{path}", f"VERSION={version}", *extra],
                        env, log)
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise ReleaseError(f"make release exited with {done.returncode}:\n{tail}")
    public = key.with_suffix(".pub") if key is not None else None
    return Release(registry, path, version, dist, public, done.stdout + done.stderr)


def image_reference(text: str) -> str:
    """The one `image:` of rendered manifests (install.yaml, `helm template`), unquoted."""
    [found] = set(re.findall(r'^\s*image: "?([^"\s]+)"?$', text, flags=re.MULTILINE))
    return str(found)
