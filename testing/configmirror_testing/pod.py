"""A Deployment's pod run by Docker the way a kubelet runs it, to test the image for real.

There is no kubelet here, so `Pod` does its part for one container of a rendered Deployment:
the args and env (fieldRefs resolved), the security context (user and group, read-only root,
capabilities, no-new-privileges, seccomp), the resource limits, and a ServiceAccount volume
laid out as the kubelet lays it out (`token`, `ca.crt` and `namespace` behind a `..data` link
that a rotation swaps at once), with KUBERNETES_SERVICE_HOST/PORT naming the apiserver. A field
it cannot translate is an error (`PodSpecError`), so a change to the manifest cannot go
untested unnoticed.

    template = PodTemplate.from_manifests(docs, "configmirror")
    pod = Pod(template, image, "configmirror-0", network, volume, apiserver=(host, port))
    pod.wait_ready(); pod.metric("configmirror_leader"); pod.stop(); pod.remove()
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from configmirror_testing.scrape import Scrape
from configmirror_testing.wait import wait_for

DOCKER_TIMEOUT = 120.0
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# Every container and network made here carries this label, so a leftover is easy to find.
LABEL = "io.configmirror.test=true"


class DockerError(RuntimeError):
    """A docker command failed; the message holds what it printed."""


class PodSpecError(ValueError):
    """The pod template asks for something this stand-in kubelet does not translate."""


def docker(*args: str, timeout: float = DOCKER_TIMEOUT,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the docker CLI; raises DockerError on failure when `check`."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
    if check and done.returncode != 0:
        raise DockerError(f"docker {' '.join(args)}: {done.stderr.strip()}")
    return done


def docker_missing() -> str | None:
    """Why Docker cannot run containers here, or None when it can."""
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    try:
        done = docker("info", "--format", "{{.ServerVersion}}", timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 30 s"
    if done.returncode != 0 or not done.stdout.strip():
        return f"no Docker daemon answers ({done.stderr.strip() or 'docker info failed'})"
    return None


def build_image(repo: Path, tag: str, log: Path, timeout: float = 1800) -> None:
    """Build the image as `make image` does (hack/image.sh), its output going to `log`."""
    env = {**os.environ, "PYTHON": sys.executable}  # this venv's pip builds the wheels
    with open(log, "w") as out:
        done = subprocess.run([str(repo / "hack" / "image.sh"), tag], cwd=repo, env=env,
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=timeout, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise DockerError(f"hack/image.sh {tag} exited with {done.returncode}:\n{tail}")


def remove_image(tag: str) -> None:
    docker("rmi", "--force", tag, check=False)


class Network:
    """A Docker network of its own with no route out of this machine (`--internal`).

    Its gateway is this host's address on it: what listens there (the test apiserver) is
    what the containers can reach, and they can reach nothing else.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        docker("network", "create", "--internal", "--label", LABEL, name)
        try:
            config = json.loads(docker("network", "inspect", name).stdout)[0]["IPAM"]["Config"]
            self.gateway: str = config[0]["Gateway"]
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        docker("network", "rm", self.name, check=False)


class ServiceAccountVolume:
    """The kubelet's ServiceAccount volume in a host folder: `token`, `ca.crt`, `namespace`.

    As in the kubelet's AtomicWriter, each file is a link into `..data`, a link to a
    timestamped folder; a new token is a new folder and one rename of `..data`, so a reader
    sees the old files or the new ones, never a mix. Mount the folder, not the files.
    """

    FILES = ("token", "ca.crt", "namespace")

    def __init__(self, folder: Path, token: str, ca: bytes, namespace: str) -> None:
        self.path = folder
        self._ca = ca
        self._namespace = namespace.encode()
        folder.mkdir(parents=True)
        folder.chmod(0o755)  # the container's non-root user must read it
        self.write_token(token)
        for name in self.FILES:
            (folder / name).symlink_to(f"..data/{name}")

    def write_token(self, token: str) -> None:
        """Swap in a new token (what the kubelet does when it refreshes one)."""
        stamp = self.path / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{secrets.token_hex(4)}"
        stamp.mkdir()
        stamp.chmod(0o755)
        for name, content in zip(self.FILES, (token.encode(), self._ca, self._namespace),
                                 strict=True):
            (stamp / name).write_bytes(content)
            (stamp / name).chmod(0o644)
        data = self.path / "..data"
        old = data.resolve() if data.is_symlink() else None
        staged = self.path / "..data_tmp"
        staged.symlink_to(stamp.name)
        staged.rename(data)  # rename(2) over the old link: atomic
        if old is not None:
            shutil.rmtree(old)


