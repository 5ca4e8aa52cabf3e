"""Peers: configmirror and other replication operators side by side, on one control plane.

    python bench_peers.py                                   # configmirror and the Go writer
    python bench_peers.py --peer projection=BIN --peer-crds projection=DIR --shape mirrors
    python bench_peers.py --peer kubernetes-replicator=BIN --peer trust-manager=BIN \\
        --peer-crds trust-manager=FILE --namespaces 1000 --rounds 3

The repository neither builds nor fetches a peer: each is given by the path of a binary the
user built with the upstream project's own instructions, at the version measured here:
  - projection v0.3.2 (github.com/projection-operator/projection); its CRDs are
    config/crd/bases/projection.sh_projections.yaml and ..._clusterprojections.yaml of that
    tag (`--peer-crds projection=` a folder holding both, or each file, the flag twice);
  - kubernetes-replicator v2.12.4 (github.com/mittwald/kubernetes-replicator); no CRDs;
  - trust-manager v0.25.0 (github.com/cert-manager/trust-manager); its CRD is
    deploy/crds/trust.cert-manager.io_bundles.yaml of that module.
For example, with one user's builds under P=~/.cache/configmirror/peers and trust-manager's
module under M=~/go/pkg/mod/github.com/cert-manager/trust-manager@v0.25.0:
    --peer projection=$P/projection-v0.3.2/projection --peer-crds projection=/tmp/crds
    --peer kubernetes-replicator=$P/kubernetes-replicator-v2.12.4/kubernetes-replicator
    --peer trust-manager=$P/trust-manager-v0.25.0/trust-manager
    --peer-crds trust-manager=$M/deploy/crds/trust.cert-manager.io_bundles.yaml

Shapes (`--shape`, repeatable; default: every shape the given peers take part in, `ours`
without a peer):
  - mirrors (configmirror, projection): `--mirrors` sources in one namespace, each to a
    namespace of its own (a Projection per mirror; `replicate-to: <namespace>`). Cold start
    to the last copy, RSS in sync, then `--edits` sources edited one after another: edit ->
    its copy, p50/p99.
  - fanout (configmirror, projection): one source to each of `--fanouts` namespaces (a
    ClusterProjection's destination list; `replicate-to: a,b,...`): cold start to the last
    copy, then `--fanout-edits` edits: edit -> the last copy holding it, p50/p99.
  - labels (configmirror, projection): one source selecting namespaces by label (a
    ClusterProjection's namespaceSelector; `replicate-to-matching`); `--labels` namespaces
    labelled one after another: label -> its copy, p50/p95.
  - ours (configmirror, kubernetes-replicator, trust-manager; the Go client-go writer as
    reference): one source to `--namespaces` labelled namespaces (`replicate-to-matching`; a
    Bundle's namespaceSelector): cold start to the last copy and the write rate, against the
    Go writer's for the same creates; an edit -> the last copy; as many new namespaces
    created at once -> their last copy; `--repairs` copies changed by hand, one after
    another -> restored, p50.

Every operator starts cold on objects of its own (fresh namespaces) and is stopped (SIGTERM)
before the next starts; `--rounds` repeats each shape, alternating the order, and the table
shows medians. configmirror runs as every benchmark runs it (`--kube-api-qps 0`); the peers
run as they ship: kubernetes-replicator and trust-manager keep client-go's fixed client-side
limit (5 requests/s, burst 10), which no flag of theirs lifts. To measure their code rather
than that limit, build them from a copy of their source whose rest.Config gets QPS -1 (the
figures in docs/performance.md say how) and name them with `--limit-lifted NAME`. Copies
are seen by a watch of this process, so every figure is on one clock. A wait past
`--deadline` (or, for a repair, `--repair-timeout`) is reported with the figure reached so
far, and that operator's run of the shape ends there.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from configmirror.client.kube import ApiError, Kube
from configmirror.replication.model import REPLICA_LABEL
from configmirror.replication.spec import REPLICATE_TO, REPLICATE_TO_MATCHING
from configmirror_testing.controlplane import free_port, spawn, stop_process
from harness import (
    RESULTS,
    Baselines,
    BenchCluster,
    Session,
    common_args,
    cpu_of,
    load_average,
    machine,
    parallel,
    peak_rss_of,
    percentile,
    rss_of,
    save,
)

PROJECTION, REPLICATOR, TRUST = "projection", "kubernetes-replicator", "trust-manager"
CONFIGMIRROR, GO = "configmirror", "go-writer"
PEER_SHAPES = {PROJECTION: ("mirrors", "fanout", "labels"), REPLICATOR: ("ours",),
               TRUST: ("ours",)}
SHAPES = ("mirrors", "fanout", "labels", "ours")
RUN_LABEL = "bench-peers"   # on a namespace: the run whose selector picks it
PAYLOAD = "x" * 600         # every source's bulk, so copies weigh alike
CM = "/api/v1/namespaces/{}/configmaps"
MERGE = "application/merge-patch+json"
PROJECTIONS = "/apis/projection.sh/v1/projections"
CLUSTER_PROJECTIONS = "/apis/projection.sh/v1/clusterprojections"
BUNDLES = "/apis/trust.cert-manager.io/v1alpha1/bundles"
RATE_LIMITED = "client-go's fixed 5 requests/s, burst 10 (no flag)"
LIMIT_LIFTED = "client-go's limit lifted (rest.Config QPS -1, a local build of its source)"


class Missed(Exception):
    """A wait ran past its deadline; the message holds the figure reached so far."""


# -- what a benchmark sees: the copies, by a watch of its own ----------------------------------


class CopyWatch:
    """Watches ConfigMaps (a label or field selector) in the namespaces `counted` admits, and
    records when each copy appeared and when it came to hold each value of its version key."""

    def __init__(self, kube: Kube, selector: dict[str, str], counted: Callable[[str], bool],
                 version: Callable[[dict[str, str]], str]) -> None:
        self._kube = kube
        self._selector = selector
        self._counted = counted
        self._version = version
        self._lock = threading.Lock()
        self.added: dict[str, float] = {}                  # key -> first seen
        self.current: dict[str, tuple[str, float]] = {}    # key -> (version, since when)
        self.holding: Counter[str] = Counter()             # version -> copies holding it now
        self.last_change: dict[str, float] = {}            # version -> latest copy to take it
        self.last_event = time.monotonic()
        self._stop = threading.Event()
        self._stream: Any = None
        self._rv = self._list()
        self._thread = threading.Thread(target=self._run, name="copy-watch")
        self._thread.start()

    def _list(self) -> str:
        body = self._kube.request("list", "/api/v1/configmaps", self._selector)
        for item in body["items"]:
            self._on("MODIFIED", item)
        return str(body["metadata"]["resourceVersion"])

    def _run(self) -> None:
        relist = False
        while not self._stop.is_set():
            try:
                if relist:
                    self._rv = self._list()
                    relist = False
                self._stream = self._kube.watch("/api/v1/configmaps", {
                    **self._selector, "resourceVersion": self._rv,
                    "allowWatchBookmarks": "true", "timeoutSeconds": 600}, read_timeout=660)
                for event in self._stream:
                    if event["type"] == "ERROR":  # 410: watch again from a fresh list
                        relist = True
                        break
                    self._rv = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._on(event["type"], event["object"])
            except Exception:
                if not self._stop.is_set():
                    relist = True  # what happened meanwhile may be out of the watch's reach
                    time.sleep(0.2)

    def _on(self, kind: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        if not self._counted(namespace):
            return
        key = f"{namespace}/{name}"
        value = self._version(obj.get("data") or {})
        with self._lock:
            self.last_event = now
            before = self.current.get(key)
            if kind == "DELETED":
                if before is not None:
                    self.holding[before[0]] -= 1
                    del self.current[key]
                return
            self.added.setdefault(key, now)
            if before is not None and before[0] == value:
                return
            if before is not None:
                self.holding[before[0]] -= 1
            self.current[key] = (value, now)
            self.holding[value] += 1
            self.last_change[value] = now

    def count(self) -> int:
        with self._lock:
            return len(self.current)

    def held(self, key: str, value: str, after: float) -> float | None:
        """When `key` came to hold `value`, if it did after `after` and holds it now."""
        with self._lock:
            now = self.current.get(key)
        return now[1] if now is not None and now[0] == value and now[1] >= after else None

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=10)


def version_key(key: str) -> Callable[[dict[str, str]], str]:
    return lambda data: data.get(key, "")


def pem_body(data: dict[str, str]) -> str:
    """A trust-manager target's certificates, whitespace aside (it re-encodes what it reads)."""
    return "".join(data.get("bundle.pem", "").split())


