"""Member clusters for the fleet tests: more local control planes beside the home one.

The home cluster is the suite's own control plane (tests/conftest.py `session_cluster`); each
member is one more etcd + kube-apiserver (configmirror_testing.controlplane, started by
cluster.start_plane as the home one is: same binaries, certificates, ServiceAccount keys,
audit log), with a FaultProxy in front of its API server. What an operator is given for a
member (its cluster Secret's kubeconfig) goes through that proxy, so a test breaks the wire
to one member without touching the others or the home cluster; the test's own admin client
(`member.cluster`) talks to the API server directly and sees the member as it is.

    fleet = start_members(home)          # "b" and "c", started in parallel
    b = fleet.b
    home.core.create_namespaced_secret("configmirror", b.cluster_secret(labels={"env": "x"}))
    b.partition()                        # every connection through the proxy goes silent
    b.heal()
    with b.down(5):                      # kube-apiserver killed, started again 5 s later
        ...
    fleet.stop()

The kubeconfigs written here are self-contained (the CA inline, one context named after the
member), as a cluster Secret's would be: nothing in them points into this machine's files.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import ssl
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from configmirror.replication.clusters import CLUSTER_LABEL
from configmirror_testing.cluster import Cluster, Namespaces, start_plane, unique_name
from configmirror_testing.controlplane import ControlPlane, oldest
from configmirror_testing.faultproxy import FaultProxy
from configmirror_testing.objects import service_account_token, token_kubeconfig
from configmirror_testing.tools import require_tool

MEMBER_NAMES = ("b", "c")
# Where the operator reads cluster Secrets by default (Settings.operator_namespace).
OPERATOR_NAMESPACE = "configmirror"


class Member:
    """One member cluster: its control plane, an admin `cluster` straight to its API server,
    and `proxy` in front of that server, which `proxied_kubeconfig` (an operator's way in)
    goes through."""

    def __init__(self, name: str, plane: ControlPlane, keeper: ThreadPoolExecutor) -> None:
        self.name = name
        self.plane = plane
        # The thread that started the plane's processes, and starts its apiserver again: they
        # die with the thread that spawned them (controlplane.spawn: PR_SET_PDEATHSIG is per
        # thread), so that is one that lives as long as the member.
        self._keeper = keeper
        self.cluster = Cluster(plane.kubeconfig, plane)
        self.proxy = FaultProxy((plane.address, plane.apiserver_port)).start()
        self.apiserver_down = False
        try:
            self.proxied_kubeconfig = self._write_kubeconfig(
                "admin", plane.token, plane.dir / "kubeconfig-proxied")
            # The test's client through the proxy: what an operator's requests meet.
            self.proxied = Cluster(self.proxied_kubeconfig, plane)
        except BaseException:
            self.proxy.stop()
            raise

    def __repr__(self) -> str:
        return f"Member({self.name!r}, server={self.server}, proxied={self.proxy.url})"

    # -- addresses ----------------------------------------------------------------------------

    @property
    def server(self) -> str:
        """The API server itself (what `cluster` talks to)."""
        return self.plane.server

    @property
    def proxied_server(self) -> str:
        """The proxy in front of it (what `proxied_kubeconfig` names)."""
        return self.proxy.url

    # -- the cluster Secret -------------------------------------------------------------------

    def cluster_secret(self, name: str | None = None, labels: Mapping[str, str] | None = None,
                       namespace: str = OPERATOR_NAMESPACE, secret_name: str | None = None,
                       kubeconfig: Path | str | None = None) -> dict[str, Any]:
        """The JSON of a cluster Secret for the home cluster: labelled configmirror.io/cluster
        = `name` (the member's own name by default) plus `labels`, holding under `kubeconfig`
        the proxied kubeconfig (admin; or `kubeconfig`, a path or the text, e.g. one of
        `token_kubeconfig`'s). Named `cluster-<name>` unless `secret_name`."""
        name = self.name if name is None else name
        if kubeconfig is None:
            kubeconfig = self.proxied_kubeconfig
        text = kubeconfig.read_text() if isinstance(kubeconfig, Path) else kubeconfig
        return {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name or f"cluster-{name}", "namespace": namespace,
                         "labels": {**(labels or {}), CLUSTER_LABEL: name}},
            "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
        }

    def token_kubeconfig(self, namespace: str, sa: str, seconds: int = 3600,
                         path: Path | None = None) -> Path:
        """A proxied kubeconfig holding only a TokenRequest token (valid `seconds`, 600 at
        least) of ServiceAccount `namespace/sa` in this member; the namespace and the account
        are created if missing. The account's permissions are the test's to grant."""
        with contextlib.suppress(client.ApiException):  # 409: it exists
            self.cluster.core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        try:
            self.cluster.core.create_namespaced_service_account(
                namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=sa)))
        except client.ApiException as err:
            if err.status != 409:
                raise
        token = service_account_token(self.cluster.core, namespace, sa, create=False,
                                      expiration_seconds=seconds)
        path = path or self.plane.dir / f"kubeconfig-{unique_name(f'{namespace}-{sa}')}"
        return token_kubeconfig(self.proxied_kubeconfig, token, path)

    def reachable(self, proxied: bool = True, timeout: float = 2.0) -> bool:
        """Whether one GET /readyz as the admin, on a new connection through the proxy (or
        straight to the API server: `proxied=False`), is answered 200 within `timeout`."""
        url = (self.proxied_server if proxied else self.server) + "/readyz"
        request = urllib.request.Request(
            url, headers={"Authorization": f"Bearer {self.plane.token}"})
        context = ssl.create_default_context(cafile=str(self.plane.ca_file))
        try:
            with urllib.request.urlopen(request, context=context, timeout=timeout) as answer:
                return bool(answer.status == 200)
        except (OSError, http.client.HTTPException):  # URLError and timeouts are OSErrors
            return False

    # -- faults -------------------------------------------------------------------------------

    def partition(self) -> int:
        """Cut the member off from whoever uses the proxy, silently: every open connection
        stops carrying bytes (and stays open), new ones are accepted and never answered.
        Returns how many connections went silent. `heal` undoes it for new connections."""
        self.proxy.answer_new(False)
        return self.proxy.silent_drop()

    def heal(self) -> None:
        """The proxy passes everything again (no latency, no cap, new connections answered);
        connections silenced before stay silent, as after a real partition."""
        self.proxy.heal()

    def stop_apiserver(self, kill: bool = True) -> None:
        """Kill the member's kube-apiserver (SIGTERM and wait, unless `kill`); etcd stays."""
        self.plane.stop_apiserver(kill=kill)
        self.apiserver_down = True

    def start_apiserver(self) -> None:
        """Start it again on the same port, with the same etcd and certificates; returns once
        it is ready (so clients reconnect to the same address, directly or via the proxy)."""
        self._keeper.submit(self.plane.start_apiserver).result()
        self.apiserver_down = False

    @contextlib.contextmanager
    def down(self, seconds: float = 0.0, kill: bool = True) -> Iterator[None]:
        """The API server stopped for the body and until `seconds` after it stopped, then
        started again (at once if the body raises)."""
        self.stop_apiserver(kill)
        stopped = time.monotonic()
        try:
            yield
        except BaseException:
            self.start_apiserver()
            raise
        time.sleep(max(0.0, seconds - (time.monotonic() - stopped)))
        self.start_apiserver()

    def restore(self) -> list[str]:
        """Undo what a test left broken: the API server started again if it is down, the
        proxy healed and every connection through it closed. Returns what it fixed."""
        fixed = []
        if self.apiserver_down:
            self.start_apiserver()
            fixed.append("started its kube-apiserver again")
        if self.proxy.delay or self.proxy.rate or not self.proxy.answering or \
                self.proxy.dropping_answers:
            fixed.append("healed its proxy")
        self.proxy.heal()
        self.proxy.reset()
        return fixed

    # -- what tests read ----------------------------------------------------------------------

    def namespaces(self, prefix: str) -> Namespaces:
        """A factory of namespaces in this member (the caller cleans them up)."""
        return Namespaces(self.cluster, prefix, source_labels={})

    def memory(self) -> dict[str, int]:
        """Resident memory of its processes in MiB: {"etcd": ..., "kube-apiserver": ...}."""
        names = ("etcd", "kube-apiserver")
        return {name: _rss_mib(pid) for name, pid in zip(names, self.plane.pids, strict=False)}

    def stop(self) -> None:
        """Stop the proxy, then the control plane (its processes reaped, its folder gone)."""
        try:
            self.proxy.stop()
        finally:
            try:
                self.plane.stop()
            finally:
                self._keeper.shutdown()

    # -- internals ----------------------------------------------------------------------------

    def direct_kubeconfig(self) -> Path:
        """A self-contained admin kubeconfig straight to the API server, not through the
        proxy (benchmarks: the proxy's copying would be measured too)."""
        return self._write_kubeconfig("admin", self.plane.token,
                                      self.plane.dir / "kubeconfig-direct", self.server)

    def _write_kubeconfig(self, user: str, token: str, path: Path,
                          server: str | None = None) -> Path:
        """A self-contained kubeconfig with one context, `name`, through the proxy (or to
        `server`)."""
        authority = base64.b64encode(self.plane.ca_file.read_bytes()).decode()
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": self.name,
            "clusters": [{"name": self.name, "cluster": {
                "server": server or self.proxy.url,
                "certificate-authority-data": authority}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": user}}],
        }))
        return path


