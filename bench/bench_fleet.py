"""Member clusters: 1 source x 3 clusters x N namespaces, configmirror against a Go writer per
cluster, and an edit's latency with one member down.

    python bench/bench_fleet.py [--namespaces 1000] [--edits 20] [--workers W] [--clusters 3]
    python bench/bench_convergence.py --clusters 3 --namespaces 1000     # the same

Three local control planes on this machine: the home cluster (the operator's, and the
source's) and members b and c, whose cluster Secrets name their API servers directly (no
fault proxy: its copying would be measured too). One source, `replicate-to: bench-*` and
`replicate-to-clusters: "*"`, reaches N namespaces in each cluster: 3 N replicas.

Baseline, in the same run: three Go client-go writers (bench/gowriter), one per cluster, started
together, each writing exactly the N bodies configmirror writes there with as many goroutines
as the operator has workers; once before and once after the operator, the mean used. Printed:
the operator's rate (3 N writes over the seconds from the source's creation to the last replica
in any cluster) against the writers' (3 N over the slowest writer's seconds), CPU seconds per
1,000 writes of each, the operator's writes per cluster (goal: exactly N each) and, after a
restart with nothing changed, its writes (goal: 0).

Then `--edits` edits of the source, one after another (the next once every replica holds the
last): p50 and max of edit -> the last replica holding it, per cluster; the same with member
b's kube-apiserver stopped (home and c: goal, as fast as with b healthy); and b's time from its
API server answering again to every replica there holding the last edit.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from configmirror.client.kube import Kube, load_configuration
from configmirror.replication.spec import REPLICATE_TO, REPLICATE_TO_CLUSTERS, SOURCE_CLUSTER
from configmirror_testing.cluster import Cluster
from configmirror_testing.fleet import Members, start_members
from harness import (
    ReplicaWatcher,
    Session,
    bodies_file,
    common_args,
    gowriter_binary,
    load_average,
    machine,
    operator_origin,
    replica_body,
    save,
    wait,
)

HOME = "local"                  # the operator's default --cluster-name
OPERATOR_NAMESPACE = "configmirror"
SOURCE_NS = "configmirror-bench-sources"
SOURCE = "ca"
PAYLOAD = 900


@dataclass
class Target:
    """One cluster the source reaches: how to write to it and what watches its replicas."""

    name: str
    kubeconfig: str
    kube: Kube
    watcher: ReplicaWatcher
    bodies: Path


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--clusters", type=int, default=3, choices=(2, 3),
                        help="the home cluster and one or two members")
    args = parser.parse_args()
    fleet(args.namespaces, args.edits, args.workers, args.clusters)


def fleet(count: int, edits: int, workers: int, clusters: int = 3) -> None:
    """The benchmark: `clusters` local control planes (home, b, c), `count` namespaces each."""
    with Session(None) as session:
        plane = session.cluster.plane
        assert plane is not None
        members = start_members(Cluster(plane.kubeconfig, plane), ("b", "c")[:clusters - 1])
        own: list[Target] = []
        try:
            run(session, members, count, edits, workers, own)
        finally:
            for target in own:
                target.watcher.stop()
                target.kube.close()
            members.stop()


def run(session: Session, members: Members, count: int, edits: int, workers: int,
        own: list[Target]) -> None:
    home = session.cluster
    clusters = 1 + len(members)
    print(f"fleet: 1 source x {clusters} clusters x {count} namespaces = {clusters * count} "
          f"replicas; "
          f"operator --workers {workers} --kube-api-qps 0; {machine()}")
    print(f"  at the start: {load_average()}")
    print(f"  operator: {operator_origin(None)}")
    targets = [Target(HOME, home.kubeconfig, home.kube, session.watcher,
                      bodies_file(f"fleet-{HOME}", bodies(count, None)))]
    for member in members:
        kubeconfig = str(member.direct_kubeconfig())
        kube = Kube(load_configuration(kubeconfig, pool_size=32), user_agent="bench")
        targets.append(Target(member.name, kubeconfig, kube, ReplicaWatcher(kube),
                              bodies_file(f"fleet-{member.name}", bodies(count, HOME))))
        own.append(targets[-1])
    for target in targets:
        namespaces(target.kube, count)
    binary = gowriter_binary()

    # 1. The Go writers, one per cluster, together; before the operator.
    go = [go_writers(binary, targets, "create", workers)]
    clear(binary, targets)

    # 2. configmirror, from a cold start: the cluster Secrets, the operator, then the source.
    for kind, body in (("namespaces", {"metadata": {"name": OPERATOR_NAMESPACE}}),
                       ("namespaces", {"metadata": {"name": SOURCE_NS}})):
        home.kube.request("create", f"/api/v1/{kind}", body=body)
    for member in members:
        home.kube.request("create", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets",
                          body=member.cluster_secret(kubeconfig=member.direct_kubeconfig()))
    flags = ("--member-clusters", "--operator-namespace", OPERATOR_NAMESPACE)
    operator = session.operator(workers, *flags)
    operator.wait_ready(120)
    for member in members:
        wait(lambda m=member.name: operator.metric(
            "configmirror_cluster_reachable", cluster=m) == 1, 120, f"member {member.name}")
    cpu = operator.cpu_seconds()
    since = time.monotonic()
    home.kube.request("create", f"/api/v1/namespaces/{SOURCE_NS}/configmaps", body={
        "metadata": {"name": SOURCE, "annotations": {
            REPLICATE_TO: "bench-*", REPLICATE_TO_CLUSTERS: "*"}},
        "data": {"payload": "x" * PAYLOAD}})
    for target in targets:
        wait(lambda t=target: t.watcher.live() >= count, 900,
             f"configmirror's replicas in {target.name}")
    finished = {t.name: t.watcher.curve(since)[-1][0] for t in targets}
    seconds = max(finished.values())
    operator.wait_idle(300)
    ours_cpu = operator.cpu_seconds() - cpu
    written = writes_by_cluster(operator, [t.name for t in targets])
    rss = operator.rss_bytes()

    # 3. Edits, all healthy; then with b's API server stopped; then b's catch-up.
    healthy = edit_latencies(home, targets, edits, "healthy")
    b = members.b
    b.stop_apiserver()
    try:
        up = [t for t in targets if t.name != b.name]
        down = edit_latencies(home, up, edits, "b-down")
    finally:
        started = time.monotonic()
        b.start_apiserver()
    last = f"b-down-{edits - 1}"
    b_target = next(t for t in targets if t.name == b.name)
    wait(lambda: b_target.watcher.holding[last] >= count, 300, "b to catch up")
    catch_up = b_target.watcher.last_reached[last] - started
    operator.wait_idle(300)

    # 4. Restart with nothing changed.
    before = sum(writes_by_cluster(operator, [t.name for t in targets]).values())
    assert operator.stop() == 0
    restarted = session.operator(workers, *flags)
    restarted.wait_ready(120)
    for member in members:
        wait(lambda m=member.name: restarted.metric(
            "configmirror_cluster_reachable", cluster=m) == 1, 120, f"member {member.name}")
    restarted.wait_idle(300)
    restart_writes = sum(writes_by_cluster(restarted, [t.name for t in targets]).values())
    assert restarted.stop() == 0

    # 5. The Go writers again, after the operator (its replicas deleted first).
    clear(binary, targets)
    go.append(go_writers(binary, targets, "create", workers))
    clear(binary, targets)

    go_seconds = statistics.mean(g["seconds"] for g in go)
    go_cpu = statistics.mean(g["cpu_seconds"] for g in go)
    total = clusters * count
    print(f"  at the end:   {load_average()}")
    print(f"  {'writer':<44} {'seconds':>8} {'writes/s':>9}   CPU s per 1000 writes")
    print(f"  {f'{clusters} Go client-go writers, {workers} goroutines each':<44} "
          f"{go_seconds:8.2f} {total / go_seconds:9.0f}   {go_cpu / total * 1000:.2f}")
    print(f"  {'configmirror, ' + str(workers) + ' workers per cluster':<44} "
          f"{seconds:8.2f} {total / seconds:9.0f}   {ours_cpu / total * 1000:.2f}")
    print(f"  (Go: mean of a run before and one after the operator, the slowest writer's "
          f"seconds; configmirror: source created -> last replica in any cluster, per "
          f"cluster {', '.join(f'{n} {s:.2f} s' for n, s in finished.items())})")
    print(f"  configmirror / {clusters} Go writers = {go_seconds / seconds:.2f} by rate, CPU per "
          f"write {ours_cpu / go_cpu:.2f}x theirs")
    print(f"  configmirror writes per cluster: {written} (goal: exactly {count} each); RSS in "
          f"sync {rss / 2**20:.0f} MiB")
    for label, latencies in (("all healthy", healthy), ("b's API server stopped", down)):
        print(f"  {edits} edits, {label}: edit -> last replica, per cluster: " + "; ".join(
            f"{name} p50 {statistics.median(v) * 1000:.0f} ms, max {max(v) * 1000:.0f} ms"
            for name, v in latencies.items()))
    print(f"  b, API server started again -> its {count} replicas hold the last edit: "
          f"{catch_up:.2f} s")
    print(f"  restart, nothing changed: {restart_writes:.0f} writes in all clusters (goal: 0; "
          f"{before:.0f} before it)")
    save(f"fleet-1x{clusters}x{count}", {
        "namespaces": count, "workers": workers, "edits": edits, "go": go,
        "configmirror_seconds": seconds, "configmirror_cpu_seconds": ours_cpu,
        "per_cluster_seconds": finished, "writes": written, "rss_in_sync": rss,
        "edit_latencies": {"healthy": healthy, "b_down": down}, "b_catch_up": catch_up,
        "restart_writes": restart_writes, "machine": machine()})


def bodies(count: int, source_cluster: str | None) -> list[dict[str, Any]]:
    """What configmirror writes in one cluster: in a member, marked with the home's name."""
    result = []
    for i in range(count):
        body = replica_body(SOURCE_NS, SOURCE, f"bench-{i:03d}", PAYLOAD)
        if source_cluster is not None:
            body["metadata"]["annotations"][SOURCE_CLUSTER] = source_cluster
        result.append(body)
    return result