# -- the operators under test ---------------------------------------------------------------


class Running(Protocol):
    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int: ...

    def stop(self, timeout: float = 30, abort_timeout: float = 10) -> int: ...


class PeerProcess:
    """A peer's binary, logging to RESULTS/peer-NAME.log and dying with this process."""

    def __init__(self, name: str, args: list[str]) -> None:
        self.name = name
        RESULTS.mkdir(parents=True, exist_ok=True)
        self.proc = spawn(args, RESULTS / f"peer-{name}.log")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 30, abort_timeout: float = 10) -> int:
        """SIGTERM, then SIGKILL after `timeout`."""
        return stop_process(self.proc, timeout)


@dataclass
class Workload:
    """One source of the `ours` shape as a contender sees it: how to edit it and read a copy."""

    name: str            # the source
    copy: str            # its copies' name
    source_key: str      # the data key an edit writes
    copy_key: str        # the data key a copy carries it under
    value: str           # what the copies should hold now (as `version` reads it)
    version: Callable[[dict[str, str]], str]
    next_value: Callable[[int], tuple[str, str]]  # edit i -> (source data, copy version)


@dataclass
class Contender:
    """One operator: how it starts, and the objects that ask it for each shape's copies."""

    name: str
    binary: Path | None = None   # None: configmirror itself
    note: str = ""
    certs: Path | None = None    # trust-manager's folder of PEMs and webhook keys

    def start(self, session: Session, workers: int, trust_namespace: str) -> Running:
        kubeconfig = session.cluster.kubeconfig
        if self.name == CONFIGMIRROR:
            operator: Running = session.operator(workers)
            return operator
        assert self.binary is not None
        if self.name == PROJECTION:
            args = ["-kubeconfig", kubeconfig, "-leader-elect=false",
                    "-health-probe-bind-address=0", "-metrics-bind-address=0",
                    "-zap-devel=false", "-zap-log-level=error"]
        elif self.name == REPLICATOR:
            args = ["-kubeconfig", kubeconfig, "-status-addr", "127.0.0.1:0",
                    "-log-level", "error", "-replicate-secrets=false",
                    "-replicate-roles=false", "-replicate-role-bindings=false",
                    "-replicate-service-accounts=false"]
        else:
            assert self.certs is not None
            args = ["--kubeconfig", kubeconfig, "--leader-elect=false",
                    "--trust-namespace", trust_namespace, "--metrics-port", "0",
                    "--readiness-probe-port", "0", "--webhook-host", "127.0.0.1",
                    "--webhook-port", str(free_port()),
                    "--webhook-certificate-dir", str(self.certs), "--log-level", "1"]
        return PeerProcess(self.name, [str(self.binary), *args])

    # Each shape's objects, created before the operator starts.

    def mirrors(self, kube: Kube, source_ns: str, targets: list[str]) -> None:
        """Source m-i to targets[i] alone."""
        def one(i: int) -> None:
            name = f"m-{i:04d}"
            if self.name == CONFIGMIRROR:
                create_source(kube, source_ns, name, {REPLICATE_TO: targets[i]})
            else:
                create_source(kube, source_ns, name, {"projection.sh/projectable": "true"})
                kube.request("create", f"/apis/projection.sh/v1/namespaces/{targets[i]}/"
                             "projections", body={
                                 "apiVersion": "projection.sh/v1", "kind": "Projection",
                                 "metadata": {"name": "mirror", "namespace": targets[i]},
                                 "spec": {"source": {"kind": "ConfigMap", "name": name,
                                                     "namespace": source_ns},
                                          "overlay": {"labels": {REPLICA_LABEL: "true"}}}})
        parallel(one, range(len(targets)), 16)

    def fanout(self, kube: Kube, source_ns: str, name: str,
               targets: list[str] | None, selector: dict[str, str] | None) -> None:
        """One source to a list of namespaces, or to those `selector` matches."""
        if self.name == CONFIGMIRROR:
            spec = ({REPLICATE_TO: ",".join(targets)} if targets is not None else
                    {REPLICATE_TO_MATCHING: ",".join(f"{k}={v}"
                                                     for k, v in (selector or {}).items())})
            create_source(kube, source_ns, name, spec)
            return
        create_source(kube, source_ns, name, {"projection.sh/projectable": "true"})
        destination: dict[str, Any] = ({"namespaces": targets} if targets is not None else
                                       {"namespaceSelector": {"matchLabels": selector}})
        kube.request("create", CLUSTER_PROJECTIONS, body={
            "apiVersion": "projection.sh/v1", "kind": "ClusterProjection",
            "metadata": {"name": name},
            "spec": {"source": {"kind": "ConfigMap", "name": name, "namespace": source_ns},
                     "destination": destination,
                     "overlay": {"labels": {REPLICA_LABEL: "true"}}}})

    def ours(self, kube: Kube, source_ns: str, run: str) -> Workload:
        """One source to every namespace labelled RUN_LABEL=run."""
        if self.name != TRUST:
            spec = ({REPLICATE_TO_MATCHING: f"{RUN_LABEL}={run}"} if self.name == CONFIGMIRROR
                    else {"replicator.v1.mittwald.de/replicate-to-matching":
                          f"{RUN_LABEL}={run}"})
            create_source(kube, source_ns, "shared", spec)
            return Workload("shared", "shared", "v", "v", "0", version_key("v"),
                            lambda i: (f"e{i}", f"e{i}"))
        assert self.certs is not None
        first = certificate(self.certs, 0)
        kube.request("create", CM.format(source_ns), body={
            "metadata": {"name": "bench-ca"}, "data": {"ca.crt": first}})
        kube.request("create", BUNDLES, body={
            "apiVersion": "trust.cert-manager.io/v1alpha1", "kind": "Bundle",
            "metadata": {"name": run},
            "spec": {"sources": [{"configMap": {"name": "bench-ca", "key": "ca.crt"}}],
                     "target": {"configMap": {"key": "bundle.pem", "metadata": {
                         "labels": {REPLICA_LABEL: "true"}}},
                         "namespaceSelector": {"matchLabels": {RUN_LABEL: run}}}}})
        certs = self.certs

        def next_value(i: int) -> tuple[str, str]:
            pem = certificate(certs, i + 1)
            return pem, "".join(pem.split())
        return Workload("bench-ca", run, "ca.crt", "bundle.pem",
                        "".join(first.split()), pem_body, next_value)

    def remove_objects(self, kube: Kube) -> None:
        """Delete the custom objects of a run, finalizers and all (the operator is stopped)."""
        collections = {PROJECTION: (PROJECTIONS, CLUSTER_PROJECTIONS), TRUST: (BUNDLES,)}
        for collection in collections.get(self.name, ()):
            items = kube.request("list", collection)["items"]
            parallel(functools.partial(force_delete, kube, collection), items, 16)