# Pod-level fields that only place the pod (or are handled below): nothing to translate.
_POD_FIELDS = {"containers", "serviceAccountName", "serviceAccount",
               "automountServiceAccountToken", "terminationGracePeriodSeconds",
               "securityContext", "affinity", "tolerations", "nodeSelector",
               "topologySpreadConstraints", "priorityClassName", "restartPolicy", "dnsPolicy"}
_CONTAINER_FIELDS = {"name", "image", "imagePullPolicy", "command", "args", "env", "ports",
                     "livenessProbe", "readinessProbe", "startupProbe", "resources",
                     "securityContext", "terminationMessagePolicy", "terminationMessagePath"}
_SECURITY_FIELDS = {"runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile",
                    "allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities",
                    "privileged"}
_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL_SUFFIXES = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def memory_bytes(quantity: str | int) -> int:
    """A Kubernetes memory quantity (`256Mi`, `1G`, `1048576`) in bytes."""
    text = str(quantity)
    for suffix, factor in {**_BINARY_SUFFIXES, **_DECIMAL_SUFFIXES}.items():
        if text.endswith(suffix):
            return int(float(text[:-len(suffix)]) * factor)
    return int(float(text))


def milli_cpu(quantity: str | int | float) -> int:
    """A Kubernetes CPU quantity (`50m`, `0.5`, `2`) in thousandths of a CPU."""
    text = str(quantity)
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


