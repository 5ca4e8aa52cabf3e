"""What the cluster benchmarks share: a cluster, a replica watcher, the operator process, and
the two baselines (the Go client-go writer and the Python bare client).

By default a benchmark starts the local control plane (configmirror_testing); with
--kubeconfig it runs against any cluster (audit-based request counts and timings are then
unavailable, and each writer's own clock is used instead).

Every operator a benchmark starts runs with `--kube-api-qps 0`: the client-side rate limit is
off, so the figures are the operator's own pace against the server's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from configmirror.client.kube import ApiError, Kube, load_configuration
from configmirror.operator.settings import Settings
from configmirror.replication.model import REPLICA_LABEL
from configmirror.replication.plan import desired_body
from configmirror.replication.spec import REPLICATE_TO
from configmirror.vocabulary import CONFIGMAP, CONFIGMAPS, Resource
from configmirror_testing.controlplane import ControlPlane, find_assets
from configmirror_testing.objects import cached
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.wait import wait_for

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
REPLICA_SELECTOR = f"{REPLICA_LABEL}=true"
GOWRITER_BUILD = REPO / "bench" / "gowriter" / "build.sh"
BEST_CONCURRENCY = 32   # the Go writer's second run: past the server's limit on this machine
OPERATOR_FLAGS = ("--kube-api-qps", "0")  # benchmarks measure the pace, not the limit
GO_INFORMER = "go+informer"  # the Go writer with -informer: it watches what it writes
BARE_CLIENT = "bare-client"  # the Python bare client's user agent (the audit log tells it apart)


def common_args(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--kubeconfig", help="an existing cluster (default: a local one)")
    parser.add_argument("--workers", type=int, default=Settings().workers,
                        help="the operator's --workers, and the baselines' concurrency "
                             "(default: the operator's default)")
    return parser


def load_average() -> str:
    """The 1, 5 and 15 minute load averages and the core count, for the figures' context."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


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
        self._audit: AuditTrail | None = None

    def close(self) -> None:
        self.kube.close()
        if self.plane is not None:
            self.plane.stop()

    def namespaces(self, prefix: str, count: int, threads: int = 16,
                   labels: dict[str, str] | None = None) -> list[str]:
        names = [f"{prefix}-{i:03d}" for i in range(count)]
        parallel(lambda name: self.kube.request(
            "create", "/api/v1/namespaces",
            body={"metadata": {"name": name, "labels": labels or {}}}), names, threads)
        return names

    def create_sources(self, namespace: str, count: int, targets: str,
                       payload: int = 900, first: int = 0) -> list[str]:
        """Sources src-FIRST.. up to src-COUNT-1 (zero-padded), each replicated to `targets`."""
        names = [f"src-{i:04d}" for i in range(first, count)]
        parallel(lambda n: self.kube.request(
            "create", f"/api/v1/namespaces/{namespace}/configmaps",
            body={"metadata": {"name": n, "annotations": {REPLICATE_TO: targets}},
                  "data": {"payload": "x" * payload}}), names, 8)
        return names

    def audit(self, user_agent: str, since: float = 0.0) -> Counter[tuple[str, str]] | None:
        """Requests by (verb, resource) from clients whose user agent starts with
        `user_agent`, stamped after `since` (time.time()); None on an external cluster."""
        records = self._audit_records()
        if records is None:
            return None
        return Counter((r.verb, r.resource) for r in records
                       if r.user_agent.startswith(user_agent) and r.received >= since)

    def window(self, user_agent: str, verb: str, since: float, expect: int = 1,
               resource: str = "configmaps") -> tuple[int, float] | None:
        """(requests, seconds from the first one received to the last one answered) of
        `verb` on `resource` by `user_agent`, since `since`: the API server's own clock, the
        same for every writer. Waits (up to 60 s) until the audit log holds `expect` of
        them: it is written a moment after the answers. None on an external cluster."""
        if self.plane is None:
            return None

        def found() -> list[AuditRecord] | None:
            records = [r for r in self._audit_records() or ()
                       if r.user_agent.startswith(user_agent) and r.verb == verb
                       and r.resource == resource and r.received >= since]
            return records if len(records) >= expect else None

        records = wait_for(found, 60, f"{expect} {verb} requests by {user_agent} in the "
                           f"audit log", interval=0.2)
        first = min(r.received for r in records)
        last = max(r.completed for r in records)
        return len(records), last - first

    def spans(self, user_agent: str, verb: str, bounds: list[float],
              resource: str = "configmaps") -> list[tuple[float, float]] | None:
        """For each interval [bounds[i], bounds[i+1]): seconds from its start to the first
        `verb` request by `user_agent` received in it, and to the last one answered (the
        audit log's clock). None on an external cluster."""
        records = self._audit_records()
        if records is None:
            return None
        out = []
        for start, end in itertools.pairwise(bounds):
            inside = [r for r in records if r.user_agent.startswith(user_agent)
                      and r.verb == verb and r.resource == resource
                      and start <= r.received < end]
            out.append((min(r.received for r in inside) - start,
                        max(r.completed for r in inside) - start) if inside else (0.0, 0.0))
        return out

    def requests(self, user_agent: str, since: float, until: float
                 ) -> Counter[tuple[str, str, int]] | None:
        """Requests by (verb, resource, status code) from clients whose user agent starts
        with `user_agent`, received in [since, until); None on an external cluster."""
        records = self._audit_records()
        if records is None:
            return None
        return Counter((r.verb, r.resource, r.code) for r in records
                       if r.user_agent.startswith(user_agent) and since <= r.received < until)

    def server_cpu(self) -> float | None:
        """CPU seconds kube-apiserver and etcd have used so far (None: an external cluster)."""
        if self.plane is None:
            return None
        return sum(cpu_of(pid) for pid in self.plane.pids)

    def _audit_records(self) -> list[AuditRecord] | None:
        if self.plane is None:
            return None
        if self._audit is None:
            self._audit = AuditTrail(self.plane.audit_log)
        return self._audit.records()


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """The part of one audit event the benchmarks read."""

    user_agent: str
    verb: str
    resource: str
    received: float   # epoch seconds: the server received the request
    completed: float  # epoch seconds: the server finished the response
    code: int = 0     # the response's status code


