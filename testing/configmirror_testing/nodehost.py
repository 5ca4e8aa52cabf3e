"""What a node cluster changes on this machine, and how all of it is undone.

A kubelet, containerd and kube-proxy do not stay in a folder: they mount volumes, root
filesystems and network namespaces, make veths on a bridge, write iptables chains, make cgroups,
set kernel settings and leave sockets and cache files in fixed places. `Host` names every one of
those things (all of them ours by name or by path, never found by a process name), sets up the
few the cluster needs before it starts, and `Host.clean()` removes them again. clean() is
idempotent and needs nothing but the state folder, so it also cleans up after a run that
crashed or was killed (configmirror_testing.node runs it before every start).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from configmirror_testing.wait import WaitTimeout, wait_for

COMMAND_TIMEOUT = 60.0
# Kernel settings the cluster changes. The CNI bridge plugin and kube-proxy need forwarding
# and bridged traffic through iptables; the kubelet (protectKernelDefaults: false) sets the
# other three. All are put back by clean(); the first two only when no other bridge needs them
# (dockerd turns both on too).
SYSCTLS = ("net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables", "vm.overcommit_memory",
           "kernel.panic", "kernel.panic_on_oops")
SHARED_SYSCTLS = ("net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables")
# Host paths the kubelet, containerd and libcni use whatever they are configured with: removed
# when empty (what another runtime keeps there stays).
HOST_DIRS = ("/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/run/containerd/s",
             "/run/containerd", "/var/lib/cni/results", "/var/lib/cni", "/var/log/containers")
# The kubelet makes this socket even with --root-dir elsewhere.
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
CHAIN_PREFIXES = ("KUBE-", "CNI-")


class HostError(RuntimeError):
    """Setting up or cleaning the host failed; the message names what is left or why."""


def run(*cmd: str, check: bool = True, timeout: float = COMMAND_TIMEOUT,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a host command (ip, iptables, ...); raises HostError on failure when `check`."""
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                          input=input, check=False)
    if check and done.returncode != 0:
        raise HostError(f"{shlex.join(cmd)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


@dataclass(frozen=True)
class Host:
    """The host-side names of one node cluster, all derived from its state folder."""

    state_dir: Path
    node_ip: str
    node_interface: str        # holds node_ip; the Service range is routed into it
    service_cidr: str
    pod_cidr: str
    cni_bridge: str
    cni_network: str
    cgroup_root: str           # the kubelet's --cgroup-root, under every cgroup hierarchy

    @property
    def containerd_socket(self) -> Path:
        return self.state_dir / "containerd" / "containerd.sock"

    @property
    def _saved(self) -> Path:
        return self.state_dir / "host.json"

    # -- set up --------------------------------------------------------------------------------

    def set_up(self) -> None:
        """Record what will change, then make the node's address and cgroup root."""
        taken = self._overlaps()
        if taken:
            raise HostError("the node cluster's addresses are in use on this machine ("
                            + "; ".join(taken) + "): routing them to the node would cut it off")
        self.state_dir.mkdir(mode=0o700)
        self._saved.write_text(json.dumps(
            {key: read_sysctl(key) for key in SYSCTLS if sysctl_path(key).exists()}))
        for key in SHARED_SYSCTLS:
            write_sysctl(key, "1")
        # A bridge with no ports holds the node's address: nothing depends on eth0, and a packet
        # to a ClusterIP that kube-proxy did not translate (yet) ends here instead of leaving
        # the machine. (A dummy interface would do, but not every kernel has that driver.)
        run("ip", "link", "add", self.node_interface, "type", "bridge")
        run("ip", "addr", "add", f"{self.node_ip}/32", "dev", self.node_interface)
        run("ip", "link", "set", self.node_interface, "up")
        run("ip", "route", "add", self.service_cidr, "dev", self.node_interface)
        for hierarchy in cgroup_hierarchies():
            (hierarchy / self.cgroup_root).mkdir(exist_ok=True)

    # -- clean up ------------------------------------------------------------------------------

    def stop_containers(self) -> None:
        """Kill every container of this node and containerd's shims for them.

        The kubelet must be stopped first (it would restart them). A container process is ours
        when it is in our cgroup tree; a shim is ours when its command line names our
        containerd socket. Both are found by path, never by a process name.
        """
        kill_and_wait(self.containers, "the node's containers and shims")

    def containers(self) -> list[int]:
        """Container processes in this node's cgroups, and the shims of its containerd."""
        pids = {pid for cgroup in self._cgroups() for pid in cgroup_pids(cgroup)}
        pids |= set(processes_naming(str(self.containerd_socket)))
        return sorted(pids - {os.getpid()})

    def processes(self) -> list[int]:
        """Every process of this node still alive: its containers and shims, and whatever
        names its state folder (its daemons, after their owner was killed)."""
        pids = set(self.containers()) | set(processes_naming(f"{self.state_dir}/"))
        return sorted(pids - {os.getpid()})

    def clean(self, kube_proxy: Path | None = None) -> None:
        """Remove everything this node left on the host; raise HostError naming any leftover.

        Run it after the cluster's processes have stopped (or their owner died: what is left
        of them is killed here). `kube_proxy` runs `kube-proxy --cleanup` first, which knows
        its own rules best.
        """
        kill_and_wait(self.processes, "the node's processes")
        if kube_proxy is not None and kube_proxy.exists() and self.chains():
            run(str(kube_proxy), "--cleanup", "--v=0", check=False)
        for binary in ("iptables", "ip6tables"):
            remove_chains(binary)
        sandboxes = self._sandbox_ids()
        self._unmount()
        for link in bridge_ports(self.cni_bridge):
            run("ip", "link", "del", link, check=False)
        for link in (self.cni_bridge, self.node_interface):
            if link_exists(link):
                run("ip", "link", "del", link)
        for cgroup in self._cgroups():
            remove_cgroup_tree(cgroup)
        self._remove_host_files(sandboxes)
        if self._saved.exists():
            self._restore_sysctls(json.loads(self._saved.read_text()))
        for folder in HOST_DIRS:
            with contextlib.suppress(OSError):
                Path(folder).rmdir()  # only when empty: never what someone else put there
        if not mounts_under(self.state_dir):  # rmtree must never walk into a mount
            rm_tree(self.state_dir)
        left = self.leftovers(sandboxes)
        if left:
            raise HostError("the node cluster left behind: " + "; ".join(left))

    def leftovers(self, sandboxes: Iterable[str] = ()) -> list[str]:
        """What of this node is still on the host (empty when clean() did its job);
        `sandboxes` are the pod sandboxes it had, whose files outside it are looked for."""
        left = [f"mount {m}" for m in mounts_under(self.state_dir)]
        if self.state_dir.exists():
            left.append(f"folder {self.state_dir}")
        left += [f"interface {name}" for name in (self.cni_bridge, self.node_interface)
                 if link_exists(name)]
        left += [f"cgroup {c}" for c in self._cgroups()]
        left += [f"{binary} chain {chain}" for binary, chain in self.chains()]
        left += [f"process {pid}" for pid in self.processes()]
        left += [f"file {f}" for f in self._host_files(sandboxes) if f.exists()]
        return left

    def chains(self) -> list[tuple[str, str]]:
        """(iptables binary, chain) of every KUBE-*/CNI-* chain in any table."""
        return [(binary, chain) for binary in ("iptables", "ip6tables")
                for _, chain in our_chains(binary)]

    # -- internals -----------------------------------------------------------------------------

    def _overlaps(self) -> list[str]:
        """Routes and addresses of this machine inside the node's networks."""
        ours = [ipaddress.ip_network(n) for n in
                (f"{self.node_ip}/32", self.service_cidr, self.pod_cidr)]
        routes = json.loads(run("ip", "-json", "-4", "route", "show", "table", "all").stdout)
        taken = []
        for route in routes:
            if route.get("dst", "default") == "default" or route.get("dev") in (
                    self.node_interface, self.cni_bridge):
                continue
            network = ipaddress.ip_network(route["dst"], strict=False)
            taken += [f"{route['dst']} on {route.get('dev')}" for n in ours if n.overlaps(network)]
        return taken

    def _cgroups(self) -> list[Path]:
        return [h / self.cgroup_root for h in cgroup_hierarchies()
                if (h / self.cgroup_root).is_dir()]

    def _sandbox_ids(self) -> list[str]:
        sandboxes = self.state_dir / "containerd/root/io.containerd.grpc.v1.cri/sandboxes"
        return [p.name for p in sandboxes.iterdir()] if sandboxes.is_dir() else []

    def _unmount(self) -> None:
        """Unmount everything under the state folder (volumes, root filesystems, shm, pod
        network namespaces), deepest first; lazily when a mount is still busy."""
        for mount in sorted(mounts_under(self.state_dir), reverse=True):
            if run("umount", mount, check=False).returncode != 0:
                run("umount", "-l", mount, check=False)

    def _host_files(self, sandboxes: Iterable[str]) -> list[Path]:
        """Files of this node's pod sandboxes outside the state folder."""
        # libcni caches each ADD result as <network>-<sandbox id>-<interface>, for our network
        # and for containerd's loopback one (cni-loopback); a killed pod leaves them behind.
        results = Path("/var/lib/cni/results")
        files = [*results.glob(f"{self.cni_network}-*")]
        for sandbox in sandboxes:
            files += results.glob(f"*-{sandbox}-*")
            # containerd 1.6 puts each shim's socket at /run/containerd/s/sha256(<our socket>/
            # k8s.io/<sandbox id>) whatever its state folder; a killed shim leaves it behind.
            name = hashlib.sha256(f"{self.containerd_socket}/k8s.io/{sandbox}".encode())
            files.append(Path("/run/containerd/s", name.hexdigest()))
        return files

    def _remove_host_files(self, sandboxes: Iterable[str]) -> None:
        for path in self._host_files(sandboxes):
            path.unlink(missing_ok=True)
        logs = Path("/var/log/containers")
        if logs.is_dir():
            for link in logs.glob("*.log"):
                if link.is_symlink() and os.readlink(link).startswith(f"{self.state_dir}/"):
                    link.unlink()
        if DEVICE_PLUGIN_SOCKET.is_socket() and not listening(DEVICE_PLUGIN_SOCKET):
            DEVICE_PLUGIN_SOCKET.unlink()

    def _restore_sysctls(self, saved: dict[str, str]) -> None:
        others = [b for b in bridges() if b not in (self.cni_bridge, self.node_interface)]
        for key, value in saved.items():
            if key in SHARED_SYSCTLS and others:
                continue  # another bridge (docker0, say) forwards through them
            write_sysctl(key, value)


# -- the host's facts, one function each ----------------------------------------------------------

def kill_and_wait(find: Callable[[], list[int]], what: str, timeout: float = 30) -> None:
    """SIGKILL what `find` returns until it returns nothing (a dying process can fork)."""
    def gone() -> bool:
        pids = find()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids
    try:
        wait_for(gone, timeout, f"{what} to exit", interval=0.1)
    except WaitTimeout as err:
        raise HostError(str(err)) from None


def sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def read_sysctl(key: str) -> str:
    return sysctl_path(key).read_text().strip()


def write_sysctl(key: str, value: str) -> None:
    if read_sysctl(key) != value:
        sysctl_path(key).write_text(value)


def cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, and v2 where it is mounted)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mountpoint, fstype, *_ = line.split()
        if fstype in ("cgroup", "cgroup2"):
            found.append(Path(unescape(mountpoint)))
    return sorted(set(found))