def namespaces(kube: Kube, count: int) -> None:
    for i in range(count):
        kube.request("create", "/api/v1/namespaces", body={"metadata": {"name": f"bench-{i:03d}"}})


def go_writers(binary: Path, targets: list[Target], verb: str, concurrency: int
               ) -> dict[str, float]:
    """One Go writer per cluster, started together: the slowest one's seconds, their CPU."""
    procs = [subprocess.Popen(
        [str(binary), "-kubeconfig", t.kubeconfig, "-bodies", str(t.bodies),
         "-concurrency", str(concurrency), "-verb", verb],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for t in targets]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            sys.exit(f"bench: the Go writer failed: {err[-2000:]}")
        result = json.loads(out.strip().splitlines()[-1])
        if result["errors"]:
            sys.exit(f"bench: the Go writer had {result['errors']} errors; the first: "
                     f"{result.get('first_error')}")
        results.append(result)
    return {"seconds": max(float(r["seconds"]) for r in results),
            "cpu_seconds": sum(float(r["cpu_seconds"]) for r in results),
            "writes": sum(int(r["writes"]) for r in results)}


def clear(binary: Path, targets: list[Target]) -> None:
    """Delete every replica in every cluster and wait for the watches to agree."""
    go_writers(binary, targets, "delete", 32)
    for target in targets:
        wait(lambda t=target: t.watcher.live() == 0, 300,
             f"the replicas in {target.name} to be deleted")


def writes_by_cluster(operator: Any, names: list[str]) -> dict[str, float]:
    """The operator's replica writes by cluster: the members' by their counter, home's the
    rest of the total (configmirror_replica_writes_total counts every cluster's)."""
    counts = {name: sum(operator.metric("configmirror_cluster_replica_writes_total",
                                        cluster=name, action=action)
                        for action in ("create", "update", "delete")) for name in names[1:]}
    return {HOME: operator.writes() - sum(counts.values()), **counts}


def edit_latencies(home: Any, targets: list[Target], edits: int, label: str
                   ) -> dict[str, list[float]]:
    """Seconds from each edit of the source to the last replica holding it, per cluster."""
    latencies: dict[str, list[float]] = {t.name: [] for t in targets}
    count = targets[0].watcher.live()
    for i in range(edits):
        version = f"{label}-{i}"
        edited = time.monotonic()
        home.kube.request("patch", f"/api/v1/namespaces/{SOURCE_NS}/configmaps/{SOURCE}",
                          body={"data": {"v": version}},
                          content_type="application/merge-patch+json")
        for target in targets:
            wait(lambda t=target, v=version: t.watcher.holding[v] >= count, 120,
                 f"edit {version} in {target.name}", interval=0.005)
            latencies[target.name].append(target.watcher.last_reached[version] - edited)
    return latencies


if __name__ == "__main__":
    main()