class AuditTrail:
    """The apiserver's audit log, read incrementally (it grows by a line per request)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._records: list[AuditRecord] = []

    def records(self) -> list[AuditRecord]:
        if self._path.exists():
            with open(self._path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1  # a line being written now waits for the next read
            self._offset += end
            for line in chunk[:end].splitlines():
                self._records.append(_audit_record(json.loads(line)))
        return self._records


def _audit_record(event: dict[str, Any]) -> AuditRecord:
    received = _epoch(event.get("requestReceivedTimestamp", ""))
    return AuditRecord(
        user_agent=event.get("userAgent", ""), verb=event.get("verb", ""),
        resource=(event.get("objectRef") or {}).get("resource", ""),
        received=received, completed=_epoch(event.get("stageTimestamp", "")) or received,
        code=int((event.get("responseStatus") or {}).get("code") or 0))


def _epoch(stamp: str) -> float:
    if not stamp:
        return 0.0
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def writes(counts: Counter[tuple[str, str]] | None, resource: str = "configmaps") -> int | None:
    if counts is None:
        return None
    return sum(n for (verb, res), n in counts.items()
               if res == resource and verb in ("create", "update", "patch", "delete"))


class ReplicaWatcher:
    """Watches replicas (by label) of one resource, ConfigMaps unless told, and records when
    each was added or changed."""

    def __init__(self, kube: Kube, resource: Resource = CONFIGMAPS) -> None:
        self._kube = kube
        self._collection = resource.collection()
        self._lock = threading.Lock()
        self.added: list[float] = []  # time of every ADDED
        self.versions: dict[str, tuple[str, float]] = {}  # key -> (data "v", time seen)
        self.seen_at: dict[tuple[str, str], float] = {}   # (key, v) -> first time seen
        self.holding: Counter[str] = Counter()  # v -> replicas seen holding it (each once)
        self.last_reached: dict[str, float] = {}  # v -> when the latest replica first held it
        self.arrivals: dict[str, list[float]] = {}  # namespace -> when each replica was added
        self._live: set[str] = set()
        self._stop = threading.Event()
        body = kube.request("list", self._collection, {"labelSelector": REPLICA_SELECTOR})
        for item in body["items"]:
            self._live.add(_key(item))
        self._rv = body["metadata"]["resourceVersion"]
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name="replica-watcher")
        self._thread.start()

    def _run(self) -> None:
        relist = False
        while not self._stop.is_set():
            try:
                if relist:
                    self._relist()
                    relist = False
                self._stream = self._kube.watch(self._collection, {
                    "labelSelector": REPLICA_SELECTOR, "resourceVersion": self._rv,
                    "allowWatchBookmarks": "true", "timeoutSeconds": 600}, read_timeout=660)
                for event in self._stream:
                    if event["type"] == "ERROR":  # 410: an API server restarted since
                        relist = True
                        break
                    self._on(event)
            except Exception:
                if not self._stop.is_set():
                    relist = True  # what happened meanwhile may be out of the watch's reach
                    time.sleep(0.2)

    def _relist(self) -> None:
        """Take up what the list says (each object as if modified now), then watch from it."""
        body = self._kube.request("list", self._collection, {"labelSelector": REPLICA_SELECTOR})
        keys = set()
        for item in body["items"]:
            self._on({"type": "MODIFIED", "object": item})
            keys.add(_key(item))
        with self._lock:
            self._live &= keys
        self._rv = body["metadata"]["resourceVersion"]

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
                self.arrivals.setdefault(obj["metadata"]["namespace"], []).append(now)
            self._live.add(key)
            version = (obj.get("data") or {}).get("v", "")
            self.versions[key] = (version, now)
            if (key, version) not in self.seen_at:
                self.seen_at[(key, version)] = now
                self.holding[version] += 1
                self.last_reached[version] = now

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
        self._watchers: dict[Resource, ReplicaWatcher] = {}
        self._operators: list[OperatorProcess] = []

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_: object) -> None:
        for operator in self._operators:
            operator.stop()
        for watcher in self._watchers.values():
            watcher.stop()
        self.cluster.close()

    @property
    def watcher(self) -> ReplicaWatcher:
        """Watches ConfigMap replicas from the moment it is first asked for."""
        return self.watch(CONFIGMAPS)

    def watch(self, resource: Resource) -> ReplicaWatcher:
        """Watches `resource`'s replicas from the moment it is first asked for."""
        if resource not in self._watchers:
            self._watchers[resource] = ReplicaWatcher(self.cluster.kube, resource)
        return self._watchers[resource]

    def operator(self, workers: int, *flags: str, env: dict[str, str] | None = None
                 ) -> OperatorProcess:
        """An operator with `--workers workers --kube-api-qps 0` (later `flags` win)."""
        operator = OperatorProcess(self.cluster.kubeconfig, RESULTS / "operator.log",
                                   "--workers", str(workers), "--log-level", "warning",
                                   *OPERATOR_FLAGS, *flags, env=env)
        self._operators.append(operator)
        return operator

    def idle(self, operator: OperatorProcess, timeout: float = 60) -> None:
        """Wait until the operator has nothing queued, in flight, delayed or waiting."""
        operator.wait_idle(timeout)


