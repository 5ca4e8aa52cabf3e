"""Memory: the operator's resident memory with 10,000 ConfigMaps of ~1 KiB in the cluster.

    python bench/bench_memory.py [--configmaps 10000] [--namespaces 50]
                                 [--wide-sources 5] [--wide-namespaces 5000]

Three clusters' worth of objects, each measured after the operator has synced and gone idle
(--kube-api-qps 0):
  plain     10,000 ConfigMaps that are not sources (what most clusters hold)
  replicas  200 sources x 50 namespaces = 10,000 replicas (what configmirror manages)
  wide      5 sources x 5,000 namespaces = 25,000 replicas (the previous case deleted first)
For each: the operator's RSS (and peak), the size of those objects' JSON as the API returns
it, and the interpreter's baseline (a Python that imported configmirror and holds nothing).
Goal: RSS <= 3 x JSON + baseline. The namespaces are cached too; their JSON is printed
beside (with 5,000 of them it is no longer negligible) but not counted in the ratio.
"""

from __future__ import annotations

import json
import subprocess
import sys

from harness import (
    REPLICA_SELECTOR,
    BenchCluster,
    Session,
    common_args,
    load_average,
    parallel,
    peak_rss_of,
    rss_of,
    wait,
)


def interpreter_baseline() -> int:
    """RSS of a Python that has imported everything the operator imports, and nothing else."""
    child = subprocess.Popen(
        # Every module of the command line (whatever its commands' modules are called) and
        # the operator's manager, which `run` imports when it starts.
        [sys.executable, "-c", "import importlib, pkgutil, sys, configmirror.cli, "
         "configmirror.operator.manager; [importlib.import_module(m.name) for m in "
         "pkgutil.iter_modules(configmirror.cli.__path__, 'configmirror.cli.')]; "
         "print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    rss = rss_of(child.pid)
    child.communicate("")
    return rss


def json_size(cluster: BenchCluster, selector: str | None,
              path: str = "/api/v1/configmaps") -> tuple[int, int]:
    """(objects, bytes of their JSON) for the objects at `path` the operator caches."""
    count = size = 0
    query: dict[str, object] = {"limit": 500, "labelSelector": selector}
    while True:
        body = cluster.kube.request("list", path, query, timeout=120)
        for item in body["items"]:
            count += 1
            size += len(json.dumps(item, separators=(",", ":")))
        if not body["metadata"].get("continue"):
            return count, size
        query["continue"] = body["metadata"]["continue"]


def measure(session: Session, label: str, baseline: int, workers: int,
            expect_replicas: int) -> dict[str, float]:
    cluster = session.cluster
    operator = session.operator(workers)
    wait(lambda: session.watcher.live() >= expect_replicas, 1800, "convergence")
    wait(lambda: operator.metric("configmirror_informer_relists_total") >= 2, 120, "sync")
    session.idle(operator, 120)
    rss, high = operator.rss_bytes(), peak_rss_of(operator.proc.pid)
    operator.stop()
    objects, size = json_size(cluster, None)
    spaces, space_size = json_size(cluster, None, "/api/v1/namespaces")
    ratio = (rss - baseline) / size
    mib = 1024 * 1024
    print(f"  {label:<9} {objects:6d} ConfigMaps, JSON {size / mib:6.1f} MiB; operator RSS "
          f"{rss / mib:6.1f} MiB (peak {high / mib:.1f}); (RSS - baseline) / JSON = "
          f"{ratio:.2f} (goal <= 3); {spaces} namespaces, JSON {space_size / mib:.1f} MiB",
          flush=True)
    return {"objects": objects, "json": size, "rss": rss, "peak": high, "ratio": ratio,
            "namespaces": spaces, "namespace_json": space_size}


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--configmaps", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--wide-sources", type=int, default=5)
    parser.add_argument("--wide-namespaces", type=int, default=5000)
    args = parser.parse_args()
    with Session(args.kubeconfig) as session:
        cluster = session.cluster
        baseline = interpreter_baseline()
        print(f"memory: interpreter baseline (configmirror imported) "
              f"{baseline / 1024 / 1024:.1f} MiB; {load_average()}", flush=True)
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
        sources = cluster.create_sources("mem-src-000", per_ns, "mem-0*")
        measure(session, "replicas", baseline, args.workers, per_ns * len(targets))

        parallel(lambda name: cluster.kube.request(
            "delete", f"/api/v1/namespaces/mem-src-000/configmaps/{name}"), sources, 8)
        for ns in targets:
            cluster.kube.request("delete", f"/api/v1/namespaces/{ns}/configmaps",
                                 {"labelSelector": REPLICA_SELECTOR}, timeout=120)
        wait(lambda: session.watcher.live() == 0, 300, "the replicas to be deleted")
        cluster.namespaces("memw", args.wide_namespaces)
        wide = args.wide_sources * args.wide_namespaces
        cluster.create_sources("mem-src-000", args.wide_sources, "memw-*")
        measure(session, "wide", baseline, args.workers, wide)
        print(f"  at the end: {load_average()}")


if __name__ == "__main__":
    main()