def create_source(kube: Kube, namespace: str, name: str, annotations: dict[str, str]) -> None:
    kube.request("create", CM.format(namespace), body={
        "metadata": {"name": name, "annotations": annotations},
        "data": {"payload": PAYLOAD, "v": "0"}})


def force_delete(kube: Kube, collection: str, item: dict[str, Any]) -> None:
    meta = item["metadata"]
    path = (collection if "namespace" not in meta else
            collection.replace("/projections", f"/namespaces/{meta['namespace']}/projections"))
    path = f"{path}/{meta['name']}"
    try:
        if meta.get("finalizers"):
            kube.request("patch", path, body={"metadata": {"finalizers": None}},
                         content_type=MERGE)
        kube.request("delete", path)
    except ApiError as err:
        if err.status != 404:
            raise


def certificate(folder: Path, i: int) -> str:
    """A fresh self-signed P-256 certificate, valid 30 days (trust-manager's sources must be)."""
    key, out = folder / f"source-{i}.key", folder / f"source-{i}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "30", "-subj",
                    f"/CN=bench-{i}", "-keyout", str(key), "-out", str(out)],
                   check=True, capture_output=True, timeout=60)
    return out.read_text()


def webhook_keys(folder: Path) -> None:
    """The pair trust-manager's webhook server insists on (nothing calls it here)."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "30", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(folder / "tls.key"), "-out", str(folder / "tls.crt")],
                   check=True, capture_output=True, timeout=60)


# -- one operator's pass over one shape --------------------------------------------------------


@dataclass
class Bench:
    """The cluster, the run counter and the flags every pass reads."""

    session: Session
    args: argparse.Namespace
    runs: int = 0
    namespaces: list[str] = field(default_factory=list)  # the current run's, to delete

    @property
    def kube(self) -> Kube:
        return self.session.cluster.kube

    def run_name(self) -> str:
        self.runs += 1
        return f"peers-{self.runs:03d}"

    def create_namespaces(self, names: list[str], labels: dict[str, str] | None = None
                          ) -> float:
        self.namespaces.extend(names)
        return parallel(lambda name: self.kube.request(
            "create", "/api/v1/namespaces",
            body={"metadata": {"name": name, "labels": labels or {}}}), names, 16)

    def clear(self, contender: Contender | None) -> None:
        """Delete the run's custom objects, ConfigMaps and namespaces."""
        if contender is not None:
            contender.remove_objects(self.kube)
        plane = self.session.cluster.plane

        def remove(name: str) -> None:
            self.kube.request("delete", f"/api/v1/namespaces/{name}")
            if plane is not None:  # no namespace controller here: empty and finalize it
                plane.finalize_namespace(name)
        parallel(remove, self.namespaces, 16)
        self.namespaces = []


