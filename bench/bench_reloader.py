"""A rollout through a replica: a source edit -> configmirror updates the replica -> Reloader
patches the pod template of the Deployment that reads it.

    python bench_reloader.py --reloader BINARY [--edits 20]

Reloader (github.com/stakater/Reloader, measured at v1.4.22) is given by the path of a binary
the user built with its own instructions; the repository neither fetches nor builds it. It
reads its cluster from KUBECONFIG only and serves on :9090, which must be free.

The control plane is the benchmarks' own (or `--kubeconfig`): no kubelet, so the Deployment
(replicas 0) never has a pod; the pod template's change is what Reloader writes and what a
Deployment controller would roll out. The Deployment is annotated
`reloader.stakater.com/auto: "true"` and takes the replica as environment (`envFrom`). Each
edit changes the source's data; the script records when the replica holds it and when the
Deployment's template carries Reloader's hash of it (env STAKATER_<NAME>_CONFIGMAP), and
checks that each edit costs the Deployment exactly one new generation.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from configmirror.client.kube import ApiError
from configmirror.replication.spec import REPLICATE_TO
from configmirror_testing.controlplane import spawn, stop_process
from harness import (
    RESULTS,
    Session,
    common_args,
    load_average,
    machine,
    percentile,
    save,
    wait,
)

SOURCE = "app-config"
ENV = "STAKATER_APP_CONFIG_CONFIGMAP"   # Reloader's name for a ConfigMap named app-config
PORT = 9090                             # Reloader's metrics and liveness, fixed


def main() -> None:
    parser = common_args(__doc__ or "")
    parser.add_argument("--reloader", type=Path, required=True, help="Reloader's binary")
    parser.add_argument("--edits", type=int, default=20)
    args = parser.parse_args()
    if not os.access(args.reloader, os.X_OK):
        parser.error(f"--reloader {args.reloader}: not an executable file")
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", PORT)) == 0:
            parser.error(f"port {PORT} is taken: Reloader serves there and has no flag to move")

    with Session(args.kubeconfig) as session:
        kube = session.cluster.kube
        [home] = session.cluster.namespaces("reload-src", 1)
        [app] = session.cluster.namespaces("reload-app", 1)
        kube.request("create", f"/api/v1/namespaces/{home}/configmaps", body={
            "metadata": {"name": SOURCE, "annotations": {REPLICATE_TO: app}},
            "data": {"v": "0"}})
        operator = session.operator(args.workers)
        wait(lambda: replica(kube, app) == "0", 60, "the replica")
        deployment = f"/apis/apps/v1/namespaces/{app}/deployments/app"
        kube.request("create", f"/apis/apps/v1/namespaces/{app}/deployments", body={
            "metadata": {"name": "app", "annotations": {"reloader.stakater.com/auto": "true"}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "app"}},
                     "template": {"metadata": {"labels": {"app": "app"}}, "spec": {
                         "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                         "envFrom": [{"configMapRef": {"name": SOURCE}}]}]}}}})
        RESULTS.mkdir(parents=True, exist_ok=True)
        reloader = spawn([str(args.reloader), "--log-level", "error",
                          "--resources-to-ignore", "secrets"], RESULTS / "reloader.log",
                         env={**os.environ, "KUBECONFIG": session.cluster.kubeconfig})
        try:
            wait(live, 60, "Reloader's :9090/live")
            # Reloader acts on updates only: a first edit, repeated until it is seen, tells
            # that its informers are up; it is not counted.
            edit(kube, home, "warm")

            def warmed() -> bool:
                if stamp(kube, deployment) is not None:
                    return True
                edit(kube, home, f"warm-{time.monotonic()}")
                return False
            wait(warmed, 120, "Reloader's first patch", interval=2.0)
            session.idle(operator)
            generation = kube.request("get", deployment)["metadata"]["generation"]
            to_replica, to_template = [], []
            for i in range(args.edits):
                before = stamp(kube, deployment)
                sent = time.monotonic()
                edit(kube, home, str(i + 1))
                wait(lambda i=i: replica(kube, app) == str(i + 1), 60, "the replica",
                     interval=0.002)
                to_replica.append(time.monotonic() - sent)
                wait(lambda before=before: stamp(kube, deployment) not in (None, before), 60,
                     "Reloader's patch", interval=0.002)
                to_template.append(time.monotonic() - sent)
            final = kube.request("get", deployment)["metadata"]["generation"]
            code = stop_process(reloader)
        finally:
            if reloader.poll() is None:
                stop_process(reloader)

    result: dict[str, Any] = {
        "machine": machine(), "load": load_average(), "edits": args.edits,
        "edit_to_replica_s": to_replica, "edit_to_pod_template_s": to_template,
        "generations": final - generation, "reloader_exit": code,
        "operator_writes_per_edit": 1}
    save("reloader", result)

    def ms(values: list[float], q: float) -> str:
        return f"{percentile(values, q) * 1000:.0f} ms"
    own = [b - a for a, b in zip(to_replica, to_template, strict=True)]
    print(f"{args.edits} edits of {SOURCE} ({load_average()}):")
    print(f"  edit -> replica updated by configmirror: p50 {ms(to_replica, 0.5)}, "
          f"max {max(to_replica) * 1000:.0f} ms")
    print(f"  edit -> pod template patched by Reloader: p50 {ms(to_template, 0.5)}, "
          f"max {max(to_template) * 1000:.0f} ms "
          f"(Reloader's own part p50 {statistics.median(own) * 1000:.0f} ms)")
    print(f"  Deployment generations: {final - generation} for {args.edits} edits "
          f"({'one each' if final - generation == args.edits else 'NOT one each'}); "
          f"Reloader exited {code} on SIGTERM")


def replica(kube: Any, namespace: str) -> str | None:
    try:
        found = kube.request("get", f"/api/v1/namespaces/{namespace}/configmaps/{SOURCE}")
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    return (found.get("data") or {}).get("v")


def edit(kube: Any, namespace: str, value: str) -> None:
    kube.request("patch", f"/api/v1/namespaces/{namespace}/configmaps/{SOURCE}",
                 body={"data": {"v": value}}, content_type="application/merge-patch+json")


def stamp(kube: Any, deployment: str) -> str | None:
    """Reloader's hash of the ConfigMap on the Deployment's pod template, if it wrote one."""
    spec = kube.request("get", deployment)["spec"]["template"]["spec"]
    for entry in spec["containers"][0].get("env") or []:
        if entry["name"] == ENV:
            return str(entry.get("value"))
    return None


def live() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/live", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


if __name__ == "__main__":
    main()
