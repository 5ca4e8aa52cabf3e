"""A real single-node Kubernetes cluster from plain processes, for `make cluster-test`.

The control plane of configmirror_testing.controlplane (with ServiceAccount admission, the Node
authorizer and an identity per component), kube-controller-manager, kube-scheduler, and one
node: containerd (its own instance, with the CRI plugin, runc and a CNI bridge), the kubelet and
kube-proxy (iptables), like Kubernetes' own hack/local-up-cluster.sh. No kind, no registry, no
Docker: the pod sandbox image is made here from Kubernetes' pause.c (built by
`hack/controlplane/build.sh --node`), and other images are imported into containerd.

    with NodeCluster(find_node_assets()) as node:
        node.load_docker_image("configmirror:0.1.0")
        node.kubectl("apply", "-k", "deploy/")

Every process is started, owned and stopped here, with the parent-death signal. What the
cluster changes on the machine (mounts, network namespaces, the bridge, iptables chains,
cgroups, sysctls) is undone by configmirror_testing.nodehost, also after a crash. It needs root,
and one node cluster runs on a machine at a time (a lock): its bridge, address and cgroup root
have fixed names. Pods reach only pods, the node and the Service range: nothing leaves the
machine, and there is no cluster DNS.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from configmirror_testing.controlplane import (
    BINARIES,
    ControlPlane,
    ControlPlaneError,
    find_assets,
    spawn,
    stop_process,
)
from configmirror_testing.nodehost import Host, HostError, run
from configmirror_testing.wait import WaitTimeout, wait_for

NODE_BINARIES = ("kubelet", "kube-scheduler", "kube-controller-manager", "kube-proxy", "pause")
NODE_NAME = "configmirror-node"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.0.0.0/24"  # the control plane's --service-cluster-ip-range
CLUSTER_DNS = "10.0.0.10"     # in the Service range; nothing answers there (no DNS here)
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap", "firewall")
HOST = Host(state_dir=Path(tempfile.gettempdir()) / "configmirror-node", node_ip="10.201.0.1",
            node_interface="cm-node0", service_cidr=SERVICE_CIDR, pod_cidr=POD_CIDR,
            cni_bridge="cm-cni0",
            cni_network="cm-node", cgroup_root="configmirror-node")
LOCK = Path(tempfile.gettempdir()) / "configmirror-node.lock"
START_TIMEOUT = 120.0
# The Debian package each host program comes from, for the message when one is missing.
HOST_PROGRAMS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc",
                 "iptables": "iptables", "ip6tables": "iptables", "ip": "iproute2",
                 "ss": "iproute2", "openssl": "openssl", "umount": "mount"}
# What a test cluster needs of kube-controller-manager: namespaces, garbage collection,
# ServiceAccounts and their tokens, Deployments, disruption budgets, Services. No cloud, no
# certificate signing, no volumes, no node IPAM.
CONTROLLERS = ("namespace-controller", "garbage-collector-controller",
               "serviceaccount-controller", "serviceaccount-token-controller",
               "root-ca-certificate-publisher-controller", "deployment-controller",
               "replicaset-controller", "disruption-controller", "node-lifecycle-controller",
               "endpointslice-controller", "endpointslice-mirroring-controller",
               "pod-garbage-collector-controller", "job-controller", "statefulset-controller",
               "daemonset-controller", "ttl-after-finished-controller",
               "resourcequota-controller", "clusterrole-aggregation-controller",
               "taint-eviction-controller")
# Token identities of the components, in the groups the bootstrap RBAC roles and the Node
# authorizer expect.
USERS = {f"system:node:{NODE_NAME}": ["system:nodes"], "system:kube-proxy": [],
         "system:kube-scheduler": [], "system:kube-controller-manager": []}


class NodeError(RuntimeError):
    """The node cluster cannot start or stop; the message names the part and why."""


def find_node_assets(repo_root: Path | None = None, build: bool = False) -> Path | None:
    """The folder holding the control-plane and node binaries (`build.sh --node`), or None."""
    return find_assets(repo_root, build, binaries=(*BINARIES, *NODE_BINARIES),
                       build_args=("--node",))


def node_missing(assets: Path | None) -> str | None:
    """Why a node cluster cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return ("the node cluster needs root (containerd, runc and the kubelet mount "
                "filesystems, make network namespaces and write iptables rules)")
    if assets is None:
        return "no node binaries: run `make node` (hack/controlplane/build.sh --node; needs Go)"
    absent = sorted({f"{p} ({pkg})" for p, pkg in HOST_PROGRAMS.items() if not shutil.which(p)})
    absent += [f"{CNI_BIN_DIR / p} (containernetworking-plugins)" for p in CNI_PLUGINS
               if not (CNI_BIN_DIR / p).is_file()]
    if absent:
        return "missing on this machine: " + ", ".join(absent) + " (apt-get install them)"
    return None