@dataclass(frozen=True)
class PodTemplate:
    """One container of a Deployment's pod template, and how Docker runs it."""

    deployment: str
    namespace: str
    spec: dict[str, Any]
    container: dict[str, Any]

    @classmethod
    def from_manifests(cls, docs: Iterable[dict[str, Any]], deployment: str,
                       container: str | None = None) -> PodTemplate:
        """The Deployment `deployment` among rendered manifests (`kubectl kustomize`)."""
        for doc in docs:
            if doc and doc.get("kind") == "Deployment" and doc["metadata"]["name"] == deployment:
                spec = doc["spec"]["template"]["spec"]
                chosen = [c for c in spec["containers"] if container in (None, c["name"])]
                if not chosen:
                    raise PodSpecError(f"Deployment {deployment} has no container {container}")
                return cls(deployment, doc["metadata"].get("namespace", "default"), spec,
                           chosen[0])
        raise PodSpecError(f"no Deployment {deployment} in the manifests")

    @property
    def service_account(self) -> str:
        return str(self.spec.get("serviceAccountName") or "default")

    @property
    def grace_period(self) -> float:
        return float(self.spec.get("terminationGracePeriodSeconds", 30))

    @property
    def security_context(self) -> dict[str, Any]:
        """The container's effective security context: the pod's, overridden by its own."""
        pod = {k: v for k, v in (self.spec.get("securityContext") or {}).items()
               if k in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile")}
        return {**pod, **(self.container.get("securityContext") or {})}

    def port(self, name: str | int) -> int:
        """A container port, by its name in the manifest or its number."""
        for port in self.container.get("ports", []):
            if name in (port.get("name"), port["containerPort"]):
                return int(port["containerPort"])
        raise PodSpecError(f"container {self.container['name']} has no port {name!r}")

    def probe(self, kind: str) -> tuple[str, int]:
        """(path, port) of an HTTP probe: `livenessProbe`, `readinessProbe`."""
        get = (self.container.get(kind) or {}).get("httpGet")
        if get is None:
            raise PodSpecError(f"container {self.container['name']} has no HTTP {kind}")
        return str(get.get("path", "/")), self.port(get["port"])

    def docker_run_args(self, pod_name: str, image: str, image_user: str,
                        env: Mapping[str, str], mounts: Mapping[Path, str],
                        writable_root: bool = False) -> list[str]:
        """`docker run` arguments after `run --detach`: flags, the image, then its args.

        `env` is what the kubelet adds (KUBERNETES_SERVICE_*); `mounts` maps host folders to
        read-only container paths; `image_user` is the image's USER, for runAsNonRoot;
        `writable_root` drops only the read-only root, to see what the process would write.
        """
        self._check_fields()
        flags = ["--name", pod_name, "--hostname", pod_name]
        flags += self._security_flags(image_user, writable_root)
        flags += self._resource_flags()
        for host, path in mounts.items():
            flags += ["--volume", f"{host}:{path}:ro"]
        for name, value in [*self._env(pod_name), *env.items()]:
            flags += ["--env", f"{name}={value}"]
        command = self.container.get("command")
        if command:  # like the kubelet: command replaces ENTRYPOINT, and CMD with it
            flags += ["--entrypoint", command[0]]
        flags.append(image)
        if command:
            flags += command[1:]
        flags += [str(a) for a in self.container.get("args", [])]
        return flags

    # -- translation ----------------------------------------------------------------------------

    def _check_fields(self) -> None:
        unknown = [f"spec.{k}" for k in self.spec if k not in _POD_FIELDS]
        unknown += [f"containers[{self.container['name']}].{k}" for k in self.container
                    if k not in _CONTAINER_FIELDS]
        unknown += [f"securityContext.{k}" for k in self.security_context
                    if k not in _SECURITY_FIELDS]
        if unknown:
            raise PodSpecError(f"not translated to Docker: {', '.join(sorted(unknown))}")
        if self.spec.get("automountServiceAccountToken") is False:
            raise PodSpecError("the pod mounts no ServiceAccount token: no in-cluster config")

    def _security_flags(self, image_user: str, writable_root: bool) -> list[str]:
        sc = self.security_context
        flags: list[str] = []
        user = sc.get("runAsUser")
        if user is not None:
            flags += ["--user", f"{user}:{sc['runAsGroup']}" if "runAsGroup" in sc else str(user)]
        if sc.get("runAsNonRoot"):
            # The kubelet's check: the uid must be known to be non-zero, else it refuses.
            uid = str(user) if user is not None else image_user.partition(":")[0]
            if not uid.isdigit() or int(uid) == 0:
                raise PodSpecError(f"runAsNonRoot, but the container would run as {uid!r}")
        if sc.get("privileged"):
            raise PodSpecError("privileged containers are not translated")
        if sc.get("readOnlyRootFilesystem") and not writable_root:
            flags.append("--read-only")
        if sc.get("allowPrivilegeEscalation") is False:
            flags += ["--security-opt", "no-new-privileges"]
        caps = sc.get("capabilities") or {}
        for cap in caps.get("drop", []):
            flags += ["--cap-drop", cap]
        for cap in caps.get("add", []):
            flags += ["--cap-add", cap]
        seccomp = (sc.get("seccompProfile") or {}).get("type", "RuntimeDefault")
        if seccomp == "Unconfined":
            flags += ["--security-opt", "seccomp=unconfined"]
        elif seccomp != "RuntimeDefault":  # RuntimeDefault is Docker's own default profile
            raise PodSpecError(f"seccompProfile {seccomp} is not translated")
        return flags

    def _resource_flags(self) -> list[str]:
        resources = self.container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        flags: list[str] = []
        for name, value in limits.items():
            if name == "memory":
                flags += ["--memory", str(memory_bytes(value))]
            elif name == "cpu":
                flags += ["--cpus", str(milli_cpu(value) / 1000)]
            else:
                raise PodSpecError(f"resource limit {name} is not translated")
        for name, value in requests.items():
            if name == "cpu":  # the kubelet's cpu.shares: 1024 per CPU, at least 2
                flags += ["--cpu-shares", str(max(2, milli_cpu(value) * 1024 // 1000))]
            elif name != "memory":  # a memory request only steers scheduling
                raise PodSpecError(f"resource request {name} is not translated")
        return flags

    def _env(self, pod_name: str) -> list[tuple[str, str]]:
        fields = {"metadata.name": pod_name, "metadata.namespace": self.namespace,
                  "spec.serviceAccountName": self.service_account}
        env = []
        for var in self.container.get("env", []):
            if "value" in var:
                env.append((var["name"], str(var["value"])))
                continue
            path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path not in fields:
                raise PodSpecError(f"env {var['name']}: only values and the fieldRefs "
                                   f"{sorted(fields)} are translated")
            env.append((var["name"], fields[path]))
        return env


class Pod:
    """One container of `template`, running in Docker on `network`; remove() removes it."""

    def __init__(self, template: PodTemplate, image: str, name: str, network: Network,
                 volume: ServiceAccountVolume, apiserver: tuple[str, int],
                 writable_root: bool = False) -> None:
        self.template = template
        self.name = name
        self.volume = volume
        image_user = str(json.loads(docker("image", "inspect", image).stdout)[0]
                         ["Config"].get("User") or "")
        host, port = apiserver
        args = template.docker_run_args(
            name, image, image_user,
            env={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port)},
            mounts={volume.path: SERVICE_ACCOUNT_MOUNT}, writable_root=writable_root)
        self.started = time.monotonic()
        docker("run", "--detach", "--label", LABEL, "--network", network.name, *args)
        self.ip: str = self.inspect()["NetworkSettings"]["Networks"][network.name]["IPAddress"]

    def inspect(self) -> dict[str, Any]:
        return json.loads(docker("container", "inspect", self.name).stdout)[0]  # type: ignore[no-any-return]

    def running(self) -> bool:
        return bool(self.inspect()["State"]["Running"])

    # -- what the kubelet and Prometheus would see --------------------------------------------

    def get(self, port: str | int, path: str, timeout: float = 5.0) -> str | None:
        """The body of GET http://<pod ip>:<port><path>, or None when nothing answers (200)."""
        url = f"http://{self.ip}:{self.template.port(port)}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return str(resp.read().decode())
        except OSError:
            return None

    def probe(self, kind: str) -> str | None:
        """What the kubelet's HTTP `kind` probe (`readinessProbe`, ...) gets, or None."""
        path, port = self.template.probe(kind)
        return self.get(port, path)

    def scrape(self, port: str | int = "metrics") -> Scrape:
        return Scrape.parse(self.get(port, "/metrics") or "")

    def metric(self, name: str, **labels: str) -> float:
        return self.scrape().value(name, **labels)

    def writes(self) -> float:
        return self.metric("configmirror_replica_writes_total")

    def wait_ready(self, timeout: float = 60) -> float:
        """Wait until the readiness probe answers ok; returns seconds since `docker run`."""
        wait_for(lambda: self.probe("readinessProbe") == "ok", timeout,
                 f"pod {self.name} to become ready", interval=0.05, abort=self._exited)
        return time.monotonic() - self.started

    def logs(self) -> str:
        done = docker("logs", self.name, check=False)
        return done.stdout + done.stderr

    def status(self) -> dict[str, str]:
        """The container's main process's /proc/<pid>/status, read from the host."""
        pid = self.inspect()["State"]["Pid"]
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        return dict(line.split(":\t", 1) for line in lines if ":\t" in line)

    def rss_bytes(self) -> int:
        return int(self.status()["VmRSS"].split()[0]) * 1024

    def written(self) -> list[str]:
        """What the container wrote to its filesystem (`docker diff`: "A /path", "C /path"),
        less what Docker itself made: the volume's mount point and its parents."""
        made = set()
        for mount in self.inspect()["Mounts"]:
            # In Debian's images /var/run is a link to /run, where the mount point really is.
            path = PurePosixPath(re.sub(r"^/var/run/", "/run/", mount["Destination"]))
            made |= {str(p) for p in (path, *path.parents)}
        return [line for line in docker("diff", self.name).stdout.splitlines()
                if line.split(" ", 1)[1] not in made]

    # -- lifecycle --------------------------------------------------------------------------------

    def stop(self) -> tuple[int, float]:
        """`docker stop` with the pod's grace period: SIGTERM, then SIGKILL once it is over.

        Returns the exit code and the seconds it took.
        """
        grace = self.template.grace_period
        start = time.monotonic()
        docker("stop", "--time", str(int(grace)), self.name, timeout=grace + DOCKER_TIMEOUT)
        took = time.monotonic() - start
        return int(self.inspect()["State"]["ExitCode"]), took

    def remove(self) -> None:
        docker("rm", "--force", "--volumes", self.name, check=False)

    def _exited(self) -> str | None:
        state = self.inspect()["State"]
        if state["Running"]:
            return None
        return (f"pod {self.name} exited with {state['ExitCode']} (OOMKilled: "
                f"{state['OOMKilled']}); its log:\n{self.logs()[-3000:]}")