def cgroup_pids(cgroup: Path) -> set[int]:
    pids: set[int] = set()
    for procs in cgroup.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in procs.read_text().split()}
    return pids


def remove_cgroup_tree(cgroup: Path) -> None:
    """rmdir a cgroup and its children, deepest first (a cgroup's files cannot be removed)."""
    for child in sorted((p for p in cgroup.rglob("*") if p.is_dir()), reverse=True):
        with contextlib.suppress(OSError):
            child.rmdir()
    with contextlib.suppress(OSError):
        cgroup.rmdir()


def processes_naming(text: str) -> Iterator[int]:
    """Processes whose command line contains `text` (a path of ours)."""
    needle = text.encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (proc / "cmdline").read_bytes():
                    yield int(proc.name)


def unescape(path: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline, backslash as \\ooo)."""
    return path.encode().decode("unicode_escape") if "\\" in path else path


def mounts_under(folder: Path) -> list[str]:
    prefix = f"{folder}/"
    points = [unescape(line.split()[4])
              for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p == str(folder) or p.startswith(prefix)]


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def bridges() -> list[str]:
    return [p.name for p in Path("/sys/class/net").iterdir() if (p / "bridge").is_dir()]


def bridge_ports(bridge: str) -> list[str]:
    ports = Path("/sys/class/net", bridge, "brif")
    return [p.name for p in ports.iterdir()] if ports.is_dir() else []


def listening(socket_path: Path) -> bool:
    """Whether a process listens on a unix socket (`ss` lists it)."""
    return f" {socket_path} " in run("ss", "-xlnH", check=False).stdout


TABLES = ("filter", "nat", "mangle", "raw")


def our_chains(binary: str) -> list[tuple[str, str]]:
    """(table, chain) of every KUBE-*/CNI-* chain that `binary` (iptables, ip6tables) shows."""
    found = []
    for table in TABLES:
        for line in run(binary, "-t", table, "-S", check=False).stdout.splitlines():
            parts = line.split()
            if parts[:1] == ["-N"] and parts[1].startswith(CHAIN_PREFIXES):
                found.append((table, parts[1]))
    return found


def remove_chains(binary: str) -> None:
    """Drop every KUBE-*/CNI-* chain and every rule of another chain that jumps to one.

    The kubelet leaves KUBE-FIREWALL, KUBE-KUBELET-CANARY and KUBE-IPTABLES-HINT, the CNI
    firewall plugin CNI-FORWARD and CNI-ADMIN, and a killed kube-proxy all of its own.
    """
    for table in TABLES:
        chains = [c for t, c in our_chains(binary) if t == table]
        if not chains:
            continue
        for line in run(binary, "-t", table, "-S", check=False).stdout.splitlines():
            rule = shlex.split(line)
            if (rule[:1] == ["-A"] and not rule[1].startswith(CHAIN_PREFIXES)
                    and "-j" in rule and rule[rule.index("-j") + 1].startswith(CHAIN_PREFIXES)):
                run(binary, "-t", table, "-D", *rule[1:], check=False)
        for flag in ("-F", "-X"):
            for chain in chains:
                run(binary, "-t", table, flag, chain, check=False)


def rm_tree(folder: Path) -> None:
    """Remove a folder that holds no mount (rm -rf, which copes with anything in it)."""
    if folder.exists():
        run("rm", "-rf", "--one-file-system", str(folder))