class MachineLock:
    """An flock that one node cluster on this machine holds while it exists."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, timeout: float) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

        def locked() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True
        try:
            wait_for(locked, timeout, f"{self.path}: another node cluster runs on this "
                     f"machine (process {self._holder()})", interval=1.0)
        except WaitTimeout as err:
            os.close(fd)
            raise NodeError(str(err)) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def _holder(self) -> str:
        with contextlib.suppress(OSError):
            return self.path.read_text().strip() or "unknown"
        return "unknown"


class NodeCluster:
    """The control plane, kube-controller-manager, kube-scheduler and one node (containerd,
    kubelet, kube-proxy). `logs_to` receives every component's log and the pods' logs on
    stop."""

    def __init__(self, assets: Path, logs_to: Path | None = None,
                 lock_timeout: float = 600.0, host: Host = HOST) -> None:
        self.assets = assets
        self.logs_to = logs_to
        self.lock_timeout = lock_timeout
        self.host = host
        self.plane: ControlPlane | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = MachineLock(LOCK)

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> NodeCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start everything and wait until the node is Ready and pods can reach the API."""
        reason = node_missing(self.assets)
        if reason:
            raise NodeError(reason)
        self._lock.acquire(self.lock_timeout)
        try:
            self.host.clean(self._binary("kube-proxy"))  # what a crashed run left
            self.host.set_up()
            for folder in ("logs", "config", "pki", "cni/net.d", "pod-logs"):
                (self.dir / folder).mkdir(parents=True)
            self._write_pki()
            self.plane = ControlPlane(
                self.assets, address=self.host.node_ip, service_account_admission=True,
                authorization="Node,RBAC", users=USERS, parent=self.dir,
                extra_apiserver_flags=self._apiserver_flags())
            self.plane.start()
            self._start_containerd()
            self.load_image(self._pause_image())
            self._start_kubelet()
            self._start_controllers()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every process (the kubelet first, so it restarts nothing), keep the logs if
        asked, and remove everything from the host; raise NodeError naming any leftover."""
        if not self._lock.held:
            return  # never started: the host belongs to whoever holds the lock
        try:
            self._stop("kubelet")
            self.host.stop_containers()
            self._stop("containerd")
            self._stop("kube-proxy", "kube-controller-manager", "kube-scheduler")
            self._keep_logs()
            if self.plane is not None:
                self.plane.stop()
                self.plane = None
            self.host.clean(self._binary("kube-proxy"))
        except HostError as err:
            raise NodeError(str(err)) from None
        finally:
            self._lock.release()

    # -- what tests use -------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self.host.state_dir

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig."""
        return self.control_plane.kubeconfig

    @property
    def control_plane(self) -> ControlPlane:
        if self.plane is None:
            raise NodeError("the node cluster is not running")
        return self.plane

    def kubectl(self, *args: str, check: bool = True,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl as admin against this cluster."""
        return self.control_plane.kubectl(*args, check=check, input=input)

    def load_image(self, archive: Path | IO[bytes]) -> None:
        """Import an image archive (`docker save` format, a file or a stream) into the
        node's containerd, unpacked for the kubelet."""
        source = str(archive) if isinstance(archive, Path) else "-"
        done = subprocess.run(
            [*self._ctr(), "images", "import", source],
            stdin=None if isinstance(archive, Path) else archive,
            capture_output=True, timeout=600, check=False)
        if done.returncode != 0:
            raise NodeError(f"ctr images import {source}: {done.stderr.decode().strip()}")

    def load_docker_image(self, tag: str) -> None:
        """Copy an image from Docker into the node's containerd (docker save | ctr import)."""
        with subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) as save:
            assert save.stdout is not None
            try:
                self.load_image(save.stdout)
            finally:
                _, err = save.communicate(timeout=600)
            if save.returncode != 0:
                raise NodeError(f"docker save {tag}: {err.decode().strip()}")

    def images(self) -> list[str]:
        """The image names the node's containerd holds."""
        done = subprocess.run([*self._ctr(), "images", "list", "--quiet"], capture_output=True,
                              text=True, timeout=60, check=True)
        return done.stdout.split()

    @property
    def pids(self) -> dict[str, int]:
        """Process id of every component that runs."""
        pids = {name: p.pid for name, p in self._procs.items() if p.poll() is None}
        if self.plane is not None:
            pids.update(zip(("etcd", "kube-apiserver"), self.plane.pids, strict=False))
        return pids

    # -- internals ------------------------------------------------------------------------------

    def _binary(self, name: str) -> Path:
        return self.assets / name

    def _ctr(self) -> list[str]:
        return ["ctr", "--address", str(self.host.containerd_socket), "--namespace", "k8s.io"]

    def _spawn(self, name: str, *args: str) -> None:
        self._procs[name] = spawn(args, self.dir / "logs" / f"{name}.log")

    def _stop(self, *names: str) -> None:
        """SIGTERM all of `names` at once, then wait for each (SIGKILL after the timeout)."""
        procs = [self._procs.pop(n) for n in names if n in self._procs]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            stop_process(proc)

    def _died(self) -> str | None:
        """Which component exited, with the end of its log (for a wait's abort)."""
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                log = (self.dir / "logs" / f"{name}.log").read_text(errors="replace")
                tail = "\n".join(log.strip().splitlines()[-15:])
                return f"{name} exited with {proc.returncode}; the end of its log:\n{tail}"
        return None

    def _wait(self, check: Any, what: str, timeout: float = START_TIMEOUT) -> None:
        try:
            wait_for(check, timeout, what, interval=0.2, abort=self._died)
        except WaitTimeout as err:
            raise NodeError(str(err)) from None

    def _write_pki(self) -> None:
        """A CA the kubelet trusts, and the apiserver's client certificate for the kubelet
        (logs, exec). ECDSA: RSA keys take seconds each on a busy 2-core machine."""
        pki = self.dir / "pki"
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "7"]
        run("openssl", "req", "-x509", *ec, "-keyout", str(pki / "ca.key"),
            "-out", str(pki / "ca.crt"), "-subj", "/CN=configmirror-node-ca")
        run("openssl", "req", "-x509", *ec, "-CA", str(pki / "ca.crt"),
            "-CAkey", str(pki / "ca.key"), "-keyout", str(pki / "kubelet-client.key"),
            "-out", str(pki / "kubelet-client.crt"),
            "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "-addext", "extendedKeyUsage=clientAuth", "-addext", "basicConstraints=CA:FALSE")

    def _apiserver_flags(self) -> list[str]:
        pki = self.dir / "pki"
        return [f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
                # The node registers its name, which nothing resolves: reach it by address.
                "--kubelet-preferred-address-types=InternalIP",
                "--enable-admission-plugins=NodeRestriction"]

    @functools.cached_property
    def pause_image(self) -> str:
        """The pod sandbox image's name, with the version the pause binary reports."""
        version = run(str(self._binary("pause")), "-v").stdout.split()[-1].lstrip("v")
        return f"localhost/configmirror/pause:{version}"

    def _pause_image(self) -> Path:
        """The pod sandbox image, made from the pause binary: one file, no registry."""
        archive = self.dir / "pause.tar"
        write_image(archive, self.pause_image, {"/pause": self._binary("pause").read_bytes()},
                    {"Entrypoint": ["/pause"], "User": "65535:65535"})
        return archive

    def _start_containerd(self) -> None:
        config = self.dir / "config" / "containerd.toml"
        config.write_text(CONTAINERD_CONFIG.format(
            dir=self.dir, socket=self.host.containerd_socket, runc=shutil.which("runc"),
            cni_bin=CNI_BIN_DIR, pause=self.pause_image))
        (self.dir / "cni/net.d" / f"10-{self.host.cni_network}.conflist").write_text(
            json.dumps(self._cni_config(), indent=2))
        self._spawn("containerd", shutil.which("containerd") or "containerd",
                    "--config", str(config))

        def cri_ready() -> bool:
            done = subprocess.run([*self._ctr(), "plugins", "list"], capture_output=True,
                                  text=True, timeout=10, check=False)
            return any(line.split()[:2] == ["io.containerd.grpc.v1", "cri"]
                       and line.split()[-1] == "ok" for line in done.stdout.splitlines())
        self._wait(cri_ready, "containerd's CRI plugin")

    def _cni_config(self) -> dict[str, Any]:
        """bridge + host-local + firewall + portmap; containerd adds loopback itself.

        No default route and no masquerading: pods reach pods, the node and the Service range
        (which kube-proxy translates), so no pod packet leaves the machine. The firewall plugin
        accepts pod traffic in FORWARD, which Docker sets to DROP when it runs here.
        """
        return {"cniVersion": "0.4.0", "name": self.host.cni_network, "plugins": [
            {"type": "bridge", "bridge": self.host.cni_bridge, "isGateway": True,
             "isDefaultGateway": False, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(self.dir / "cni" / "ipam"),
                      "ranges": [[{"subnet": self.host.pod_cidr}]],
                      "routes": [{"dst": SERVICE_CIDR}, {"dst": f"{self.host.node_ip}/32"}]}},
            {"type": "firewall", "backend": "iptables"},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}

    def _start_kubelet(self) -> None:
        config = self.dir / "config" / "kubelet.json"
        config.write_text(json.dumps(self._kubelet_config(), indent=2))
        plane = self.control_plane
        self._spawn("kubelet", str(self._binary("kubelet")), f"--config={config}",
                    f"--kubeconfig={plane.user_kubeconfig(f'system:node:{NODE_NAME}')}",
                    f"--root-dir={self.dir / 'kubelet'}",
                    f"--cert-dir={self.dir / 'kubelet' / 'pki'}",
                    f"--hostname-override={NODE_NAME}", f"--node-ip={self.host.node_ip}",
                    "--v=1")

    def _kubelet_config(self) -> dict[str, Any]:
        ip = self.host.node_ip
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # A kubelet >= 1.35 refuses cgroup v1 unless told otherwise; CI's machines have it.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",  # no systemd; containerd's runc agrees (SystemdCgroup)
            "cgroupRoot": f"/{self.host.cgroup_root}",
            "cgroupsPerQOS": True, "enforceNodeAllocatable": ["pods"],
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.host.containerd_socket}",
            "address": ip, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": ip, "healthzPort": 10248,
            # The apiserver's client certificate (logs, exec), or a token it vouches for.
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.dir / "pki" / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            # No DNS server: the address is in the Service range and answers nothing, which
            # stops the kubelet's MissingClusterDNS event on every sync; and no host
            # resolv.conf in pods, so no pod asks a server off this machine.
            "clusterDNS": [CLUSTER_DNS], "clusterDomain": "cluster.local", "resolvConf": "",
            "podLogsDir": str(self.dir / "pod-logs"),
            "volumePluginDir": str(self.dir / "kubelet-plugins"),
            # Root here may lack CAP_SYS_RESOURCE: no negative oom_score_adj (default -999).
            "oomScoreAdj": 0,
            # Imported images can never be pulled again: never collect them, and let a full
            # CI disk evict no test pod.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            # Faster than the defaults (10s, 5m, 1m): a test waits on these.
            "nodeStatusUpdateFrequency": "4s", "nodeStatusReportFrequency": "20s",
            "syncFrequency": "10s",
            # No systemd-logind to ask for a shutdown inhibitor.
            "shutdownGracePeriod": "0s", "shutdownGracePeriodCriticalPods": "0s",
            "serializeImagePulls": False, "rotateCertificates": False,
            "serverTLSBootstrap": False,
        }

    def _start_controllers(self) -> None:
        plane, ip, config = self.control_plane, self.host.node_ip, self.dir / "config"
        scheduler = plane.user_kubeconfig("system:kube-scheduler")
        (config / "kube-scheduler.json").write_text(json.dumps({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(scheduler)},
            "leaderElection": {"leaderElect": False}}))
        self._spawn("kube-scheduler", str(self._binary("kube-scheduler")),
                    f"--config={config / 'kube-scheduler.json'}",
                    f"--authentication-kubeconfig={scheduler}",
                    f"--authorization-kubeconfig={scheduler}",
                    f"--bind-address={ip}", "--secure-port=10259", "--v=1")
        manager = plane.user_kubeconfig("system:kube-controller-manager")
        self._spawn("kube-controller-manager", str(self._binary("kube-controller-manager")),
                    f"--kubeconfig={manager}", f"--authentication-kubeconfig={manager}",
                    f"--authorization-kubeconfig={manager}",
                    f"--bind-address={ip}", "--secure-port=10257", "--leader-elect=false",
                    f"--controllers={','.join(CONTROLLERS)}",
                    # Each controller acts as its own ServiceAccount, as in a real cluster.
                    "--use-service-account-credentials=true",
                    f"--service-account-private-key-file={plane.dir / 'pki' / 'sa.key'}",
                    f"--root-ca-file={plane.ca_file}", f"--cluster-name={NODE_NAME}", "--v=1")
        (config / "kube-proxy.json").write_text(json.dumps({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(plane.user_kubeconfig("system:kube-proxy"))},
            "hostnameOverride": NODE_NAME, "bindAddress": ip,
            "healthzBindAddress": f"{ip}:10256", "metricsBindAddress": f"{ip}:10249",
            "clusterCIDR": self.host.pod_cidr, "detectLocalMode": "ClusterCIDR",
            "nodePortAddresses": [f"{ip}/32"],
            "oomScoreAdj": 0,
            # 0: leave the kernel's conntrack table size and timeouts alone.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            # Else kube-proxy sets net.ipv4.conf.all.route_localnet=1 for the whole machine.
            "iptables": {"localhostNodePorts": False, "masqueradeAll": False,
                         "syncPeriod": "30s", "minSyncPeriod": "1s"}}))
        self._spawn("kube-proxy", str(self._binary("kube-proxy")),
                    f"--config={config / 'kube-proxy.json'}", "--v=1")

    def _wait_ready(self) -> None:
        plane = self.control_plane

        def get(path: str) -> Any:
            try:
                return plane.api("GET", path)
            except OSError:  # 404 (an HTTPError) until it exists
                return None

        def node_ready() -> bool:
            node = get(f"/api/v1/nodes/{NODE_NAME}") or {}
            conditions = node.get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        def proxied() -> bool:
            rules = run("iptables", "-t", "nat", "-S", "KUBE-SERVICES", check=False).stdout
            return "default/kubernetes:https cluster IP" in rules

        self._wait(node_ready, f"node {NODE_NAME} to be Ready")
        self._wait(lambda: get("/api/v1/namespaces/default/serviceaccounts/default"),
                   "the default ServiceAccount (the controller-manager)")
        self._wait(lambda: get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt"),
                   "the kube-root-ca.crt ConfigMap (the controller-manager)")
        self._wait(proxied, "kube-proxy's rules for the kubernetes Service")

    def _keep_logs(self) -> None:
        """Copy the components' and the pods' logs to `logs_to` (before they are removed)."""
        if self.logs_to is None or not self.dir.exists():
            return
        self.logs_to.mkdir(parents=True, exist_ok=True)
        sources = [self.dir / "logs", self.dir / "pod-logs"]
        if self.plane is not None:
            sources.append(self.plane.dir)
        for source in sources:
            for path in source.rglob("*.log"):
                target = self.logs_to / source.name / path.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    shutil.copyfile(path, target)