def until(check: Callable[[], bool], deadline: float, what: Callable[[], str],
          process: Running | None = None, interval: float = 0.01) -> None:
    """Poll `check` until true; raise Missed (saying `what()` reached so far) past the
    deadline, or at once if the operator exits."""
    end = time.monotonic() + deadline
    while not check():
        exited = None if process is None else process.proc.poll()
        if exited is not None:
            raise Missed(f"exited with {exited} ({what()})")
        if time.monotonic() > end:
            raise Missed(f"not within {deadline:.0f} s ({what()})")
        time.sleep(interval)


def wait_held(watch: CopyWatch, key: str, value: str, after: float, deadline: float,
              process: Running) -> float:
    """When copy `key` came to hold `value` (after `after`)."""
    until(lambda: watch.held(key, value, after) is not None, deadline,
          lambda: f"{key} holds {watch.current.get(key, ('nothing',))[0][:20]!r}", process,
          0.002)
    return watch.held(key, value, after) or after


def wait_holding(watch: CopyWatch, value: str, count: int, deadline: float,
                 process: Running) -> float:
    """When the last of `count` copies came to hold `value`."""
    until(lambda: watch.holding[value] >= count, deadline,
          lambda: f"{watch.holding[value]} of {count} copies hold the edit", process, 0.005)
    return watch.last_change[value]


def wait_added(watch: CopyWatch, key: str, deadline: float, process: Running) -> float:
    """When copy `key` appeared."""
    until(lambda: key in watch.added, deadline,
          lambda: f"{len(watch.added)} copies, none as {key}", process, 0.002)
    return watch.added[key]


