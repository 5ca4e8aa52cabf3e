"""A kind cluster for the node tier (`make cluster-test`) and for any test that needs real nodes.

kind comes from `hack/tools/build.sh kind` (its Go module), the node image from
hack/kind/node-image.sh (our own Kubernetes build, no registry) unless KIND_NODE_IMAGE names
another, and the configuration from hack/kind/cluster.yaml, the file `make kind-test` uses.

    with KindCluster(kind, "configmirror-node-1a2b3c", image, kubectl, folder) as cluster:
        cluster.load_docker_image("configmirror:0.1.0")
        cluster.kubectl("apply", "-k", "deploy/")
        # A registry of the test's own on this machine, which the node pulls from over plain
        # HTTP: listen on cluster.host_address (or 0.0.0.0), then
        cluster.use_registry(f"{cluster.host_address}:5000")

kind runs its nodes as privileged containers of Docker or Podman (`provider`). Docker up to
20.10 gives a privileged container every capability the kernel knows (moby/moby#42906), which
fails where the machine's root lacks one (CI's lacks CAP_SYS_RESOURCE: "unable to apply caps:
operation not permitted"); Podman grants those of its own bounding set. choose_provider() takes
KIND_EXPERIMENTAL_PROVIDER when set, else Docker when a privileged container of the node image
starts there, else Podman; `python -m configmirror_testing.kind env IMAGE` prints the same
choice for a shell (`make kind-test`).

A cluster is a few containers named after it; stop() deletes them (keeping the nodes'
logs in `logs_to` first, when given). A process killed before its stop() leaves its cluster
running: clusters named by owned_name() carry their owner's process id, and
remove_orphans() deletes those whose owner is gone.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import resource
import secrets
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "hack" / "kind" / "cluster.yaml"
NETWORK = "kind"  # the Docker network kind puts every cluster's nodes on
CREATE_TIMEOUT = 600.0
TIMEOUT = 300.0
# Where the nodes' containerd looks for a registry's hosts.toml (cluster.yaml's config_path).
REGISTRY_HOSTS = "/etc/containerd/certs.d"


class KindError(RuntimeError):
    """A kind (or docker) command failed; the message holds the command and what it printed."""


def choose_provider(image: str | None) -> str:
    """The container engine kind should run nodes of `image` with: "docker" or "podman"."""
    given = os.environ.get("KIND_EXPERIMENTAL_PROVIDER")
    if given:
        return given
    if not image or subprocess.run(["docker", "image", "inspect", image], capture_output=True,
                                   timeout=TIMEOUT, check=False).returncode != 0:
        return "docker"  # nothing to try it with: kind's default (it pulls the image itself)
    tried = subprocess.run(["docker", "run", "--rm", "--privileged", "--network", "none",
                            "--entrypoint", "true", image], capture_output=True, text=True,
                           timeout=TIMEOUT, check=False)
    if tried.returncode == 0:
        return "docker"
    if shutil.which("podman") is None:
        raise KindError(f"Docker cannot run a privileged container here, and kind's nodes are "
                        f"ones ({tried.stderr.strip()}); install podman (apt-get install "
                        "podman), which grants only the capabilities this machine has")
    return "podman"


def node_image_ref(provider: str, image: str | None) -> str | None:
    """`image` as kind must name it for `provider`: Podman keeps an image loaded without a
    registry as `localhost/NAME`, and kind would look for a bare NAME on docker.io."""
    if provider != "podman" or not image:
        return image
    first = image.split("/", 1)[0]
    local = "/" not in image or not ("." in first or ":" in first or first == "localhost")
    return f"localhost/{image}" if local else image


def host_modules(path: Path = Path("/lib/modules")) -> None:
    """Make sure the host has `path`, which kind bind-mounts into every node (read-only: the
    kubelet and kube-proxy look for kernel modules there). Docker creates a missing source;
    Podman refuses to start the node ("statfs /lib/modules: no such file or directory"), as
    on a machine whose kernel has its modules built in: an empty folder is what it has."""
    if path.is_dir():
        return
    try:
        path.mkdir(parents=True)
    except OSError as err:
        raise KindError(f"kind mounts {path} into its nodes and Podman needs it to exist; "
                        f"this machine has none and it cannot be created ({err}): create it "
                        f"(an empty folder will do)") from None


def provider_env(provider: str, image: str | None, folder: Path) -> dict[str, str]:
    """The environment kind needs for `provider`; for Podman, also copies `image` from Docker
    into Podman's store when only Docker has it, and gives the host a /lib/modules.

    Podman gives a container RLIMIT_NOFILE and RLIMIT_NPROC of 1048576 unless told otherwise,
    which root without CAP_SYS_RESOURCE cannot raise to: a containers.conf in `folder` asks for
    this process's own hard limits instead (conmon's RLIMIT_NPROC is at most pid_max).
    """
    env = {"KIND_EXPERIMENTAL_PROVIDER": provider}
    if provider != "podman":
        return env
    host_modules()
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    if nofile == resource.RLIM_INFINITY:
        nofile = 1048576
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "containers.conf"
    conf.write_text("[containers]\n"
                    f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n')
    env["CONTAINERS_CONF"] = str(conf)
    docker_id = _image_id("docker", image)
    if image and docker_id and _image_id("podman", node_image_ref("podman", image)) != docker_id:
        # Only Docker has it, or Podman has an older build of the same name: copy it over
        # (the ID is the digest of the image's config, the same in both stores).
        with subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE) as save:
            loaded = subprocess.run(["podman", "load", "--quiet"], stdin=save.stdout,
                                    capture_output=True, text=True, timeout=1800, check=False)
        if save.returncode != 0 or loaded.returncode != 0:
            raise KindError(f"copying {image} from Docker to Podman failed: "
                            f"{loaded.stderr.strip()}")
    return env


def find_node_image(repo_root: Path | None = None, build: bool = False) -> str | None:
    """KIND_NODE_IMAGE when set, else our node image (hack/kind/node-image.sh: found in Docker
    or its cache, or built first when `build`), or None."""
    given = os.environ.get("KIND_NODE_IMAGE")
    if given:
        return given
    script = (repo_root or REPO) / "hack" / "kind" / "node-image.sh"
    env = dict(os.environ)
    if not build:
        env["CONFIGMIRROR_FIND_ONLY"] = "1"
    done = subprocess.run([str(script)], capture_output=True, text=True, env=env, check=False,
                          timeout=3600 if build else 300)
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else None


def owned_name(prefix: str) -> str:
    """A cluster name unique to this process: `prefix-<pid>-<random>`."""
    return f"{prefix}-{os.getpid()}-{secrets.token_hex(2)}"


def remove_orphans(kind: Path, prefix: str, env: dict[str, str]) -> list[str]:
    """Delete the clusters (of the provider `env` names) named by owned_name(prefix) whose
    owner process is gone; return their names."""
    names = _run([str(kind), "get", "clusters"], env=env).stdout.split()
    pattern = re.compile(rf"{re.escape(prefix)}-(\d+)-[0-9a-f]+")
    orphans = [n for n in names
               if (m := pattern.fullmatch(n)) and not _alive(int(m.group(1)))]
    for name in orphans:
        _run([str(kind), "delete", "cluster", "--name", name], env=env)
    return orphans


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class KindCluster:
    """kind cluster `name` of `image` (kind's default when None), with `config`; its
    kubeconfig and kubectl's cache live in `folder`."""

    def __init__(self, kind: Path, name: str, image: str | None, kubectl: Path, folder: Path,
                 config: Path = CONFIG, logs_to: Path | None = None,
                 provider: str | None = None) -> None:
        self.kind = kind
        self.name = name
        self.kubectl_binary = kubectl
        self.folder = folder
        self.config = config
        self.logs_to = logs_to
        self.provider = provider or choose_provider(image)
        self.env = provider_env(self.provider, image, folder)
        self.image = node_image_ref(self.provider, image)
        self.created = False

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> KindCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Create the cluster and wait until its control plane is Ready."""
        args = ["create", "cluster", "--name", self.name, "--config", str(self.config),
                "--kubeconfig", str(self.kubeconfig), "--wait", "180s"]
        if self.image:
            args += ["--image", self.image]
        self.created = True  # a failed create may leave containers: stop() removes them
        try:
            self._kind(*args, timeout=CREATE_TIMEOUT)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Keep the nodes' logs (when asked), then delete the cluster."""
        if not self.created:
            return
        try:
            if self.logs_to is not None:
                # Best effort: a node that never came up has less to say, and its absence is
                # what the error being raised already reports.
                self._kind("export", "logs", str(self.logs_to), "--name", self.name, check=False)
        finally:
            self._kind("delete", "cluster", "--name", self.name,
                       "--kubeconfig", str(self.kubeconfig))
            self.created = False

    # -- what tests use -------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (kind writes it on create)."""
        return self.folder / "kubeconfig"

    def kubectl(self, *args: str, check: bool = True,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl as admin against this cluster."""
        cmd = [str(self.kubectl_binary), "--kubeconfig", str(self.kubeconfig),
               "--cache-dir", str(self.folder / "kubectl-cache"), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=TIMEOUT,
                              check=False)
        if check and done.returncode != 0:
            raise KindError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def load_docker_image(self, tag: str) -> None:
        """Copy an image from Docker into every node (`kind load docker-image`)."""
        self._kind("load", "docker-image", tag, "--name", self.name)

    def nodes(self) -> list[str]:
        """The node containers' names."""
        return self._kind("get", "nodes", "--name", self.name).stdout.split()

    def images(self) -> list[str]:
        """The image references the nodes' containerd holds (kubelet's namespace, k8s.io)."""
        return sorted({ref for node in self.nodes() for ref in self.engine(
            "exec", node, "ctr", "--namespace=k8s.io", "images", "list", "--quiet").stdout.split()})

    def image_digests(self) -> dict[str, str]:
        """Each image reference the nodes' containerd holds, with the digest it names."""
        found: dict[str, str] = {}
        for node in self.nodes():
            listing = self.engine("exec", node, "ctr", "--namespace=k8s.io", "images", "list")
            for line in listing.stdout.splitlines()[1:]:  # REF TYPE DIGEST SIZE PLATFORMS LABELS
                ref, _, digest, *_ = line.split()
                found[ref] = digest
        return found

    @property
    def host_address(self) -> str:
        """This machine's address as the nodes reach it: the kind network's IPv4 gateway. A
        server of the test's own (a registry) listening there, or on 0.0.0.0, is reachable
        from the nodes and their pods, and from nothing off this machine."""
        network = json.loads(self.engine("network", "inspect", NETWORK).stdout)[0]
        subnets = (network.get("IPAM") or {}).get("Config") or network.get("subnets") or []
        for subnet in subnets:  # Docker: IPAM.Config[].Gateway; Podman: subnets[].gateway
            gateway = subnet.get("Gateway") or subnet.get("gateway")
            if gateway and ipaddress.ip_address(gateway).version == 4:
                return str(gateway)
        raise KindError(f"{self.provider} network {NETWORK} has no IPv4 gateway")

    def engine(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """The provider's CLI (docker or podman), as kind runs it."""
        return _run([self.provider, *args], input=input, env=self.env)

    def use_registry(self, registry: str, endpoint: str | None = None) -> None:
        """Make every node's containerd pull images named `registry/...` from `endpoint`
        (default: `registry` itself over plain HTTP, for a registry like `HOST:PORT` a test
        runs). `endpoint` may also mirror a public name: use_registry("docker.io",
        "http://HOST:PORT"). Takes effect at the next pull; nothing restarts."""
        url = endpoint or f"http://{registry}"
        hosts = (f'server = "{url}"\n\n'
                 f'[host."{url}"]\n'
                 '  capabilities = ["pull", "resolve"]\n')
        folder = f"{REGISTRY_HOSTS}/{registry}"
        for node in self.nodes():
            self.engine("exec", "--interactive", node, "sh", "-euc",
                        f'mkdir -p "{folder}" && cat >"{folder}/hosts.toml"', input=hosts)

    # -- internals ------------------------------------------------------------------------------

    def _kind(self, *args: str, check: bool = True,
              timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(self.kind), *args], capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL,
                              env={**os.environ, **self.env})
        if check and done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
            raise KindError(f"kind {' '.join(args)} failed ({done.returncode}):\n{tail}")
        return done


def _image_id(engine: str, image: str | None) -> str | None:
    """The image's ID (its config's digest, without `sha256:`) in `engine`'s store, or None."""
    if not image:
        return None
    done = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", image],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    return done.stdout.strip().removeprefix("sha256:") or None if done.returncode == 0 else None


def _run(cmd: list[str], input: str | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=TIMEOUT,
                          check=False, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        name = Path(cmd[0]).name
        raise KindError(f"{name} {' '.join(cmd[1:])} failed: {done.stderr.strip()}")
    return done


def main(argv: Sequence[str]) -> int:
    """`python -m configmirror_testing.kind env [IMAGE]`: print `export` lines choosing the
    provider for kind nodes of IMAGE (nothing when it is Docker by default) and naming IMAGE
    as that provider holds it, for a shell to eval; with Podman its containers.conf goes to
    ~/.cache/configmirror/kind/."""
    if not argv or argv[0] != "env" or len(argv) > 2:
        print("usage: python -m configmirror_testing.kind env [IMAGE]", file=sys.stderr)
        return 2
    image = argv[1] if len(argv) == 2 and argv[1] else None
    provider = choose_provider(image)
    if provider == "docker" and not os.environ.get("KIND_EXPERIMENTAL_PROVIDER"):
        return 0
    cache = Path(os.environ.get("CONFIGMIRROR_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "configmirror")
    for name, value in provider_env(provider, image, cache / "kind").items():
        print(f"export {name}={value}")
    if image:
        print(f"export KIND_NODE_IMAGE={node_image_ref(provider, image)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KindError as error:
        print(f"kind: {error}", file=sys.stderr)
        sys.exit(1)
