"""What the cluster benchmarks share: a cluster, a replica watcher, the operator process.

By default a benchmark starts the local control plane (configmirror_testing); with
--kubeconfig it runs against any cluster (audit-based request counts are then unavailable).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from configmirror.kube import ApiError, Kube, load_configuration
from configmirror.model import REPLICA_LABEL, configmap_from_json
from configmirror.plan import desired_body
from configmirror.spec import REPLICATE_TO
from configmirror_testing.controlplane import ControlPlane, find_assets
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.wait import wait_for

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
REPLICA_SELECTOR = f"{REPLICA_LABEL}=true"


def common_args(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--kubeconfig", help="an existing cluster (default: a local one)")
    parser.add_argument("--workers", type=int, default=4)
    return parser


class BenchCluster:
    """The cluster under test and an admin client for the benchmark's own requests."""

    def __init__(self, kubeconfig: str | None) -> None:
        self.plane: ControlPlane | None = None
        if kubeconfig is None:
            assets = find_assets(REPO, build=True)
            if assets is None:
                sys.exit("bench: no control plane; run `make controlplane` (needs Go)")
            self.plane = ControlPlane(assets)
            self.plane.start()
            kubeconfig = str(self.plane.kubeconfig)
        self.kubeconfig = kubeconfig
        self.kube = Kube(load_configuration(kubeconfig, pool_size=32), user_agent="bench")

    def close(self) -> None:
        self.kube.close()
        if self.plane is not None:
            self.plane.stop()

    def namespaces(self, prefix: str, count: int) -> list[str]:
        names = [f"{prefix}-{i:03d}" for i in range(count)]
        for name in names:
            self.kube.request("create", "/api/v1/namespaces",
                              body={"metadata": {"name": name}})
        return names

    def create_sources(self, namespace: str, count: int, targets: str,
                       payload: int = 900) -> list[str]:
        names = [f"src-{i:04d}" for i in range(count)]
        parallel(lambda n: self.kube.request(
            "create", f"/api/v1/namespaces/{namespace}/configmaps",
            body={"metadata": {"name": n, "annotations": {REPLICATE_TO: targets}},
                  "data": {"payload": "x" * payload}}), names, 8)
        return names

    def delete_replicas(self, namespaces: Iterable[str], watcher: ReplicaWatcher) -> None:
        for ns in namespaces:
            self.kube.request("delete", f"/api/v1/namespaces/{ns}/configmaps",
                              {"labelSelector": REPLICA_SELECTOR}, timeout=120)
        wait(lambda: watcher.live() == 0, 300, "replicas to be deleted")

    def audit(self, user_agent: str, since: float = 0.0) -> Counter[tuple[str, str]] | None:
        """Requests by (verb, resource) from clients whose user agent starts with
        `user_agent`, stamped after `since` (time.time()); None on an external cluster."""
        if self.plane is None:
            return None
        counts: Counter[tuple[str, str]] = Counter()
        for event in self.plane.audit_events():
            if not event.get("userAgent", "").startswith(user_agent):
                continue
            stamp = event.get("requestReceivedTimestamp", "")
            if since and _epoch(stamp) < since:
                continue
            counts[(event.get("verb", ""), (event.get("objectRef") or {}).get("resource", ""))] += 1
        return counts


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def writes(counts: Counter[tuple[str, str]] | None, resource: str = "configmaps") -> int | None:
    if counts is None:
        return None
    return sum(n for (verb, res), n in counts.items()
               if res == resource and verb in ("create", "update", "patch", "delete"))


