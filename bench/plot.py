"""The figures of docs/performance.md and docs/benchmarks.md, from the results the benchmark
scripts saved (`make bench-plot`).

    python bench/plot.py

docs/scale.png (bench_scale.py): configmirror and the Go operator baseline (client-go writer +
informer) from 1,000 to 100,000 replicas: seconds to write them all, RSS, latencies, CPU.

docs/convergence.png: left, write rates per shape (bench_convergence.py, bench_storm.py): the
Go writer at its best and at the operator's concurrency, the Python bare client, configmirror
(and kopf where bench_kopf.py ran); right, configmirror and the Go writer at each worker count
(bench_workers.py).
"""

from __future__ import annotations

from typing import Any

from bench_scale import quantiles
from harness import REPO, RESULTS, load


def shapes() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(RESULTS.glob("convergence-*.json")) + sorted(RESULTS.glob("storm-*.json")):
        result = load(path.stem)
        if result is None:
            continue
        kind = "storm" if path.stem.startswith("storm") else "convergence"
        label = (f"storm: {result['namespaces']:,} new ns\nx {result['sources']} sources"
                 if kind == "storm" else f"{result['sources']} x {result['namespaces']:,}")
        kopf = load(f"kopf-{result['sources']}x{result['namespaces']}") if kind != "storm" \
            else None
        found.append((label, {**result, "kopf": kopf}))
    order = {"1 x": 0, "200": 1, "20 ": 2, "sto": 3}
    return sorted(found, key=lambda item: order.get(item[0][:3], 9))


def mean_rate(runs: list[dict[str, Any]]) -> float:
    seconds = sum(r["seconds"] for r in runs) / len(runs)
    return float(runs[0]["writes"] / seconds)


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    scale()
    convergence()


