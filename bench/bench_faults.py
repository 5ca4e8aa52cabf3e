"""Network faults: how long replicas lag behind an edit when the wire breaks, how quiet watches
fare, and the rate an overloaded server allows, against the Go writer under the same limits.

    python bench/bench_faults.py [--namespaces 100] [--repeats 3] [--quiet-minutes 15]
                                 [--storm-namespaces 1000] [--outage-namespaces 5000]
                                 [--outage-runs 10] [--parts faults,quiet,overload,outage]

1. Faults (configmirror_testing.faultproxy between the operator and the API server, the
   operator with default flags, one source replicated into --namespaces namespaces): for each
   fault, the seconds from the fault to the first and to the last replica carrying an edit
   made right after it; for the faults that end (no answer to new handshakes, the server
   down), also from their end. Each is repeated --repeats times: when a silent connection
   is noticed depends on where in the server's bookmark minute the drop lands.
2. Quiet watches: the operator on a server where nothing changes for --quiet-minutes; its
   watch restarts (goal: no more than the server's own timeoutSeconds rotation, one per
   5-10 minutes per informer), the probes of silent watches and the bookmarks received.
3. Overload: a control plane of its own with little concurrency, API Priority and Fairness
   giving the writers' ServiceAccount one seat and 429 for the rest
   (configmirror_testing.overload). The Go client-go writer writes the same --storm-namespaces
   bodies the operator writes, as the same ServiceAccount, before and after it; rates, 429s,
   and the operator's writes (goal: exactly one per replica, nothing given up).
4. An API server outage mid fan-out (issue 42): one source replicated into
   --outage-namespaces namespaces, converged; the source edited, and 0.3 s later the API
   server killed (SIGKILL) for 8 s and started again on the same port (etcd keeps running);
   --outage-runs times with one operator (default flags but --kube-api-qps 0, as every
   benchmark). For each run: the seconds from the server's return (its /readyz answers) to
   the last replica holding the new content (goal: 30 s, docs/reliability.md), and to the
   `Replicated` Event that counts the edit's updates (written once the source is quiet for
   2 s, so at best 2 s after the last replica); replicas still stale after 120 s are named.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from configmirror.client.kube import ApiError, Kube
from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.controlplane import ControlPlane, find_assets
from configmirror_testing.faultproxy import FaultProxy
from configmirror_testing.objects import service_account_token, token_kubeconfig
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.overload import SMALL_SERVER_FLAGS, Throttle
from harness import (
    OPERATOR_FLAGS,
    REPO,
    RESULTS,
    BenchCluster,
    ReplicaWatcher,
    common_args,
    gowriter_binary,
    load_average,
    machine,
    replica_body,
    save,
    wait,
)

SOURCE = "cfg"


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quiet-minutes", type=float, default=15.0)
    parser.add_argument("--storm-namespaces", type=int, default=1000)
    parser.add_argument("--outage-namespaces", type=int, default=5000)
    parser.add_argument("--outage-runs", type=int, default=10)
    parser.add_argument("--parts", default="faults,quiet,overload,outage",
                        help="which parts to run (comma-separated)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    print(f"faults: {machine()}; at the start: {load_average()}")
    result: dict[str, Any] = {"machine": machine(), "load_before": load_average()}
    if "faults" in parts:
        result["faults"] = faults(args.namespaces, args.repeats)
    if "quiet" in parts:
        result["quiet"] = quiet(args.quiet_minutes)
    if "overload" in parts:
        result["overload"] = overload(args.storm_namespaces)
    if "outage" in parts:
        result["outage"] = outage(args.outage_namespaces, args.outage_runs)
    result["load_after"] = load_average()
    print(f"  at the end: {load_average()}")
    save("faults", result)


# -- 1. faults on the wire ----------------------------------------------------------------------


class Edits:
    """Edits of one source, and when its replicas carried each (seen by an admin watch that
    does not go through the proxy)."""

    def __init__(self, cluster: BenchCluster, watcher: ReplicaWatcher, namespace: str,
                 targets: int) -> None:
        self.cluster = cluster
        self.watcher = watcher
        self.namespace = namespace
        self.targets = targets
        self.version = 1

    def edit(self) -> tuple[str, float]:
        self.version += 1
        version = str(self.version)
        self.cluster.kube.request("patch", f"/api/v1/namespaces/{self.namespace}/configmaps/"
                                  f"{SOURCE}", body={"data": {"v": version}},
                                  content_type="application/merge-patch+json")
        return version, time.monotonic()

    def reached(self, version: str, timeout: float = 300) -> tuple[float, float]:
        """(when the first replica carried `version`, when the last did)."""
        watcher = self.watcher
        wait(lambda: watcher.holding[version] >= self.targets, timeout,
             f"{self.targets} replicas at v={version}", interval=0.1)
        with watcher._lock:
            times = [t for (_, v), t in watcher.seen_at.items() if v == version]
        return min(times), max(times)


def faults(namespaces: int, repeats: int) -> dict[str, Any]:
    cluster = BenchCluster(None)
    assert cluster.plane is not None
    plane = cluster.plane
    watcher = ReplicaWatcher(cluster.kube)
    proxy = FaultProxy((plane.address, plane.apiserver_port)).start()
    operator: OperatorProcess | None = None
    out: dict[str, Any] = {"namespaces": namespaces, "runs": {}}
    try:
        source_ns = cluster.namespaces("faults-src", 1)[0]
        targets = cluster.namespaces("faults", namespaces)
        kubeconfig = proxy.write_kubeconfig(Path(cluster.kubeconfig), RESULTS / "via-proxy")
        operator = OperatorProcess(kubeconfig, fresh_log("operator-faults.log"))
        operator.wait_ready(120)
        cluster.kube.request("create", f"/api/v1/namespaces/{source_ns}/configmaps", body={
            "metadata": {"name": SOURCE, "annotations": {REPLICATE_TO: ",".join(targets)}},
            "data": {"v": "1"}})
        wait(lambda: watcher.holding["1"] >= namespaces, 300, "the first replicas")
        edits = Edits(cluster, watcher, source_ns, namespaces)
        print(f"\n1. faults through a proxy, operator with default flags, 1 source x "
              f"{namespaces} namespaces; seconds from the fault (and from its end) to the "
              f"first and the last replica carrying an edit made right after it")
        kinds: list[tuple[str, Any]] = [
            ("silent drop of every open connection", proxy.silent_drop),
            ("reset (RST) of every open connection", proxy.reset),
            ("handshakes never answered for 20 s", lambda: blackhole(proxy, 20.0)),
            ("200 ms added each way", lambda: proxy.latency(0.2)),
        ]
        for name, fault in kinds:
            runs = []
            for _ in range(repeats):
                operator.wait_idle(120)
                began = time.monotonic()
                ended = fault()
                ended = ended if isinstance(ended, float) else began
                version, _ = edits.edit()
                first, last = edits.reached(version)
                runs.append({"first": first - began, "last": last - began,
                             "first_after_end": first - ended,
                             "last_after_end": last - ended})
                proxy.heal()
            out["runs"][name] = runs
            print(f"  {name:<40} first {spread([r['first'] for r in runs])}, "
                  f"last {spread([r['last'] for r in runs])}"
                  + (f"; after it ended: last {spread([r['last_after_end'] for r in runs])}"
                     if runs[0]["last_after_end"] != runs[0]["last"] else ""))
        scrape = operator.scrape()
        out["silent_watches"] = scrape.value("configmirror_informer_silent_watches_total")
        out["given_up"] = scrape.value("configmirror_reconcile_given_up_total")
        print(f"  watches found silent: {out['silent_watches']:.0f}; keys given up: "
              f"{out['given_up']:.0f} (goal: 0)")
        assert operator.stop() == 0
    finally:
        if operator is not None and operator.proc.poll() is None:
            operator.stop()
        proxy.stop()
        watcher.stop()
        cluster.close()
    return out


def fresh_log(name: str) -> Path:
    """A log file of this run alone (OperatorProcess appends to the one it is given)."""
    path = RESULTS / name
    path.unlink(missing_ok=True)
    return path


def blackhole(proxy: FaultProxy, seconds: float) -> float:
    """New connections accepted and never answered, the open ones reset (so every one must
    be made again), for `seconds`; returns when it ended (time.monotonic())."""
    proxy.answer_new(False)
    proxy.reset()
    time.sleep(seconds)  # the fault's length is what is measured against, not a hope
    proxy.answer_new(True)
    return time.monotonic()


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    return (f"{statistics.median(ordered):5.1f} s (min {ordered[0]:.1f}, "
            f"max {ordered[-1]:.1f})")


# -- 2. quiet watches ---------------------------------------------------------------------------


def quiet(minutes: float) -> dict[str, Any]:
    cluster = BenchCluster(None)
    operator = OperatorProcess(cluster.kubeconfig, fresh_log("operator-quiet.log"))
    try:
        operator.wait_ready(120)
        operator.wait_idle(120)
        before = operator.scrape()
        print(f"\n2. quiet watches: nothing changes for {minutes:g} minutes (2 informers, "
              f"each watch asks the server for 300-599 s)")
        time.sleep(minutes * 60)  # the quiet period is the measurement itself
        after = operator.scrape()

        def delta(name: str, **labels: str) -> float:
            return after.value(name, **labels) - before.value(name, **labels)

        out = {"minutes": minutes,
               "restarts": delta("configmirror_informer_watch_restarts_total"),
               "silent_watches": delta("configmirror_informer_silent_watches_total"),
               "probes": delta("configmirror_informer_watch_probes_total"),
               "probes_that_found_events": delta("configmirror_informer_watch_probes_total",
                                                 result="missed"),
               "bookmarks": delta("configmirror_informer_events_total", type="BOOKMARK"),
               "rotations_allowed": 2 * int(minutes * 60 // 300)}
        print(f"  watch restarts: {out['restarts']:.0f} (goal: at most the servers' own "
              f"timeoutSeconds rotation: {out['rotations_allowed']} in {minutes:g} minutes); "
              f"watches found silent: {out['silent_watches']:.0f} (goal: 0)")
        print(f"  probes of silent watches: {out['probes']:.0f} "
              f"({out['probes_that_found_events']:.0f} found events); bookmarks received: "
              f"{out['bookmarks']:.0f}")
        assert operator.stop() == 0
    finally:
        if operator.proc.poll() is None:
            operator.stop()
        cluster.close()
    return out


# -- 3. overload: 429s under API Priority and Fairness -----------------------------------------


def overload(count: int) -> dict[str, Any]:
    assets = find_assets(REPO, build=True)
    if assets is None:
        sys.exit("bench: no control plane; run `make controlplane` (needs Go)")
    plane = ControlPlane(assets, extra_apiserver_flags=SMALL_SERVER_FLAGS)
    plane.start()
    cluster = BenchCluster(str(plane.kubeconfig))
    cluster.plane = plane  # the audit log and the server's CPU are this plane's
    watcher = ReplicaWatcher(cluster.kube)
    throttle: Throttle | None = None
    operator: OperatorProcess | None = None
    out: dict[str, Any] = {"namespaces": count}
    try:
        home = cluster.namespaces("overload-home", 1)[0]
        account = "writer"
        token = identity(cluster, home, account)
        kubeconfig = token_kubeconfig(plane.kubeconfig, token, RESULTS / "storm-writer.kc")
        throttle = Throttle(plane, home, account)
        throttle.apply()
        source_ns = cluster.namespaces("overload-src", 1)[0]
        targets = cluster.namespaces("storm", count)
        bodies = RESULTS / "bodies-storm.jsonl"
        bodies.write_text("".join(json.dumps(replica_body(source_ns, SOURCE, ns),
                                             separators=(",", ":")) + "\n" for ns in targets))
        print(f"\n3. overload: one seat for the writers' ServiceAccount under API Priority "
              f"and Fairness, 429 for the rest; {count} replicas")
        go_runs = [go_writer(cluster, kubeconfig, bodies, watcher, targets)]
        operator = OperatorProcess(kubeconfig, fresh_log("operator-storm.log"))
        operator.wait_ready(120)
        mark = time.time()
        started = time.monotonic()
        cluster.kube.request("create", f"/api/v1/namespaces/{source_ns}/configmaps", body={
            "metadata": {"name": SOURCE, "annotations": {REPLICATE_TO: "storm-*"}},
            "data": {"payload": "x" * 900}})
        wait(lambda: watcher.live() >= count, 900, "the operator's replicas under 429s")
        seconds = time.monotonic() - started
        operator.wait_idle(300)
        requests = cluster.requests("configmirror/", mark, time.time() + 1) or {}
        scrape = operator.scrape()
        ours = {"seconds": seconds, "rate": count / seconds,
                "created": sum(n for (v, r, c), n in requests.items()
                               if v == "create" and r == "configmaps" and c == 201),
                "refused": sum(n for (_, _, c), n in requests.items() if c == 429),
                "given_up": scrape.value("configmirror_reconcile_given_up_total"),
                "log_lines": len(operator.log().splitlines())}
        assert operator.stop() == 0
        operator = None
        cluster.delete_replicas(targets, watcher)
        settle()
        go_runs.append(go_writer(cluster, kubeconfig, bodies, watcher, targets))
        go_rate = statistics.mean(r["writes"] / r["seconds"] for r in go_runs)
        go = {"rate": go_rate, "runs": go_runs}
        out.update(configmirror=ours, go=go)
        print(f"  Go client-go writer, 32 goroutines: {go['rate']:.0f} writes/s (mean of a "
              f"run before and one after the operator: "
              + "; ".join(f"{r['writes']} written in {r['seconds']:.1f} s, {r['refused']} "
                          f"429s, {r['errors']} given up" for r in go_runs) + ")")
        print(f"  configmirror, default flags: {ours['rate']:.0f} writes/s ({seconds:.1f} s "
              f"from the source's creation to the last replica), {ours['refused']:.0f} 429s")
        print(f"  configmirror / Go writer under the same limits = "
              f"{ours['rate'] / go['rate']:.2f}")
        print(f"  configmirror writes: {ours['created']} by the audit log (goal: exactly "
              f"{count}); keys given up: {ours['given_up']:.0f} (goal: 0); log lines: "
              f"{ours['log_lines']}")
    finally:
        if operator is not None:
            operator.stop()
        if throttle is not None:
            throttle.remove()
        watcher.stop()
        cluster.close()
    return out


def identity(cluster: BenchCluster, namespace: str, name: str) -> str:
    """A ServiceAccount bound to cluster-admin; returns a token of it."""
    kube = cluster.kube
    kube.request("create", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                 body={"metadata": {"name": name}})
    kube.request("create", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body={
        "metadata": {"name": f"{namespace}-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    from kubernetes import client, config
    api = client.CoreV1Api(config.new_client_from_config(cluster.kubeconfig))
    return service_account_token(api, namespace, name, create=False)


def go_writer(cluster: BenchCluster, kubeconfig: Path, bodies: Path, watcher: ReplicaWatcher,
              targets: list[str]) -> dict[str, Any]:
    """One pass of the Go writer over `bodies` (client-go waits out a 429's Retry-After and
    tries again, up to 10 times, then gives the write up), then its objects deleted again
    (by the admin, whom API Priority and Fairness exempts)."""
    binary = gowriter_binary()
    mark = time.time()
    done = subprocess.run([str(binary), "-kubeconfig", str(kubeconfig), "-bodies", str(bodies),
                           "-concurrency", "32", "-verb", "create"], capture_output=True,
                          text=True, check=False, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"bench: the Go writer failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    window = cluster.window("gowriter", "create", mark, int(result["writes"]))
    requests = cluster.requests("gowriter", mark, time.time() + 1) or {}
    run = {"seconds": window[1] if window else float(result["seconds"]),
           "writes": int(result["writes"]), "errors": int(result["errors"]),
           "refused": sum(n for (_, _, c), n in requests.items() if c == 429),
           "cpu_seconds": float(result["cpu_seconds"])}
    cluster.delete_replicas(targets, watcher)
    settle()
    return run


def settle() -> None:
    """Let the server's Retry-After fall back to 1 s before the next writer: API Priority and
    Fairness doubles it (up to 32 s) while a level drops 3 requests a second for as many
    seconds, and lowers it by one for each quieter second (dropped_requests_tracker.go)."""
    time.sleep(40)  # the server's own decay, with nothing to poll for it


# -- 4. the API server killed mid fan-out --------------------------------------------------------

OUTAGE_AFTER_EDIT = 0.3  # seconds from the edit to the kill (issue 42's run)
OUTAGE_SECONDS = 8.0
STALE_AFTER = 120.0  # a replica stale this long after the return is reported by name


def outage(namespaces: int, runs: int) -> dict[str, Any]:
    cluster = BenchCluster(None)
    assert cluster.plane is not None
    plane = cluster.plane
    operator: OperatorProcess | None = None
    out: dict[str, Any] = {"namespaces": namespaces, "runs": []}
    try:
        source_ns = cluster.namespaces("outage-src", 1)[0]
        cluster.namespaces("outage", namespaces)
        operator = OperatorProcess(cluster.kubeconfig, fresh_log("operator-outage.log"),
                                   *OPERATOR_FLAGS)
        operator.wait_ready(120)
        source = f"/api/v1/namespaces/{source_ns}/configmaps"
        cluster.kube.request("create", source, body={
            "metadata": {"name": SOURCE, "annotations": {REPLICATE_TO: "outage-*"}},
            "data": {"v": "0"}})
        replicas = Replicas(cluster.kube, SOURCE, "outage-")
        wait(lambda: replicas.holding("0") == namespaces, 600, "the first replicas",
             interval=1.0)
        print(f"\n4. the API server killed {OUTAGE_AFTER_EDIT} s after an edit, for "
              f"{OUTAGE_SECONDS:g} s, then started again (etcd kept); 1 source x {namespaces} "
              f"namespaces; seconds from its return (/readyz) to the last replica with the "
              f"new content, and to the Replicated Event of the edit")
        for run in range(1, runs + 1):
            operator.wait_idle(300)
            version = str(run)
            known = {e["metadata"]["name"]: e.get("count", 1)
                     for e in events_of(cluster.kube, source_ns)}
            updates = operator.metric("configmirror_replica_writes_total", action="update")
            cluster.kube.request("patch", f"{source}/{SOURCE}", body={"data": {"v": version}},
                                 content_type="application/merge-patch+json")
            time.sleep(OUTAGE_AFTER_EDIT)  # the moment of the kill is the scenario itself
            plane.stop_apiserver(kill=True)
            # Read with the server down, so no update can land after it: all done before.
            before = operator.metric("configmirror_replica_writes_total",
                                     action="update") - updates
            time.sleep(OUTAGE_SECONDS)  # the outage's length, likewise
            plane.start_apiserver()  # returns once /readyz answers
            back, back_epoch = time.monotonic(), time.time()
            last, event, stale = converged(replicas, cluster.kube, source_ns, known, version,
                                           namespaces, back)
            scrape = operator.scrape()
            writes = audit_after(plane.audit_log, back_epoch)
            record = {"run": run, "last_replica": last, "event": event,
                      "written_before_kill": before, "stale": stale[:20],
                      "stale_count": len(stale), **writes,
                      "given_up": scrape.value("configmirror_reconcile_given_up_total"),
                      "waiting_for_server": scrape.value("configmirror_work_pending",
                                                         state="waiting_for_server")}
            out["runs"].append(record)
            print(f"  run {run:2d}: last replica "
                  + (f"{last:5.1f} s" if last is not None else
                     f"STALE: {len(stale)} after {STALE_AFTER:.0f} s, e.g. {stale[:5]}")
                  + " after the return; Replicated Event "
                  + (f"{event:5.1f} s" if event is not None else "missing")
                  + f"; {before:.0f} updates before the kill; after the return (audit log): "
                    f"{writes['updates']} updates by {writes['codes']}, the last answered at "
                    f"{writes['last_update']:.1f} s ({', '.join(writes['last_namespaces'])}); "
                    f"given up so far {record['given_up']:.0f}", flush=True)
            if stale:
                break  # the operator's log and the audit log of this run are the evidence
        done = [r["last_replica"] for r in out["runs"] if r["last_replica"] is not None]
        events = [r["event"] for r in out["runs"] if r["event"] is not None]
        if done:
            print(f"  last replica after the return: median {statistics.median(done):.1f} s, "
                  f"worst {max(done):.1f} s; {len(done)} of {len(out['runs'])} runs within "
                  f"{STALE_AFTER:.0f} s, {sum(d <= 30 for d in done)} within 30 s (goal: all)")
        if events:
            print(f"  Replicated Event after the return: median {statistics.median(events):.1f}"
                  f" s, worst {max(events):.1f} s")
        assert operator.stop() == 0
    finally:
        if operator is not None and operator.proc.poll() is None:
            operator.stop()
        cluster.close()
    return out


class Replicas:
    """Lists the replicas of one source (by the admin, not through the operator)."""

    def __init__(self, kube: Kube, name: str, prefix: str) -> None:
        self.kube = kube
        self.name = name
        self.prefix = prefix

    def versions(self) -> dict[str, str]:
        body = self.kube.request("list", "/api/v1/configmaps", {
            "labelSelector": "configmirror.io/replica=true",
            "fieldSelector": f"metadata.name={self.name}"}, timeout=60)
        return {item["metadata"]["namespace"]: (item.get("data") or {}).get("v", "")
                for item in body.get("items") or ()
                if item["metadata"]["namespace"].startswith(self.prefix)}

    def holding(self, version: str) -> int:
        try:
            return sum(v == version for v in self.versions().values())
        except ApiError:
            return 0

    def stale(self, version: str, count: int) -> list[str]:
        """The namespaces whose replica does not hold `version` (all but `count` missing)."""
        try:
            versions = self.versions()
        except ApiError:
            return ["(the list failed)"]
        stale = sorted(ns for ns, v in versions.items() if v != version)
        return stale + ["(missing)"] * max(count - len(versions), 0)


def converged(replicas: Replicas, kube: Kube, namespace: str, known: dict[str, int],
              version: str, count: int, since: float
              ) -> tuple[float | None, float | None, list[str]]:
    """Polls until `count` replicas hold `version` and a `Replicated` Event in `namespace`
    counts updates and is not among `known` (name -> count, read before the edit), or
    STALE_AFTER seconds from `since` (time.monotonic()). Returns the seconds from `since` to
    each (None: not in time) and the namespaces whose replica is stale then."""
    last: float | None = None
    event: float | None = None
    stale: list[str] = ["(not listed yet)"]
    while time.monotonic() < since + STALE_AFTER and (last is None or event is None):
        if last is None:
            stale = replicas.stale(version, count)
            if not stale:
                last = time.monotonic() - since
        if event is None and any(
                e.get("reason") == "Replicated" and "updated 0" not in e.get("message", "")
                and e.get("count", 1) != known.get(e["metadata"]["name"])
                for e in events_of(kube, namespace)):
            event = time.monotonic() - since
        time.sleep(0.1)  # the resolution of both figures, beside a list of thousands
    return last, event, [] if last is not None else stale


def audit_after(log: Path, since: float) -> dict[str, Any]:
    """The operator's replica updates received by the server after `since` (epoch seconds):
    how many, by status code, when the last was answered (seconds after `since`), and the
    namespaces of the last three."""
    done: list[tuple[float, str, int]] = []
    with open(log) as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            ref = entry.get("objectRef") or {}
            if entry.get("verb") == "update" and ref.get("resource") == "configmaps" and \
                    entry.get("userAgent", "").startswith("configmirror/") and \
                    (received := epoch(entry.get("requestReceivedTimestamp", ""))) >= since:
                done.append((epoch(entry.get("stageTimestamp", "")) or received,
                             ref.get("namespace", ""),
                             int((entry.get("responseStatus") or {}).get("code") or 0)))
    done.sort()
    codes: dict[int, int] = {}
    for _, _, code in done:
        codes[code] = codes.get(code, 0) + 1
    return {"updates": len(done), "codes": codes,
            "last_update": done[-1][0] - since if done else 0.0,
            "last_namespaces": [ns for _, ns, _ in done[-3:]]}


def epoch(stamp: str) -> float:
    if not stamp:
        return 0.0
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def events_of(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    try:
        body = kube.request("list", f"/api/v1/namespaces/{namespace}/events", timeout=30)
    except ApiError:
        return []
    return list(body.get("items") or ())


if __name__ == "__main__":
    main()
