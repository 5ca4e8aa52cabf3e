"""Memory: the operator's resident memory with 10,000 ConfigMaps of ~1 KiB in the cluster.

    python bench/bench_memory.py [--configmaps 10000] [--namespaces 50]

Two clusters' worth of objects, each measured after the operator has synced and gone idle:
  plain     10,000 ConfigMaps that are not sources (what most clusters hold)
  replicas  200 sources x 50 namespaces = 10,000 replicas (what configmirror manages)
For each: the operator's RSS (and peak), the size of those objects' JSON as the API returns
it, and the interpreter's baseline (a Python that imported configmirror and holds nothing).
Goal: RSS <= 3 x JSON + baseline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness import (
    BenchCluster,
    Session,
    common_args,
    parallel,
    rss_of,
    wait,
)


def interpreter_baseline() -> int:
    """RSS of a Python that has imported everything the operator imports, and nothing else."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import configmirror.cli, configmirror.manager, sys; "
         "print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    rss = rss_of(child.pid)
    child.communicate("")
    return rss


def json_size(cluster: BenchCluster, selector: str | None) -> tuple[int, int]:
    """(objects, bytes of their JSON) for the ConfigMaps the operator caches."""
    count = size = 0
    query: dict[str, object] = {"limit": 500, "labelSelector": selector}
    while True:
        body = cluster.kube.request("list", "/api/v1/configmaps", query, timeout=120)
        for item in body["items"]:
            count += 1
            size += len(json.dumps(item, separators=(",", ":")))
        if not body["metadata"].get("continue"):
            return count, size
        query["continue"] = body["metadata"]["continue"]


def peak(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(session: Session, label: str, baseline: int, workers: int,
            expect_replicas: int) -> dict[str, float]:
    cluster = session.cluster
    operator = session.operator(workers)
    wait(lambda: session.watcher.live() >= expect_replicas, 600, "convergence")
    wait(lambda: operator.metric("configmirror_informer_relists_total") >= 2, 120, "sync")
    session.idle(operator, 120)
    rss, high = operator.rss_bytes(), peak(operator.proc.pid)
    operator.stop()
    objects, size = json_size(cluster, None)
    ratio = (rss - baseline) / size
    mib = 1024 * 1024
    print(f"  {label:<9} {objects:6d} ConfigMaps, JSON {size / mib:6.1f} MiB; operator RSS "
          f"{rss / mib:6.1f} MiB (peak {high / mib:.1f}); (RSS - baseline) / JSON = "
          f"{ratio:.2f} (goal <= 3)")
    return {"objects": objects, "json": size, "rss": rss, "peak": high, "ratio": ratio}


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--configmaps", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=50)
    args = parser.parse_args()
    with Session(args.kubeconfig) as session:
        cluster = session.cluster
        baseline = interpreter_baseline()
        print(f"memory: interpreter baseline (configmirror imported) "
              f"{baseline / 1024 / 1024:.1f} MiB")
        targets = cluster.namespaces("mem", args.namespaces)
        session.watcher  # noqa: B018 - start watching replicas before any exist
        per_ns = args.configmaps // len(targets)
        plain = [(ns, i) for ns in targets for i in range(per_ns)]
        parallel(lambda p: cluster.kube.request(
            "create", f"/api/v1/namespaces/{p[0]}/configmaps",
            body={"metadata": {"name": f"plain-{p[1]:04d}", "labels": {"app": "bench"}},
                  "data": {"payload": "y" * 900}}), plain, 8)
        measure(session, "plain", baseline, args.workers, 0)
        for ns in targets:
            cluster.kube.request("delete", f"/api/v1/namespaces/{ns}/configmaps",
                                 {"labelSelector": "app=bench"}, timeout=120)
        cluster.namespaces("mem-src", 1)
        cluster.create_sources("mem-src-000", per_ns, "mem-0*")
        measure(session, "replicas", baseline, args.workers, per_ns * len(targets))


if __name__ == "__main__":
    main()