def operator_env(tree: Path | None) -> dict[str, str] | None:
    """The environment that makes `python -m configmirror` import `tree`'s src/ (None: ours)."""
    if tree is None or tree.resolve() == REPO:
        return None
    src = (tree / "src").resolve()
    if not (src / "configmirror" / "__init__.py").is_file():
        raise SystemExit(f"{tree}: no src/configmirror/ there (a tree of configmirror?)")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}


def operator_origin(env: dict[str, str] | None) -> str:
    """Where the operator's `configmirror` package is imported from, asked of the interpreter
    the operator runs in, with its environment."""
    return subprocess.run(
        [sys.executable, "-c", "import configmirror; print(configmirror.__file__)"],
        env={**os.environ, **(env or {})}, capture_output=True, text=True, check=True,
        timeout=60).stdout.strip()


def cpu_of(pid: int) -> float:
    """User + system CPU seconds process `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_of(pid: int, field: str = "VmRSS") -> int:
    """Process `pid`'s resident memory in bytes now, or its peak with field="VmHWM"."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def peak_rss_of(pid: int) -> int:
    """The most resident memory process `pid` has held so far, in bytes."""
    return rss_of(pid, "VmHWM")


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
    source = cached(raw, CONFIGMAP)
    return desired_body(source, namespace)


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank percentile `q` (0.5, 0.99) of `values`."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


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