def settle(watch: CopyWatch, quiet: float = 1.0, deadline: float = 30) -> None:
    """Wait until no copy has changed for `quiet` seconds (a peer's in-sync state)."""
    end = time.monotonic() + deadline
    while time.monotonic() - watch.last_event < quiet and time.monotonic() < end:
        time.sleep(0.1)


def in_sync(result: dict[str, Any], process: Running) -> None:
    result["rss_mib"] = rss_of(process.pid) / 2**20
    result["peak_rss_mib"] = peak_rss_of(process.pid) / 2**20


def converge(bench: Bench, watch: CopyWatch, process: Running, started: float, total: int,
             result: dict[str, Any]) -> None:
    """Cold start -> `total` copies; the time, the rate from the first copy to the last, the
    operator's CPU so far; then its RSS once the copies are quiet."""
    until(lambda: watch.count() >= total, bench.args.deadline,
          lambda: f"{watch.count()} of {total} copies", process)
    times = sorted(watch.added.values())
    result["converge_s"] = times[-1] - started
    span = times[-1] - times[0]
    result["rate"] = total / span if span > 0 else None
    result["cpu_s"] = cpu_of(process.pid)
    settle(watch)
    in_sync(result, process)


def edit(kube: Kube, namespace: str, name: str, data: dict[str, str]) -> float:
    """Patch a ConfigMap's data; returns when the patch was sent."""
    sent = time.monotonic()
    kube.request("patch", f"{CM.format(namespace)}/{name}", body={"data": data},
                 content_type=MERGE)
    return sent


def pass_mirrors(bench: Bench, contender: Contender, result: dict[str, Any]) -> None:
    run, count = bench.run_name(), bench.args.mirrors
    source_ns, targets = f"{run}-src", [f"{run}-t{i:04d}" for i in range(count)]
    bench.create_namespaces([source_ns, *targets])
    contender.mirrors(bench.kube, source_ns, targets)
    with running(bench, contender, source_ns, {"labelSelector": f"{REPLICA_LABEL}=true"},
                 run, version_key("v")) as (watch, process, started):
        converge(bench, watch, process, started, count, result)
        latencies = result.setdefault("edit_s", [])
        for i in range(min(bench.args.edits, count)):
            key, value = f"{targets[i]}/m-{i:04d}", f"e{i}"
            sent = edit(bench.kube, source_ns, f"m-{i:04d}", {"v": value})
            held = wait_held(watch, key, value, sent, bench.args.deadline, process)
            latencies.append(held - sent)


def pass_fanout(bench: Bench, contender: Contender, result: dict[str, Any], count: int
                ) -> None:
    run = bench.run_name()
    source_ns, targets = f"{run}-src", [f"{run}-t{i:04d}" for i in range(count)]
    bench.create_namespaces([source_ns, *targets])
    contender.fanout(bench.kube, source_ns, run, targets, None)
    with running(bench, contender, source_ns, {"fieldSelector": f"metadata.name={run}"},
                 run, version_key("v")) as (watch, process, started):
        converge(bench, watch, process, started, count, result)
        latencies = result.setdefault("edit_s", [])
        for i in range(bench.args.fanout_edits):
            value = f"e{i}"
            sent = edit(bench.kube, source_ns, run, {"v": value})
            latencies.append(wait_holding(watch, value, count, bench.args.deadline, process)
                             - sent)


def pass_labels(bench: Bench, contender: Contender, result: dict[str, Any]) -> None:
    run, count = bench.run_name(), bench.args.labels
    source_ns, targets = f"{run}-src", [f"{run}-t{i:04d}" for i in range(count)]
    selector = {RUN_LABEL: run}
    bench.create_namespaces([source_ns, *targets])
    bench.create_namespaces([f"{run}-warm"], selector)  # its copy says the operator is up
    contender.fanout(bench.kube, source_ns, run, None, selector)
    with running(bench, contender, source_ns, {"fieldSelector": f"metadata.name={run}"},
                 run, version_key("v")) as (watch, process, started):
        converge(bench, watch, process, started, 1, result)
        latencies = result.setdefault("label_s", [])
        for name in targets:
            labelled = time.monotonic()
            bench.kube.request("patch", f"/api/v1/namespaces/{name}",
                               body={"metadata": {"labels": selector}}, content_type=MERGE)
            latencies.append(wait_added(watch, f"{name}/{run}", bench.args.deadline, process)
                             - labelled)
        settle(watch)
        in_sync(result, process)


