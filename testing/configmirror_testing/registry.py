"""A container registry on 127.0.0.1 for the release's tests, and a reader of what it holds.

`Registry` runs Debian's `docker-registry` (the CNCF distribution registry, what most
registries are built on) on a free loopback port over plain HTTP, its storage in a folder of
the caller's; start() waits until it answers, stop() stops it. The reader speaks the OCI
distribution API itself (a GET or PUT of a manifest, a GET of a blob), so what a test reads back
does not depend on the tools that wrote it.

    with Registry(tmp / "registry") as registry:
        index = registry.manifest("test/configmirror", "0.1.0")
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from configmirror_testing.controlplane import free_port, spawn, stop_process
from configmirror_testing.wait import WaitTimeout, wait_for

TIMEOUT = 30.0
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
# What a manifest GET accepts: any index or image manifest, OCI or Docker's.
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST,
                    "application/vnd.docker.distribution.manifest.list.v2+json",
                    "application/vnd.docker.distribution.manifest.v2+json"))


class RegistryError(RuntimeError):
    """The registry did not start, or answered a request with an error; the message says which."""


def registry_missing() -> str | None:
    """Why a registry cannot run here, or None when it can."""
    if shutil.which("docker-registry") is None:
        return "no docker-registry on PATH (apt-get install docker-registry)"
    return None


@dataclass(frozen=True)
class Manifest:
    """A manifest as the registry serves it: its bytes, media type and digest."""

    body: bytes
    media_type: str
    digest: str

    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


class Registry:
    """docker-registry serving `folder`/storage on <free port>, over plain HTTP, named
    127.0.0.1:<port> (what the release pushes and references). It listens on every address of
    this machine, so a kind cluster's nodes reach it at their network's gateway; this
    machine's test runs have no other network, and it lives only as long as the test."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Registry:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """HOST:PORT, as image references name it."""
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.folder / "registry.log"

    def start(self) -> None:
        reason = registry_missing()
        if reason:
            raise RegistryError(reason)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port("0.0.0.0")
        config = self.folder / "config.yml"
        # JSON is YAML: the registry's configuration, everything in our folder.
        config.write_text(json.dumps({
            "version": 0.1, "log": {"level": "info", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.folder / "storage")},
                        "delete": {"enabled": True}},
            "http": {"addr": f"0.0.0.0:{self.port}"}}))
        self._proc = spawn(["docker-registry", "serve", str(config)], self.log)
        try:
            wait_for(self._answers, TIMEOUT, f"the registry on {self.address}", interval=0.1,
                     abort=self._died)
        except WaitTimeout as err:
            self.stop()
            raise RegistryError(str(err)) from None

    def stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None

    # -- the distribution API ---------------------------------------------------------------------

    def manifest(self, name: str, reference: str, accept: str = ACCEPT) -> Manifest:
        """GET /v2/<name>/manifests/<reference> (a tag or a digest)."""
        with self._request("GET", f"/v2/{name}/manifests/{reference}",
                           headers={"Accept": accept}) as resp:
            body = resp.read()
            return Manifest(body, resp.headers["Content-Type"],
                            resp.headers.get("Docker-Content-Digest")
                            or "sha256:" + hashlib.sha256(body).hexdigest())

    def has_manifest(self, name: str, reference: str) -> bool:
        """Whether HEAD /v2/<name>/manifests/<reference> finds it."""
        try:
            with self._request("HEAD", f"/v2/{name}/manifests/{reference}",
                               headers={"Accept": ACCEPT}):
                return True
        except RegistryError as err:
            if " 404 " in str(err):
                return False
            raise

    def put_manifest(self, name: str, reference: str, manifest: Manifest) -> str:
        """PUT a manifest under `reference` (a tag); returns the digest the registry gives it."""
        with self._request("PUT", f"/v2/{name}/manifests/{reference}", body=manifest.body,
                           headers={"Content-Type": manifest.media_type}) as resp:
            return str(resp.headers["Docker-Content-Digest"])

    def blob(self, name: str, digest: str) -> bytes:
        with self._request("GET", f"/v2/{name}/blobs/{digest}") as resp:
            return bytes(resp.read())

    def tags_or_none(self, name: str) -> list[str] | None:
        """The tags of repository `name`, or None when the registry has no such repository."""
        try:
            with self._request("GET", f"/v2/{name}/tags/list") as resp:
                return list(json.loads(resp.read()).get("tags") or [])
        except RegistryError as err:
            if " 404 " in str(err):
                return None
            raise

    # -- internals --------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: bytes | None = None,
                 headers: dict[str, str] | None = None) -> Any:
        request = urllib.request.Request(f"http://{self.address}{path}", data=body,
                                         headers=headers or {}, method=method)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT)
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:500]
            raise RegistryError(f"{method} {path}: {err.code} {detail}") from None

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as resp:
                return int(resp.status) == 200
        except OSError:
            return False

    def _died(self) -> str | None:
        if self._proc is not None and self._proc.poll() is not None:
            return (f"docker-registry exited with {self._proc.returncode}: "
                    f"{self.log.read_text(errors='replace')[-2000:]}")
        return None
