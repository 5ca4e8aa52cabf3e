"""A real, local Kubernetes control plane (etcd + kube-apiserver) for tests, benchmarks and
`make demo`.

Like controller-runtime's envtest: no kubelet, no controller-manager, no Docker. The binaries
come from `hack/controlplane/build.sh` (or KUBEBUILDER_ASSETS). The apiserver runs with RBAC,
an admin token in `system:masters`, and service-account signing keys, so TokenRequest and
ServiceAccount tokens work as in a cluster.

    with ControlPlane(assets) as cp:
        print(cp.kubeconfig)      # admin kubeconfig file
        cp.restart_apiserver()    # same etcd, same port
        cp.compact()              # with watch_cache=False: old resourceVersions now get 410

By default the apiserver listens on 127.0.0.1. `address=` makes it listen on another address
of this machine instead (a Docker network's gateway, so containers reach it), and its
self-signed serving certificate names that address, so clients there verify TLS as in a pod.
The certificate also names the `kubernetes` Service's ClusterIP (10.0.0.1), for pods of a node
that uses this control plane (ServiceAccount admission, the Node authorizer and an identity per
component are options for one; the node tier itself runs in kind: configmirror_testing.kind).
"""

from __future__ import annotations

import ctypes
import functools
import http.client
import io
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from configmirror_testing.tools import REPO, find_tool
from configmirror_testing.wait import WaitTimeout, wait_for

BINARIES = ("kube-apiserver", "etcd", "etcdctl", "kubectl")
VERSIONS = REPO / "hack" / "controlplane" / "versions.env"
# Which Kubernetes the suite's local control plane runs: "current" (versions.env's
# KUBERNETES_VERSION) or "oldest" (OLDEST_KUBERNETES_VERSION, the oldest minor the docs claim:
# `make test-integration-oldest`).
KUBERNETES = "CONFIGMIRROR_KUBERNETES"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


class ControlPlaneError(RuntimeError):
    """The control plane could not be started or used; the message names the part and why."""


def find_assets(repo_root: Path | None = None, build: bool = False, node: bool = False
                ) -> Path | None:
    """The folder holding the control-plane binaries (with `node`, the node's too), or None
    if there is none (and no build): configmirror_testing.tools' rule."""
    return find_tool("node" if node else "controlplane", build, repo_root or REPO)


def pinned_versions() -> dict[str, str]:
    """The KEY=VALUE lines of hack/controlplane/versions.env."""
    lines = (line.strip() for line in VERSIONS.read_text().splitlines())
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def oldest() -> bool:
    """Whether the suite runs against the oldest Kubernetes minor the docs claim."""
    chosen = os.environ.get(KUBERNETES, "current")
    if chosen not in ("current", "oldest"):
        raise ControlPlaneError(f"{KUBERNETES}={chosen}: say current or oldest")
    return chosen == "oldest"


def kubernetes_version() -> str:
    """The Kubernetes version the local control plane runs (versions.env's)."""
    return pinned_versions()["OLDEST_KUBERNETES_VERSION" if oldest() else "KUBERNETES_VERSION"]


def minor_of(version: str) -> tuple[int, int]:
    """(1, 32) of "1.32.13" or "1.32"."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the parent dies, so nothing is orphaned."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def spawn(args: Sequence[str], log: Path,
          env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a child process whose output goes to `log` and which dies with this process."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(args), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only, no locks
        )


def stop_process(proc: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT) -> int:
    """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