def pass_ours(bench: Bench, contender: Contender, result: dict[str, Any]) -> None:
    run, count = bench.run_name(), bench.args.namespaces
    source_ns = f"{run}-src"
    selector = {RUN_LABEL: run}
    bench.create_namespaces([source_ns])
    bench.create_namespaces([f"{run}-t{i:04d}" for i in range(count)], selector)
    work = contender.ours(bench.kube, source_ns, run)
    with running(bench, contender, source_ns, {"fieldSelector": f"metadata.name={work.copy}"},
                 run, work.version) as (watch, process, started):
        converge(bench, watch, process, started, count, result)
        data, value = work.next_value(0)
        sent = edit(bench.kube, source_ns, work.name, {work.source_key: data})
        result["edit_last_s"] = wait_holding(watch, value, count, bench.args.deadline,
                                             process) - sent
        work.value = value

        fresh = [f"{run}-n{i:04d}" for i in range(count)]
        created = time.monotonic()
        result["create_namespaces_s"] = bench.create_namespaces(fresh, selector)
        until(lambda: watch.count() >= 2 * count, bench.args.deadline,
              lambda: f"{watch.count() - count} of {count} new namespaces' copies", process)
        result["new_namespaces_s"] = max(watch.added[f"{ns}/{work.copy}"]
                                         for ns in fresh) - created
        settle(watch)
        in_sync(result, process)  # now holding 2 x --namespaces copies

        repairs = result.setdefault("repair_s", [])
        for i in range(min(bench.args.repairs, count)):
            key = f"{run}-t{i:04d}/{work.copy}"
            drifted = edit(bench.kube, f"{run}-t{i:04d}", work.copy,
                           {work.copy_key: f"drift-{i}"})
            try:
                held = wait_held(watch, key, work.value, drifted, bench.args.repair_timeout,
                                 process)
            except Missed:
                result["not_repaired"] = (f"a copy changed by hand was not repaired within "
                                          f"{bench.args.repair_timeout:.0f} s")
                break
            repairs.append(held - drifted)


class running:  # noqa: N801 (a context manager read as a phrase: `with running(...)`)
    """Start the contender with a watch on its copies; on exit stop both and clear the run."""

    def __init__(self, bench: Bench, contender: Contender, source_ns: str,
                 selector: dict[str, str], run: str,
                 version: Callable[[dict[str, str]], str]) -> None:
        self._bench, self._contender = bench, contender
        self._source_ns, self._selector, self._run = source_ns, selector, run
        self._version = version
        self._watch: CopyWatch | None = None
        self._process: Running | None = None

    def __enter__(self) -> tuple[CopyWatch, Running, float]:
        source_ns, prefix = self._source_ns, f"{self._run}-"
        self._watch = CopyWatch(self._bench.kube, self._selector,
                                lambda ns: ns.startswith(prefix) and ns != source_ns,
                                self._version)
        started = time.monotonic()
        self._process = self._contender.start(self._bench.session, self._bench.args.workers,
                                               source_ns)
        return self._watch, self._process, started

    def __exit__(self, *_: object) -> None:
        try:
            if self._process is not None:
                self._process.stop()
        finally:
            if self._watch is not None:
                self._watch.stop()
            self._bench.clear(self._contender)


def go_writer(bench: Bench, result: dict[str, Any]) -> None:
    """The reference for `ours`: the Go client-go writer creating the same copies at the
    operator's concurrency, seen by the same kind of watch."""
    run, count = bench.run_name(), bench.args.namespaces
    source_ns = f"{run}-src"
    targets = [f"{run}-t{i:04d}" for i in range(count)]
    bench.create_namespaces(targets)
    bodies = [{"metadata": {"name": "shared", "namespace": ns,
                            "labels": {REPLICA_LABEL: "true"}},
               "data": {"payload": PAYLOAD, "v": "0"}} for ns in targets]
    baselines = Baselines(bench.session, bodies, bench.args.workers, "peers")
    watch = CopyWatch(bench.kube, {"fieldSelector": "metadata.name=shared"},
                      lambda ns: ns.startswith(f"{run}-") and ns != source_ns,
                      version_key("v"))
    try:
        started = time.monotonic()
        written = baselines.go("create", bench.args.workers)
        until(lambda: watch.count() >= count, bench.args.deadline,
              lambda: f"{watch.count()} of {count} copies")
        times = sorted(watch.added.values())
        result["converge_s"] = times[-1] - started
        span = times[-1] - times[0]
        result["rate"] = count / span if span > 0 else None
        result["audit_rate"] = written.rate
        result["cpu_s"] = written.cpu_seconds
    finally:
        watch.stop()
        bench.clear(None)


# -- the table ----------------------------------------------------------------------------------