def write_image(archive: Path, ref: str, files: dict[str, bytes],
                config: dict[str, Any]) -> None:
    """Write a one-layer image in `docker save` format, from bytes only (no registry, no
    Docker): the same inputs give the same image id (owner 0, mtime 0)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    diff_id = hashlib.sha256(layer.getvalue()).hexdigest()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    image_config = json.dumps({
        "architecture": arch, "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   **config},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(image_config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref],
                            "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    with tarfile.open(archive, "w") as out:
        for name, data in ((f"{diff_id}/layer.tar", layer.getvalue()),
                           (config_name, image_config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            out.addfile(info, io.BytesIO(data))


# containerd 1.6's configuration (format version 2) for the node's own instance: everything in
# the state folder, so it never meets a system or Docker containerd.
CONTAINERD_CONFIG = """\
version = 2
root = "{dir}/containerd/root"
state = "{dir}/containerd/state"
# Snapshotters this node does not use (they only log errors). Not the v1 runtime: in 1.6 the
# tasks service, and so CRI, fails to load without it.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"

[plugins]
  [plugins."io.containerd.runtime.v1.linux"]
    runtime_root = "{dir}/runc-v1"
  [plugins."io.containerd.internal.v1.opt"]
    path = "{dir}/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{pause}"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    # Pod network namespaces in the state folder, not /run/netns: found and removed even
    # after containerd was killed.
    netns_mounts_under_state_dir = true
    # Where root lacks CAP_SYS_RESOURCE no process may lower its oom_score_adj, and runc
    # fails every pod sandbox ("failed to update /proc/self/oom_score_adj: Permission
    # denied"): clamp every container's value to containerd's own.
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "{runc}"
          Root = "{dir}/runc"
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{cni_bin}"
      conf_dir = "{dir}/cni/net.d"
      max_conf_num = 1
"""


def main(argv: Sequence[str]) -> int:
    """`python -m configmirror_testing.node [clean]`: run a node cluster until Ctrl-C, or
    remove what a crashed one left."""
    if os.geteuid() != 0:
        print("node cluster: needs root", file=sys.stderr)
        return 1
    if list(argv) == ["clean"]:
        lock = MachineLock(LOCK)
        lock.acquire(0)
        try:
            HOST.clean(None)
        finally:
            lock.release()
        print("node cluster: nothing left on this machine")
        return 0
    assets = find_node_assets(build=True)
    if assets is None:
        print("no node binaries: hack/controlplane/build.sh --node failed", file=sys.stderr)
        return 1
    with NodeCluster(assets) as node:
        print(f"export KUBECONFIG={node.kubeconfig}   # Ctrl-C stops the cluster", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (NodeError, ControlPlaneError, HostError) as error:
        print(f"node cluster: {error}", file=sys.stderr)
        sys.exit(1)