class Members:
    """The member clusters of a session, by name (`members["b"]`, `members.b`)."""

    def __init__(self, home: Cluster, members: Sequence[Member],
                 startup_seconds: float = 0.0) -> None:
        self.home = home
        self.by_name = {m.name: m for m in members}
        self.startup_seconds = startup_seconds  # how long starting them all took

    def __getitem__(self, name: str) -> Member:
        return self.by_name[name]

    def __iter__(self) -> Iterator[Member]:
        return iter(self.by_name.values())

    def __len__(self) -> int:
        return len(self.by_name)

    @property
    def b(self) -> Member:
        return self.by_name["b"]

    @property
    def c(self) -> Member:
        return self.by_name["c"]

    def restore(self) -> dict[str, list[str]]:
        """Member.restore for each; what each needed, for the members that needed any."""
        fixed = {m.name: m.restore() for m in self}
        return {name: what for name, what in fixed.items() if what}

    def stop(self) -> None:
        for member in self:
            member.stop()


def start_members(home: Cluster, names: Sequence[str] = MEMBER_NAMES,
                  **options: Any) -> Members:
    """Control planes named `names`, started in parallel (start_plane's `options`, the same
    for each), each behind its own FaultProxy. The caller stops them (Members.stop); if one
    fails to start, those that did are stopped before the error propagates."""
    # Found (or built, or the test skipped) once, here, rather than in each thread.
    require_tool("controlplane-oldest" if oldest() else "controlplane")
    began = time.monotonic()
    keepers = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"member-{name}")
               for name in names]
    futures = [keeper.submit(start_plane, **options) for keeper in keepers]
    planes: list[ControlPlane | None] = []
    error: BaseException | None = None
    for future in futures:
        try:
            planes.append(future.result())
        except BaseException as err:  # pytest's skip is one, too
            planes.append(None)
            error = error or err
    members: list[Member] = []
    try:
        if error is not None:
            raise error
        for name, plane, keeper in zip(names, planes, keepers, strict=True):
            assert plane is not None
            members.append(Member(name, plane, keeper))
    except BaseException:
        for member in members:
            member.proxy.stop()
        for plane, keeper in zip(planes, keepers, strict=True):
            if plane is not None:
                plane.stop()
            keeper.shutdown()
        raise
    return Members(home, members, time.monotonic() - began)


def _rss_mib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0