# (result key, row label, scale, format), per shape.
ROWS: dict[str, list[tuple[str, str, float, str]]] = {
    "mirrors": [("converge_s", "cold start -> last copy, s", 1, ".2f"),
                ("rate", "copies/s, first to last", 1, ".0f"),
                ("cpu_s", "CPU, start -> last copy, s", 1, ".2f"),
                ("rss_mib", "RSS in sync, MiB", 1, ".0f"),
                ("edit_p50", "edit -> copy p50, ms", 1000, ".0f"),
                ("edit_p99", "edit -> copy p99, ms", 1000, ".0f")],
    "fanout": [("converge_s", "cold start -> last copy, s", 1, ".2f"),
               ("rss_mib", "RSS in sync, MiB", 1, ".0f"),
               ("edit_p50", "edit -> last copy p50, ms", 1000, ".0f"),
               ("edit_p99", "edit -> last copy p99, ms", 1000, ".0f")],
    "labels": [("label_p50", "label -> copy p50, ms", 1000, ".0f"),
               ("label_p95", "label -> copy p95, ms", 1000, ".0f"),
               ("rss_mib", "RSS at the end, MiB", 1, ".0f")],
    "ours": [("converge_s", "cold start -> last copy, s", 1, ".2f"),
             ("rate", "writes/s, first copy to last", 1, ".0f"),
             ("rate_vs_go", "  / the Go writer's", 1, ".3f"),
             ("cpu_s", "CPU, start -> last copy, s", 1, ".2f"),
             ("edit_last_s", "edit -> last copy, s", 1, ".2f"),
             ("new_namespaces_s", "new namespaces -> last copy, s", 1, ".2f"),
             ("repair_p50", "drift repaired p50, ms", 1000, ".0f"),
             ("rss_mib", "RSS in sync (2N copies), MiB", 1, ".0f")],
}


def summarize(result: dict[str, Any]) -> None:
    """Percentiles of the per-edit lists, in place."""
    for name, qs in (("edit_s", ((0.5, "edit_p50"), (0.99, "edit_p99"))),
                     ("label_s", ((0.5, "label_p50"), (0.95, "label_p95"))),
                     ("repair_s", ((0.5, "repair_p50"),))):
        if result.get(name):
            for q, key in qs:
                result[key] = percentile(result[name], q)


def median(rounds: list[dict[str, Any]], key: str) -> float | None:
    known = [r[key] for r in rounds if isinstance(r.get(key), int | float)]
    return statistics.median(known) if known else None


def table(shape: str, results: dict[str, list[dict[str, Any]]]) -> list[str]:
    names = list(results)
    lines = [f"  {'measure':<32}" + "".join(f"{n:>23}" for n in names)]
    for key, label, scale, fmt in ROWS[shape.split("-", maxsplit=1)[0]]:
        cells = []
        for name in names:
            value = median(results[name], key)
            cell = "-" if value is None else format(value * scale, fmt)
            ours = median(results.get(CONFIGMIRROR, []), key)
            if value is not None and ours and name not in (CONFIGMIRROR, GO) \
                    and key != "rate_vs_go":
                ratio = value / ours
                cell += f" ({ratio:.0f}x)" if ratio >= 10 else f" ({ratio:.2f}x)"
            cells.append(f"{cell:>23}")
        if any(c.strip() != "-" for c in cells):
            lines.append(f"  {label:<32}" + "".join(cells))
    for name in names:
        for i, r in enumerate(results[name]):
            for problem in (r.get("missed"), r.get("not_repaired")):
                if problem:
                    lines.append(f"  {name}, round {i + 1}: {problem}")
    return lines


# -- the benchmark ------------------------------------------------------------------------------


def parse_pairs(values: Iterable[str], what: str) -> dict[str, list[Path]]:
    """NAME=PATH flags by peer name, in the order given."""
    pairs: dict[str, list[Path]] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or name not in PEER_SHAPES:
            raise SystemExit(f"bench: {what} {value!r}: want NAME=PATH, NAME one of "
                             f"{', '.join(PEER_SHAPES)}")
        resolved = Path(path).expanduser()
        if not resolved.exists():
            raise SystemExit(f"bench: {what} {value!r}: {resolved} does not exist")
        pairs.setdefault(name, []).append(resolved)
    return pairs


