"""kopf against configmirror on the convergence workload.

    python bench/bench_kopf.py [--sources 200] [--namespaces 50] [--workers 32] [--timeout 900]

Runs bench/kopf_replicator.py (kopf, installed for the bench only) on the same workload as
bench_convergence.py, then prints configmirror_time / kopf_time and both API request counts
(configmirror's from bench_convergence.py's results for the same shape; bench/plot.py draws
them together).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from harness import REPO, RESULTS, Session, common_args, load, save, wait

SOURCE_NS = "configmirror-bench-sources"


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    total = args.sources * args.namespaces
    with Session(args.kubeconfig) as session:
        cluster, watcher = session.cluster, session.watcher
        cluster.namespaces(SOURCE_NS, 1)
        cluster.namespaces("bench", args.namespaces)
        cluster.create_sources(f"{SOURCE_NS}-000", args.sources, "bench-*")
        since = time.monotonic()
        RESULTS.mkdir(parents=True, exist_ok=True)
        kopf = subprocess.Popen(
            [sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces", "--quiet",
             str(REPO / "bench" / "kopf_replicator.py")],
            env={**os.environ, "KUBECONFIG": cluster.kubeconfig,
                 "KOPF_BENCH_WORKERS": str(args.workers)},
            stdout=open(RESULTS / "kopf.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        try:
            wait(lambda: watcher.live() >= total or kopf.poll() is not None, args.timeout,
                 "kopf's replicas")
        finally:
            kopf.send_signal(signal.SIGINT)
            try:
                kopf.wait(30)
            except subprocess.TimeoutExpired:
                kopf.kill()
        curve = watcher.curve(since)
        done = watcher.live()
        span = curve[-1][0] - curve[0][0] if curve else float("inf")
        kopf_requests = sum((cluster.audit("kopf") or {}).values())
        print(f"kopf: {done}/{total} replicas in {span:.2f} s ({done / span:.0f} writes/s), "
              f"{kopf_requests} API requests (kopf itself and its handler)")
        shape = f"{args.sources}x{args.namespaces}"
        save(f"kopf-{shape}", {"seconds": span, "replicas": done, "rate": done / span,
                               "requests": kopf_requests, "workers": args.workers})
        ours = load(f"convergence-{shape}")
        if ours is None:
            print(f"  (run bench_convergence.py --sources {args.sources} --namespaces "
                  f"{args.namespaces} first for the comparison)")
            return
        seconds = ours["configmirror"]["seconds"]
        print(f"  configmirror_time / kopf_time = {seconds / span:.3f} (configmirror: "
              f"{seconds:.2f} s in bench_convergence.py's run, not paired with this one); "
              f"API requests: configmirror {ours['configmirror_requests']}, kopf "
              f"{kopf_requests}")


if __name__ == "__main__":
    main()
