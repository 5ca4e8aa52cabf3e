"""kopf against configmirror on the convergence workload, and the convergence plot.

    python bench/bench_kopf.py [--sources 200] [--namespaces 50] [--workers 4] [--timeout 900]

Runs bench/kopf_replicator.py (kopf, installed for the bench only) on the same workload as
bench_convergence.py, then prints configmirror_time / kopf_time and both API request counts,
and plots replicas over time for the bare client, configmirror and kopf (docs/convergence.png)
from this run and bench_convergence.py's results.
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
        requests = {f"{v} {r}": n for (v, r), n in (cluster.audit("kopf") or {}).items()}
        save("kopf", {"seconds": span, "replicas": done, "requests": kopf_requests,
                      "request_kinds": requests,
                      "curve": curve[::max(1, len(curve) // 400)]})
        print(f"kopf: {done}/{total} replicas in {span:.2f} s ({done / span:.0f} writes/s), "
              f"{kopf_requests} API requests (kopf itself and its handler)")
        ours = load("convergence")
        if ours is None:
            print("  (run bench_convergence.py first for the comparison and the plot)")
            return
        our_requests = sum(ours["configmirror_requests"].values())
        print(f"  configmirror_time / kopf_time = {ours['configmirror_seconds'] / span:.3f}; "
              f"API requests: configmirror {our_requests}, kopf {kopf_requests}")
        plot(ours, curve, total)


def plot(ours: dict[str, object], kopf_curve: list[tuple[float, int]], total: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for label, curve in (("bare client (API server limit)", ours["baseline_curve"]),
                         ("configmirror", ours["configmirror_curve"]),
                         ("kopf", kopf_curve)):
        points = list(curve)  # type: ignore[call-overload]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], label=label)
    ax.set_xlabel("seconds since start (for the operators: since their process started)")
    ax.set_ylabel("replicas created")
    ax.set_title(f"Converging {total:,} replicas on a local kube-apiserver")
    ax.axhline(total, color="grey", linewidth=0.5)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    out = REPO / "docs" / "convergence.png"
    out.parent.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    print(f"  plot: {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