def scale() -> None:
    """docs/scale.png from bench/results/scale.json, when bench_scale.py has run."""
    import matplotlib.pyplot as plt

    result = load("scale")
    if result is None:
        print("plot: no bench/results/scale.json (python bench/bench_scale.py); "
              "docs/scale.png left as it is")
        return
    rows = result["rows"]
    replicas = [r["replicas"] for r in rows]
    mib = 2**20

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), dpi=100)
    (converge, memory), (latency, cpu) = axes
    converge.plot(replicas, [r["configmirror"]["seconds"] for r in rows], "o-",
                  label="configmirror: first write to last")
    converge.plot(replicas, [r["configmirror_wall_seconds"] for r in rows], "o--",
                  label="configmirror: process start to last write")
    converge.plot(replicas, [r["go_informer"]["seconds"] for r in rows], "s-",
                  label="Go client-go writer + informer")
    converge.set_ylabel("seconds to write every replica")
    memory.plot(replicas, [r["rss_in_sync"] / mib for r in rows], "o-",
                label="configmirror, in sync")
    memory.plot(replicas, [r["rss_restarted"] / mib for r in rows], "o--",
                label="configmirror, restarted and idle")
    if all(r["go_informer"].get("max_rss_bytes") for r in rows):
        memory.plot(replicas, [r["go_informer"]["max_rss_bytes"] / mib for r in rows], "s-",
                    label="Go writer + informer, peak")
    memory.set_ylabel("RSS (MiB)")
    for key, label, marker in (("edit_latencies", "edit -> last replica", "o"),
                               ("new_namespace_latencies", "new namespace -> its last replica",
                                "^")):
        latency.plot(replicas, [quantiles(r[key])[0] * 1000 for r in rows], f"{marker}-",
                     label=f"{label}, p50")
        latency.plot(replicas, [quantiles(r[key])[1] * 1000 for r in rows], f"{marker}--",
                     label=f"{label}, p99")
    latency.set_ylabel("milliseconds")
    latency.set_ylim(bottom=0)

    def per_1000(run: dict[str, Any]) -> float:
        return float(run["cpu_seconds"]) / run["writes"] * 1000

    cpu.plot(replicas, [per_1000(r["configmirror"]) for r in rows], "o-",
             label="configmirror, CPU s per 1,000 writes")
    cpu.plot(replicas, [per_1000(r["go_informer"]) for r in rows], "s-",
             label="Go writer + informer, CPU s per 1,000 writes")
    cpu.set_ylabel("CPU seconds per 1,000 writes")
    cpu.set_ylim(bottom=0)
    idle = cpu.twinx()
    idle.plot(replicas, [r["idle_millicores"] for r in rows], "d:", color="grey",
              label="configmirror idle, millicores (right)")
    idle.set_ylabel("idle millicores")
    idle.set_ylim(bottom=0)
    idle.legend(fontsize=8, loc="center right")
    for ax in axes.flat:
        ax.set_xscale("log")
        ax.set_xticks(replicas, [f"{n:,}" for n in replicas])
        ax.minorticks_off()
        ax.set_xlabel(f"replicas ({result['namespaces']:,} namespaces x 1-"
                      f"{max(r['sources'] for r in rows)} sources)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    converge.set_yscale("log")
    cpu.legend(fontsize=8, loc="lower left")
    idle.set_ylim(0, 2 * max(r["idle_millicores"] for r in rows))
    fig.suptitle(f"configmirror from {replicas[0]:,} to {replicas[-1]:,} replicas "
                 f"(--workers {result['workers']}, one control plane; bench/bench_scale.py)")
    out = REPO / "docs" / "scale.png"
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    print(f"plot: {out.relative_to(REPO)}")


def convergence() -> None:
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=100,
                                      gridspec_kw={"width_ratios": [3, 2]})
    found = shapes()
    series = [("Go client-go, 32 goroutines", "go@32"), ("Go client-go, same concurrency", "go@"),
              ("Python bare client", "python@"), ("configmirror", "configmirror"),
              ("kopf", "kopf")]
    width = 0.16
    for i, (label, key) in enumerate(series):
        xs, ys = [], []
        for x, (_, result) in enumerate(found):
            workers = result["workers"]
            if key == "configmirror":
                rate = result["configmirror"]["rate"]
            elif key == "kopf":
                if not result.get("kopf"):
                    continue
                rate = result["kopf"]["rate"]
            else:
                name = key if key == "go@32" else f"{key}{workers}"
                runs = result["baselines"].get(name)
                if not runs:
                    continue
                rate = mean_rate(runs)
            xs.append(x + (i - 2) * width)
            ys.append(rate)
        if xs:
            left.bar(xs, ys, width, label=label)
    left.set_xticks(range(len(found)), [label for label, _ in found])
    left.set_ylabel("replica writes per second")
    workers = sorted({result["workers"] for _, result in found})
    left.set_title(f"Write rate by shape (configmirror --workers "
                   f"{','.join(map(str, workers))} --kube-api-qps 0)")
    left.legend(fontsize=8)
    left.grid(axis="y", alpha=0.3)

    sweeps = sorted(RESULTS.glob("workers-1x*.json"))
    sweep = load("workers-1x5000") or (load(sweeps[-1].stem) if sweeps else None)
    if sweep:
        rows = sweep["rows"]
        workers = [r["workers"] for r in rows]
        right.plot(workers, [r["go_rate"] for r in rows], "o-", label="Go writer, W goroutines")
        right.plot(workers, [r["rate"] for r in rows], "o-", label="configmirror, W workers")
        right.axhline(sweep["best"], color="grey", linewidth=0.8,
                      label="Go writer, 32 goroutines (start and end)")
        right.set_xscale("log", base=2)
        right.set_xticks(workers, [str(w) for w in workers])
        right.set_xlabel("W (goroutines / workers)")
        right.set_ylabel("replica writes per second")
        right.set_title(f"1 source x {sweep['namespaces']:,} namespaces, by worker count")
        right.legend(fontsize=8)
        right.grid(alpha=0.3)
    out = REPO / "docs" / "convergence.png"
    fig.tight_layout()
    fig.savefig(out)
    print(f"plot: {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