# -- the baselines: what the API server takes from a Go controller and from bare Python ---------


def gowriter_binary() -> Path:
    """The Go client-go writer, built once (bench/gowriter/build.sh) and cached."""
    done = subprocess.run([str(GOWRITER_BUILD)], capture_output=True, text=True, check=False,
                          timeout=1800)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        sys.exit(f"bench: the Go writer could not be built:\n{done.stderr[-2000:]}")
    return Path(lines[-1])


@dataclass(frozen=True)
class Run:
    """One writer's pass over a set of bodies."""

    writer: str                # "go", "python" or "configmirror"
    concurrency: int
    writes: int
    seconds: float             # first request received to last answered (audit), else own clock
    cpu_seconds: float | None  # the writer's own CPU over the pass (None: not measured)
    own_seconds: float | None = None  # the writer's own clock, first request to last response
    server_cpu: float | None = None   # kube-apiserver's and etcd's CPU over the pass
    max_rss: int | None = None        # the Go writer's peak resident bytes (None: not known)

    @property
    def rate(self) -> float:
        return self.writes / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_per_1000(self) -> float | None:
        if self.cpu_seconds is None or not self.writes:
            return None
        return self.cpu_seconds / self.writes * 1000

    @property
    def server_cpu_per_1000(self) -> float | None:
        if self.server_cpu is None or not self.writes:
            return None
        return self.server_cpu / self.writes * 1000


def mean_run(runs: Sequence[Run]) -> Run:
    """The runs of one writer (before and after the operator) as one: their mean seconds."""
    first = runs[0]
    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    return Run(first.writer, first.concurrency, first.writes,
               sum(r.seconds for r in runs) / len(runs), mean([r.cpu_seconds for r in runs]),
               mean([r.own_seconds for r in runs]), mean([r.server_cpu for r in runs]))