class ReplicaWatcher:
    """Watches replicas (by label) and records when each was added or changed."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._lock = threading.Lock()
        self.added: list[float] = []  # time of every ADDED
        self.versions: dict[str, tuple[str, float]] = {}  # key -> (data "v", time seen)
        self.seen_at: dict[tuple[str, str], float] = {}   # (key, v) -> first time seen
        self._live: set[str] = set()
        self._stop = threading.Event()
        body = kube.request("list", "/api/v1/configmaps", {"labelSelector": REPLICA_SELECTOR})
        for item in body["items"]:
            self._live.add(_key(item))
        self._rv = body["metadata"]["resourceVersion"]
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name="replica-watcher")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._stream = self._kube.watch("/api/v1/configmaps", {
                    "labelSelector": REPLICA_SELECTOR, "resourceVersion": self._rv,
                    "allowWatchBookmarks": "true", "timeoutSeconds": 600}, read_timeout=660)
                for event in self._stream:
                    self._on(event)
            except Exception:
                if not self._stop.is_set():
                    time.sleep(0.2)

    def _on(self, event: dict[str, Any]) -> None:
        now = time.monotonic()
        obj = event["object"]
        self._rv = obj["metadata"]["resourceVersion"]
        if event["type"] == "BOOKMARK":
            return
        key = _key(obj)
        with self._lock:
            if event["type"] == "DELETED":
                self._live.discard(key)
                return
            if event["type"] == "ADDED" and key not in self._live:
                self.added.append(now)
            self._live.add(key)
            version = (obj.get("data") or {}).get("v", "")
            self.versions[key] = (version, now)
            self.seen_at.setdefault((key, version), now)

    def live(self) -> int:
        with self._lock:
            return len(self._live)

    def curve(self, since: float) -> list[tuple[float, int]]:
        """(seconds since `since`, replicas added so far) for every ADDED after `since`."""
        with self._lock:
            times = sorted(t for t in self.added if t >= since)
        return [(t - since, i + 1) for i, t in enumerate(times)]

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=10)


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


class Session:
    """One benchmark's cluster, replica watcher and operators, all stopped on exit."""

    def __init__(self, kubeconfig: str | None) -> None:
        self.cluster = BenchCluster(kubeconfig)
        self._watcher: ReplicaWatcher | None = None
        self._operators: list[OperatorProcess] = []

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_: object) -> None:
        for operator in self._operators:
            operator.stop()
        if self._watcher is not None:
            self._watcher.stop()
        self.cluster.close()

    @property
    def watcher(self) -> ReplicaWatcher:
        """Watches replicas from the moment it is first asked for."""
        if self._watcher is None:
            self._watcher = ReplicaWatcher(self.cluster.kube)
        return self._watcher

    def operator(self, workers: int, *flags: str) -> OperatorProcess:
        operator = OperatorProcess(self.cluster.kubeconfig, RESULTS / "operator.log",
                                   "--workers", str(workers), "--log-level", "warning", *flags)
        self._operators.append(operator)
        return operator

    def idle(self, operator: OperatorProcess, timeout: float = 60) -> None:
        """Wait until the operator has nothing queued, in flight, delayed or waiting."""
        operator.wait_idle(timeout)


def rss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def parallel(call: Callable[[Any], object], items: Iterable[Any], threads: int) -> float:
    """Run `call` over `items` on `threads` threads; returns the elapsed seconds."""
    work: queue.Queue[Any] = queue.Queue()
    for item in items:
        work.put(item)
    errors: list[BaseException] = []

    def drain() -> None:
        while True:
            try:
                item = work.get_nowait()
            except queue.Empty:
                return
            try:
                call(item)
            except ApiError as err:
                errors.append(err)

    started = time.monotonic()
    pool = [threading.Thread(target=drain) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - started


def replica_body(source_namespace: str, name: str, namespace: str,
                 payload: int = 900) -> dict[str, Any]:
    """Exactly what configmirror writes for a source created by create_sources()."""
    raw = {"metadata": {"namespace": source_namespace, "name": name, "uid": "x",
                        "resourceVersion": "1",
                        "annotations": {REPLICATE_TO: "*"}},
           "data": {"payload": "x" * payload}}
    source = configmap_from_json(raw)
    return desired_body(source, namespace)


def wait(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> float:
    """Poll `check` until true; returns the seconds it took."""
    started = time.monotonic()
    wait_for(check, timeout, what, interval)
    return time.monotonic() - started


def save(name: str, result: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1))


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = int(Path("/proc/meminfo").read_text().split()[1]) // 1024 // 1024
    return f"{os.cpu_count()} cores ({cpu}), {mem} GiB RAM, Python {sys.version.split()[0]}"