class ControlPlane:
    """etcd + kube-apiserver on free ports (loopback unless `address`), with an admin
    kubeconfig.

    With no controller-manager, ServiceAccount admission is off (nothing would create the
    accounts it requires); `service_account_admission` turns it on for a cluster that has one.
    `users` adds token identities (name -> groups; `user_kubeconfig` writes their kubeconfigs),
    `authorization` replaces "RBAC" (a kubelet needs "Node,RBAC"), `parent` is where the
    control plane's temporary folder goes, and `clients` the folder of kubectl and etcdctl when
    it is not `assets` (the oldest version's folder holds neither).
    """

    def __init__(self, assets: Path, watch_cache: bool = True,
                 extra_apiserver_flags: Sequence[str] = (), address: str = "127.0.0.1",
                 service_account_admission: bool = False, authorization: str = "RBAC",
                 users: Mapping[str, Sequence[str]] | None = None,
                 parent: Path | None = None, clients: Path | None = None) -> None:
        clients = clients or assets
        missing = [str(folder / b) for folder, b in (
            (assets, "kube-apiserver"), (assets, "etcd"), (clients, "etcdctl"),
            (clients, "kubectl")) if not (folder / b).is_file()]
        if missing:
            raise ControlPlaneError(f"the control plane lacks {', '.join(missing)}")
        self.assets = assets
        self.kubectl_binary = clients / "kubectl"
        self.etcdctl_binary = clients / "etcdctl"
        self.watch_cache = watch_cache
        self.extra_apiserver_flags = list(extra_apiserver_flags)
        self.address = address
        self.service_account_admission = service_account_admission
        self.authorization = authorization
        self.users = {name: list(groups) for name, groups in (users or {}).items()}
        self.parent = parent
        self.dir = Path()
        self.etcd_port = 0
        self.apiserver_port = 0
        self.token = ""
        self.tokens: dict[str, str] = {}
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        # api()'s connections: one per thread that called it, all closed by stop().
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: set[http.client.HTTPSConnection] = set()
        self._ssl_context: ssl.SSLContext | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start etcd and kube-apiserver and wait until the apiserver is ready."""
        self.dir = Path(tempfile.mkdtemp(prefix="configmirror-controlplane-", dir=self.parent))
        try:
            self._write_credentials()
            self._start_etcd()
            self.apiserver_port = free_port(self.address)
            self._start_apiserver()
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the apiserver, then etcd; remove every file this control plane wrote."""
        self.close_connections()
        self._ssl_context = None
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                stop_process(proc)
        self._apiserver = self._etcd = None
        if self.dir != Path() and self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port, with the same etcd."""
        if self._apiserver is not None:
            stop_process(self._apiserver)
        self._start_apiserver()

    def stop_apiserver(self, kill: bool = False) -> None:
        """Stop kube-apiserver only (SIGKILL if `kill`); start it again with start_apiserver."""
        if self._apiserver is not None:
            if kill:
                self._apiserver.kill()
                self._apiserver.wait(STOP_TIMEOUT)
            else:
                stop_process(self._apiserver)
            self._apiserver = None

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on its port after stop_apiserver."""
        self._start_apiserver()

    @property
    def pids(self) -> list[int]:
        """Process ids of the running etcd and apiserver."""
        return [p.pid for p in (self._etcd, self._apiserver) if p is not None]

    # -- what tests use -----------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.dir / "pki" / "apiserver.crt"

    @property
    def etcd_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    def user_kubeconfig(self, user: str) -> Path:
        """A kubeconfig of one of `users` (written on first use into this control plane's
        folder)."""
        path = self.dir / f"kubeconfig-{user.replace(':', '-')}"
        if not path.exists():
            path.write_text(json.dumps(self._kubeconfig_doc(self.tokens[user])))
        return path

    def kubectl(self, *args: str, kubeconfig: Path | None = None, check: bool = True,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (admin unless `kubeconfig` is given)."""
        # The discovery cache stays with this control plane (not in ~/.kube or the cwd).
        cmd = [str(self.kubectl_binary), "--kubeconfig", str(kubeconfig or self.kubeconfig),
               "--cache-dir", str(self.dir / "kubectl-cache"), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=120,
                              check=False)
        if check and done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def etcd_revision(self) -> int:
        """etcd's current revision (what the apiserver reports as resourceVersion)."""
        status = self._etcdctl("endpoint", "status", "-w", "json")
        return int(json.loads(status)[0]["Status"]["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd at its current revision, so watches from older ones get 410 Gone.

        Only the apiserver with watch_cache=False passes this on; with the watch cache, old
        resourceVersions expire by the cache's own window instead.
        """
        revision = self.etcd_revision()
        self._etcdctl("compaction", "--physical", str(revision))
        return revision

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One admin request to the apiserver (JSON in and out); an answer of 400 or more is
        raised as urllib.error.HTTPError.

        Each thread keeps one connection open: a test's teardown empties and finalizes
        hundreds of namespaces with 9 requests each, and a TLS handshake per request was most
        of its time. A request other than POST that meets a connection the server closed
        (idle, or an apiserver restarted) is sent once more on a new one; a POST always goes
        on a new connection, so it is never sent twice.
        """
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        reused = method != "POST" and getattr(self._local, "conn", None) is not None
        while True:
            conn = self._connection(fresh=not reused)
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
            except (http.client.HTTPException, OSError):
                self._drop(conn)
                if not reused:
                    raise
                reused = False
                continue
            if resp.will_close or method == "POST":
                self._drop(conn)
            if resp.status >= 400:
                raise urllib.error.HTTPError(self.server + path, resp.status, resp.reason,
                                             resp.headers, io.BytesIO(payload))
            return json.loads(payload or b"null")

    def _connection(self, fresh: bool) -> http.client.HTTPSConnection:
        """This thread's open connection, or a new one (kept unless `fresh` is for a POST)."""
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is not None and not fresh and conn.sock is not None:
            return conn
        if conn is not None:
            self._drop(conn)
        if self._ssl_context is None:
            self._ssl_context = self._ssl()
        conn = http.client.HTTPSConnection(self.address, self.apiserver_port,
                                           context=self._ssl_context, timeout=30)
        with self._lock:
            self._connections.add(conn)
        self._local.conn = conn
        return conn

    def _drop(self, conn: http.client.HTTPSConnection) -> None:
        conn.close()
        with self._lock:
            self._connections.discard(conn)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None

    def close_connections(self) -> None:
        """Close every thread's kept connection (stop() does, before the apiserver goes)."""
        with self._lock:
            conns, self._connections = list(self._connections), set()
        for conn in conns:
            conn.close()

    def finalize_namespace(self, name: str) -> None:
        """Do what the namespace controller would: empty a deleted namespace and finalize it.

        There is no kube-controller-manager here, so a deleted namespace stays Terminating
        until this is called. Only the kinds configmirror and its tests create are emptied.
        """
        collections = [f"/api/v1/namespaces/{name}/{kind}"
                       for kind in ("configmaps", "events", "serviceaccounts", "secrets")]
        collections += [f"/apis/{group}/namespaces/{name}/{kind}" for group, kind in (
            ("rbac.authorization.k8s.io/v1", "roles"),
            ("rbac.authorization.k8s.io/v1", "rolebindings"),
            ("coordination.k8s.io/v1", "leases"))]
        for path in collections:
            self._ignore_missing(functools.partial(self.api, "DELETE", path))

        def finalize() -> None:
            ns = self.api("GET", f"/api/v1/namespaces/{name}")
            ns["spec"]["finalizers"] = []
            self.api("PUT", f"/api/v1/namespaces/{name}/finalize", ns)

        self._ignore_missing(finalize)

    # -- internals ----------------------------------------------------------------------------

    def _write_credentials(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir()
        key = pki / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True,
                       capture_output=True, timeout=60)
        self.token = secrets.token_hex(16)
        lines = [f'{self.token},admin,admin-uid,"system:masters"']
        for user, groups in self.users.items():
            self.tokens[user] = secrets.token_hex(16)
            line = f"{self.tokens[user]},{user},{user}-uid"
            lines.append(line + (f',"{",".join(groups)}"' if groups else ""))
        (self.dir / "tokens.csv").write_text("\n".join(lines) + "\n")

    def _start_etcd(self) -> None:
        self.etcd_port = free_port()
        peer = free_port()
        self._etcd = spawn([
            str(self.assets / "etcd"), "--name=configmirror-test",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_endpoint}",
            f"--advertise-client-urls={self.etcd_endpoint}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=configmirror-test=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true", "--log-level=warn",
        ], self.dir / "etcd.log")
        self._wait(lambda: self._http_ok(self.etcd_endpoint + "/health"), "etcd",
                   lambda: self._died(self._etcd, "etcd.log"))

    def _start_apiserver(self) -> None:
        flags = [
            f"--etcd-servers={self.etcd_endpoint}",
            f"--cert-dir={self.dir / 'pki'}",
            # The advertised address is the one the self-signed serving certificate names.
            f"--bind-address={self.address}", f"--advertise-address={self.address}",
            f"--secure-port={self.apiserver_port}",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
            f"--authorization-mode={self.authorization}",
            f"--token-auth-file={self.dir / 'tokens.csv'}",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={self.dir / 'pki' / 'sa.key'}",
            f"--service-account-signing-key-file={self.dir / 'pki' / 'sa.key'}",
            f"--audit-log-path={self.dir / 'audit.log'}",
            f"--audit-policy-file={self._audit_policy()}",
            "--audit-log-maxsize=0",
            "--v=0",
        ]
        if not self.service_account_admission:
            flags.append("--disable-admission-plugins=ServiceAccount")
        if not self.watch_cache:
            flags += ["--watch-cache=false", "--etcd-compaction-interval=0"]
        self._apiserver = spawn([str(self.assets / "kube-apiserver"), *flags,
                                 *self.extra_apiserver_flags], self.dir / "apiserver.log")
        self._wait(self._apiserver_ready, "kube-apiserver",
                   lambda: self._died(self._apiserver, "apiserver.log"))

    def _audit_policy(self) -> Path:
        """Audit every write (Metadata level), so tests can count the writes a client made."""
        policy = self.dir / "audit-policy.json"
        if not policy.exists():
            policy.write_text(json.dumps({
                "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata"}],
            }))
        return policy

    @property
    def audit_log(self) -> Path:
        """One JSON audit event per line, for every request the apiserver answered."""
        return self.dir / "audit.log"

    def audit_events(self, user: str | None = None) -> list[dict[str, Any]]:
        """The audit events so far (optionally only those of `user`)."""
        if not self.audit_log.exists():
            return []
        events = []
        with open(self.audit_log) as f:
            for line in f:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:  # a line being written right now
                    continue
                if user is None or event.get("user", {}).get("username") == user:
                    events.append(event)
        return events

    def _apiserver_ready(self) -> bool:
        if not self.ca_file.exists():
            return False
        try:
            req = urllib.request.Request(self.server + "/readyz",
                                         headers={"Authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(req, context=self._ssl(), timeout=5) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _kubeconfig_doc(self, token: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
            "clusters": [{"name": "envtest", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "envtest-user", "user": {"token": token}}],
            "contexts": [{"name": "envtest", "context": {
                "cluster": "envtest", "user": "envtest-user"}}],
        }

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(json.dumps(self._kubeconfig_doc(self.token)))

    def _etcdctl(self, *args: str) -> str:
        done = subprocess.run([str(self.etcdctl_binary), f"--endpoints={self.etcd_endpoint}",
                               *args], capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise ControlPlaneError(f"etcdctl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    @staticmethod
    def _wait(ready: Callable[[], bool], what: str, died: Callable[[], str | None]) -> None:
        try:
            wait_for(ready, START_TIMEOUT, f"{what} to be ready", interval=0.1, abort=died)
        except WaitTimeout as err:
            raise ControlPlaneError(str(err)) from None

    def _died(self, proc: subprocess.Popen[bytes] | None, log: str) -> str | None:
        if proc is None or proc.poll() is None:
            return None
        tail = (self.dir / log).read_text(errors="replace").strip().splitlines()[-15:]
        return f"exited with {proc.returncode}; last lines of {log}:\n" + "\n".join(tail)

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    @staticmethod
    def _ignore_missing(call: Callable[[], object]) -> None:
        try:
            call()
        except urllib.error.HTTPError as err:
            if err.code not in (404, 405):
                raise