class Baselines:
    """Write a set of bodies with the Go writer (at the operator's concurrency and at 32) and
    with the Python bare client (at the operator's concurrency), deleting them after each pass.

    The operator must not run meanwhile: it would repair the deletions, or delete what it
    takes for orphans. Each writer's time comes from the audit log when there is one, so the
    baselines and the operator are timed by one clock, the API server's.
    """

    def __init__(self, session: Session, bodies: list[dict[str, Any]], concurrency: int,
                 label: str) -> None:
        self._session = session
        self._bodies = bodies
        self._concurrency = concurrency
        self._binary = gowriter_binary()
        self._file = bodies_file(label, bodies)
        self.runs: dict[str, list[Run]] = {}

    @property
    def labels(self) -> list[str]:
        return [f"go@{c}" for c in self.concurrencies] + [f"python@{self._concurrency}"]

    @property
    def concurrencies(self) -> list[int]:
        return sorted({self._concurrency, BEST_CONCURRENCY})

    def measure(self, verb: str = "create") -> None:
        """One pass of every baseline writer: create the bodies (or update them, when they
        exist already), then delete what was created. Creates are also written by the Go
        writer with an informer on what it writes (-informer), at the operator's
        concurrency: the like-with-like baseline of CPU per write, since the operator watches
        its own writes too."""
        for concurrency in self.concurrencies:
            self._record(f"go@{concurrency}", self.go(verb, concurrency))
            if verb == "create":
                self.clear()
        if verb == "create":
            self._record(f"{GO_INFORMER}@{self._concurrency}",
                         self.go(verb, self._concurrency, informer=True))
            self.clear()
            self._record(f"python@{self._concurrency}", self.python(self._concurrency))
            self.clear()

    def mean(self, label: str) -> Run:
        return mean_run(self.runs[label])

    def best(self) -> Run:
        """The Go writer's best rate at any concurrency measured (the server's limit)."""
        return max((self.mean(f"go@{c}") for c in self.concurrencies), key=lambda r: r.rate)

    def go(self, verb: str, concurrency: int, bodies: Path | None = None,
           informer: bool = False) -> Run:
        cluster = self._session.cluster
        mark, server = time.time(), cluster.server_cpu()
        done = subprocess.run(
            [str(self._binary), "-kubeconfig", cluster.kubeconfig, "-bodies",
             str(bodies or self._file), "-concurrency", str(concurrency), "-verb", verb,
             *(["-informer", "-selector", REPLICA_SELECTOR] if informer else [])],
            capture_output=True, text=True, check=False, timeout=1800)
        if done.returncode != 0:
            sys.exit(f"bench: the Go writer failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if result["errors"]:
            sys.exit(f"bench: the Go writer had {result['errors']} errors; the first: "
                     f"{result.get('first_error')}")
        if informer and result.get("informer_seen") != result["writes"]:
            sys.exit(f"bench: the Go writer's informer saw {result.get('informer_seen')} of "
                     f"its {result['writes']} writes")
        server = _delta(cluster.server_cpu(), server)
        window = cluster.window("gowriter", verb, mark, int(result["writes"]))
        return Run("go", concurrency, int(result["writes"]),
                   window[1] if window else float(result["seconds"]),
                   float(result["cpu_seconds"]), float(result["seconds"]), server,
                   result.get("max_rss_bytes"))

    def python(self, threads: int) -> Run:
        """The Python bare client: the same bodies, the same connection pool as the operator's
        client, `threads` threads, nothing else (no cache, no queue)."""
        cluster = self._session.cluster
        kube = Kube(load_configuration(cluster.kubeconfig, pool_size=threads),
                    user_agent=BARE_CLIENT)
        try:
            mark, server = time.time(), cluster.server_cpu()
            cpu = time.process_time()  # this process: the watcher's thread adds a little
            elapsed = parallel(lambda b: kube.request(
                "create", f"/api/v1/namespaces/{b['metadata']['namespace']}/configmaps",
                body=b), self._bodies, threads)
            cpu = time.process_time() - cpu
            server = _delta(cluster.server_cpu(), server)
        finally:
            kube.close()
        window = cluster.window(BARE_CLIENT, "create", mark, len(self._bodies))
        return Run("python", threads, len(self._bodies), window[1] if window else elapsed,
                   cpu, elapsed, server)

    def record(self, label: str, run: Run) -> None:
        self._record(label, run)

    def clear(self) -> None:
        """Delete every body's object (the Go writer at 32) and wait for the watch to agree."""
        self.go("delete", BEST_CONCURRENCY)
        watcher = self._session.watcher
        wait(lambda: watcher.live() == 0, 300, "the baseline's objects to be deleted")

    def _record(self, label: str, run: Run) -> None:
        self.runs.setdefault(label, []).append(run)


def bodies_file(label: str, bodies: Iterable[dict[str, Any]]) -> Path:
    """The bodies as the Go writer reads them: one JSON object per line."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"bodies-{label}.jsonl"
    with open(path, "w") as f:
        for body in bodies:
            f.write(json.dumps(body, separators=(",", ":")) + "\n")
    return path


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def cpu_snapshot(session: Session, operator: OperatorProcess) -> tuple[float, float | None]:
    """(the operator's CPU seconds, the server's) so far."""
    return operator.cpu_seconds(), session.cluster.server_cpu()


def operator_run(session: Session, operator: OperatorProcess, workers: int, total: int,
                 since: float, before: tuple[float, float | None] | None = None,
                 timeout: float = 900, resource: Resource = CONFIGMAPS) -> tuple[Run, float]:
    """Wait until `total` replicas (of `resource`) exist, then until the operator is idle;
    its Run (audit window of its creates; its CPU and the server's from `before`, default
    now, to idle) and the wall seconds from `since`. Call it once the operator is ready:
    its start-up CPU is not a write's."""
    watcher = session.watch(resource)
    cpu_before, server = before or cpu_snapshot(session, operator)
    mark = time.time() - (time.monotonic() - since) - 1  # `since` on the audit log's clock
    wait(lambda: watcher.live() >= total, timeout, "configmirror's replicas")
    wall = time.monotonic() - since
    session.idle(operator, 300)
    cpu = operator.cpu_seconds() - cpu_before
    server = _delta(session.cluster.server_cpu(), server)
    window = session.cluster.window("configmirror/", "create", mark, total, resource.plural)
    curve = watcher.curve(since)
    span = curve[-1][0] - curve[0][0] if len(curve) > 1 else wall
    return Run("configmirror", workers, window[0] if window else total,
               window[1] if window else span, cpu, span, server), wall


def ratio_lines(ours: Run, baselines: Baselines) -> list[str]:
    """The figures docs/performance.md sets goals for, as printed lines."""
    same = baselines.mean(f"go@{ours.concurrency}")
    best = baselines.best()
    python = baselines.mean(f"python@{ours.concurrency}")
    lines = []
    if f"{GO_INFORMER}@{ours.concurrency}" in baselines.runs:
        watching = baselines.mean(f"{GO_INFORMER}@{ours.concurrency}")
        if ours.cpu_per_1000 and watching.cpu_per_1000 and same.cpu_per_1000:
            lines.append(
                f"  CPU per 1000 writes: configmirror {ours.cpu_per_1000:.3f} s = "
                f"{ours.cpu_per_1000 / watching.cpu_per_1000:.2f}x the Go writer with an "
                f"informer on its writes ({watching.cpu_per_1000:.3f} s; goal <= 1.2), "
                f"{ours.cpu_per_1000 / same.cpu_per_1000:.2f}x the bare Go writer "
                f"({same.cpu_per_1000:.3f} s)")
    return [
        *lines,
        f"  configmirror / Go writer at the same concurrency ({same.concurrency}) = "
        f"{ours.rate / same.rate:.2f} (goal >= 0.8)",
        f"  configmirror / Go writer at its best ({best.concurrency}) = "
        f"{ours.rate / best.rate:.2f} (goal >= 0.7)",
        f"  configmirror / Python bare client ({python.concurrency} threads) = "
        f"{ours.rate / python.rate:.2f}",
    ]


def run_table(runs: Sequence[tuple[str, Run]]) -> list[str]:
    """Seconds, rate, and CPU seconds per 1,000 writes of the writer and of the server
    (kube-apiserver + etcd) during its pass."""
    lines = [f"  {'writer':<34} {'seconds':>8} {'writes/s':>9}   CPU s per 1000 writes: "
             f"writer, server"]
    for label, run in runs:
        cpu, server = run.cpu_per_1000, run.server_cpu_per_1000
        lines.append(f"  {label:<34} {run.seconds:8.2f} {run.rate:9.0f}   "
                     f"{'-' if cpu is None else f'{cpu:.2f}':>22}, "
                     f"{'-' if server is None else f'{server:.2f}'}")
    return lines


def baseline_rows(baselines: Baselines) -> list[tuple[str, Run]]:
    rows = [(f"Go client-go, {c} goroutines", baselines.mean(f"go@{c}"))
            for c in baselines.concurrencies]
    for label in baselines.runs:
        if label.startswith(f"{GO_INFORMER}@"):
            rows.append((f"Go client-go + informer, {label.split('@')[1]} goroutines",
                         baselines.mean(label)))
    python = baselines.mean(baselines.labels[-1])
    rows.append((f"Python bare client, {python.concurrency} threads", python))
    return rows


def run_json(run: Run) -> dict[str, Any]:
    return {"writer": run.writer, "concurrency": run.concurrency, "writes": run.writes,
            "seconds": run.seconds, "rate": run.rate, "cpu_seconds": run.cpu_seconds,
            "server_cpu_seconds": run.server_cpu,
            "own_seconds": run.own_seconds, "max_rss_bytes": run.max_rss}