def apply_crds(cluster: BenchCluster, paths: list[Path]) -> None:
    """kubectl apply (server-side) of each CRD file or folder, then wait for Established."""
    plane = cluster.plane
    kubectl = str(plane.kubectl_binary) if plane is not None else shutil.which("kubectl")
    if kubectl is None:
        raise SystemExit("bench: applying the peers' CRDs needs kubectl on PATH")
    for path in paths:
        for args in (("apply", "--server-side", "-f", str(path)),
                     ("wait", "--for=condition=Established", "--timeout=60s", "-f",
                      str(path))):
            done = subprocess.run([kubectl, "--kubeconfig", cluster.kubeconfig, *args],
                                  capture_output=True, text=True, check=False, timeout=120)
            if done.returncode != 0:
                raise SystemExit(f"bench: kubectl {' '.join(args)}: {done.stderr.strip()}")


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--peer", action="append", default=[], metavar="NAME=BINARY",
                        help=f"a peer's binary; NAME one of {', '.join(PEER_SHAPES)}")
    parser.add_argument("--peer-crds", action="append", default=[], metavar="NAME=PATH",
                        help="a peer's CRDs (a YAML file or a folder of them)")
    parser.add_argument("--shape", action="append", choices=SHAPES,
                        help="a shape to run (repeatable; default: every shape of the peers)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--mirrors", type=int, default=1000)
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--fanouts", default="100,1000",
                        help="the fan-out shape's namespace counts, comma-separated")
    parser.add_argument("--fanout-edits", type=int, default=20)
    parser.add_argument("--labels", type=int, default=100)
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--repairs", type=int, default=50)
    parser.add_argument("--deadline", type=float, default=900,
                        help="seconds any one wait may take")
    parser.add_argument("--repair-timeout", type=float, default=10)
    parser.add_argument("--limit-lifted", action="append", default=[], metavar="NAME",
                        help="this peer's binary was built with client-go's limit lifted (its "
                        "rest.Config's QPS set to -1 by a local patch): say so in the output")
    args = parser.parse_args()
    peers = {name: paths[-1] for name, paths in parse_pairs(args.peer, "--peer").items()}
    crds = parse_pairs(args.peer_crds, "--peer-crds")
    shapes = args.shape or ([s for s in SHAPES if any(s in PEER_SHAPES[p] for p in peers)]
                            if peers else ["ours"])
    for needs in (PROJECTION, TRUST):
        if needs in peers and needs not in crds:
            raise SystemExit(f"bench: --peer {needs} needs --peer-crds {needs}=PATH")

    load_before = load_average()
    certs = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    contenders = [Contender(CONFIGMIRROR, note="--kube-api-qps 0")] + [
        Contender(name, binary, LIMIT_LIFTED if name in args.limit_lifted
                  else RATE_LIMITED if name in (REPLICATOR, TRUST) else "",
                  certs if name == TRUST else None) for name, binary in peers.items()]
    if TRUST in peers:
        webhook_keys(certs)
    out: dict[str, Any] = {"machine": machine(), "load_before": load_before, "args": {
        k: v for k, v in vars(args).items()}, "peers": {n: str(p) for n, p in peers.items()},
        "shapes": {}}
    try:
        with Session(args.kubeconfig) as session:
            apply_crds(session.cluster, [path for name in crds if name in peers
                                         for path in crds[name]])
            bench = Bench(session, args)
            print(f"peers: {', '.join(shapes)}; {machine()}")
            print(f"  at the start: {load_before}")
            for c in contenders:
                print(f"  {c.name}: {c.binary or 'this tree'}"
                      + (f"; {c.note}" if c.note else ""))
            for shape in shapes:
                for size in ([int(n) for n in args.fanouts.split(",")] if shape == "fanout"
                             else [0]):
                    label = f"{shape}-{size}" if size else shape
                    members = [c for c in contenders
                               if c.name == CONFIGMIRROR or shape in PEER_SHAPES[c.name]]
                    results = run_shape(bench, shape, size, members)
                    out["shapes"][label] = results
                    print(f"{label} ({describe(args, shape, size)}), medians of "
                          f"{args.rounds} round(s):")
                    print(*table(label, results), sep="\n")
            print(f"  at the end: {load_average()}")
    finally:
        shutil.rmtree(certs, ignore_errors=True)
    out["load_after"] = load_average()
    save("peers", out)


def describe(args: argparse.Namespace, shape: str, size: int) -> str:
    return {"mirrors": f"{args.mirrors} single-target mirrors, {args.edits} edits",
            "fanout": f"1 source -> {size} namespaces, {args.fanout_edits} edits",
            "labels": f"{args.labels} namespaces labelled one by one",
            "ours": f"1 source -> {args.namespaces} labelled namespaces, then as many new; "
                    f"{args.repairs} repairs"}[shape]


def run_shape(bench: Bench, shape: str, size: int, members: list[Contender]
              ) -> dict[str, list[dict[str, Any]]]:
    """Every round of one shape, the order of the operators alternating from round to round."""
    results: dict[str, list[dict[str, Any]]] = {}
    if shape == "ours":
        results[GO] = []
    for c in members:
        results[c.name] = []
    for round_ in range(bench.args.rounds):
        order = members if round_ % 2 == 0 else members[::-1]
        if shape == "ours":
            go: dict[str, Any] = {}
            attempt(functools.partial(go_writer, bench, go), go)
            results[GO].append(go)
        for contender in order:
            result: dict[str, Any] = {}
            passes: dict[str, Callable[[], None]] = {
                "mirrors": functools.partial(pass_mirrors, bench, contender, result),
                "fanout": functools.partial(pass_fanout, bench, contender, result, size),
                "labels": functools.partial(pass_labels, bench, contender, result),
                "ours": functools.partial(pass_ours, bench, contender, result)}
            attempt(passes[shape], result)
            summarize(result)
            results[contender.name].append(result)
        if shape == "ours":
            for name in results:
                last = results[name][-1]
                if name != GO and last.get("rate") and results[GO][-1].get("rate"):
                    last["rate_vs_go"] = last["rate"] / results[GO][-1]["rate"]
    return results


def attempt(one: Callable[[], None], result: dict[str, Any]) -> None:
    """Run one pass; a missed deadline is recorded with its figure, not raised."""
    try:
        one()
    except Missed as missed:
        result["missed"] = str(missed)


if __name__ == "__main__":
    main()
