"""helm for the chart tests, built once from its Go module by `hack/tools/build.sh helm`.

No package ships helm 4 for CI's machine, so it is built like the control plane and found the
same way (configmirror_testing.tools: CONFIGMIRROR_HELM_DIR, else the build script's cache).
helm keeps a cache, repositories and plugins under the user's home; `Helm` points all of them
(and kubectl's discovery cache) at a folder its caller owns, so a run leaves nothing behind.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Protocol

TIMEOUT = 120.0


class Admin(Protocol):
    """What runs kubectl as a cluster's admin: a ControlPlane, or a KindCluster."""

    def kubectl(self, *args: str, check: bool = True,
                input: str | None = None) -> subprocess.CompletedProcess[str]: ...


class HelmError(RuntimeError):
    """A helm command failed; the message holds the command and helm's own words."""


class Helm:
    """Runs one helm binary with its homes (and HOME) in `home`."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "HOME": str(home),
                    "HELM_CACHE_HOME": str(home / "cache"),
                    "HELM_CONFIG_HOME": str(home / "config"),
                    "HELM_DATA_HOME": str(home / "data")}
        self.env.pop("KUBECONFIG", None)  # only an explicit kubeconfig= reaches a cluster

    def __call__(self, *args: str, kubeconfig: Path | None = None, check: bool = True,
                 input: str | None = None,
                 timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        """`helm args...`; raises HelmError on a non-zero exit when `check`."""
        cmd = [str(self.binary), *args]
        if kubeconfig is not None:
            cmd += ["--kubeconfig", str(kubeconfig)]
        done = subprocess.run(cmd, capture_output=True, text=True, input=input, env=self.env,
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise HelmError(f"helm {' '.join(args)} failed ({done.returncode}): "
                            f"{done.stderr.strip()}")
        return done

    def version(self) -> str:
        return self("version", "--short").stdout.strip()


def release_objects(admin: Admin, release: str) -> set[str]:
    """Every object labelled with Helm release `release`, cluster-scoped or not."""
    done = admin.kubectl(
        "get", "--all-namespaces", "-o", "name",
        "-l", f"app.kubernetes.io/instance={release}",
        "clusterroles,clusterrolebindings,serviceaccounts,roles,rolebindings,"
        "deployments,poddisruptionbudgets,services")
    return set(done.stdout.split())


def cluster_scoped_objects(admin: Admin) -> set[str]:
    """The name of every object of every listable cluster-scoped kind (what an uninstall
    must leave as it found it)."""
    kinds = admin.kubectl("api-resources", "--namespaced=false", "--verbs=list",
                          "-o", "name").stdout.split()
    return set(admin.kubectl("get", ",".join(kinds), "-o", "name").stdout.split())
