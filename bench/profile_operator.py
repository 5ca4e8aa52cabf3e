"""Profile the operator on one shape (default: 1 source x 5,000 namespaces), every thread.

    python bench/profile_operator.py [--sources 1] [--namespaces 5000] [--workers 32] [--top 25]

Runs the operator exactly as the benchmarks do (--kube-api-qps 0) with
bench/profiling/sitecustomize.py on its PYTHONPATH: cProfile in every thread and a 5 ms
wall-clock sampler. It converges the shape, then edits the source once (every replica is
updated), and stops the operator. Prints, per thread group, the functions with the most
CPU time (cProfile's tottime and cumtime; deterministic profiling inflates Python-heavy code
by up to about 2x) and where the workers spend wall-clock time. The raw files are in
bench/results/profile/ (open them with `python -m pstats`).
"""

from __future__ import annotations

import json
import pstats
import shutil
import time
from collections import Counter

from harness import (
    REPO,
    RESULTS,
    Session,
    common_args,
    load_average,
    wait,
)

SOURCE_NS = "profile-src"


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=1)
    parser.add_argument("--namespaces", type=int, default=5000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    out = RESULTS / "profile"
    shutil.rmtree(out, ignore_errors=True)
    total = args.sources * args.namespaces
    with Session(args.kubeconfig) as session:
        cluster, watcher = session.cluster, session.watcher
        cluster.namespaces(SOURCE_NS, 1)
        cluster.namespaces("prof", args.namespaces)
        names = cluster.create_sources(f"{SOURCE_NS}-000", args.sources, "prof-*", payload=900)
        print(f"profile: {args.sources} sources x {args.namespaces} namespaces, "
              f"--workers {args.workers} --kube-api-qps 0; {load_average()}")
        started = time.monotonic()
        operator = session.operator(args.workers, env={
            "PYTHONPATH": str(REPO / "bench" / "profiling"), "CONFIGMIRROR_PROFILE": str(out)})
        operator.wait_ready(120)
        cpu = operator.cpu_seconds()
        wait(lambda: watcher.live() >= total, 1200, "the replicas")
        create_seconds = time.monotonic() - started
        session.idle(operator, 300)
        edited = time.monotonic()
        for name in names:
            cluster.kube.request("patch", f"/api/v1/namespaces/{SOURCE_NS}-000/configmaps/{name}",
                                 body={"data": {"v": "2"}},
                                 content_type="application/merge-patch+json")
        wait(lambda: sum(1 for v, _ in watcher.versions.values() if v == "2") >= total, 1200,
             "the edit to reach every replica")
        edit_seconds = time.monotonic() - edited
        session.idle(operator, 300)
        cpu = operator.cpu_seconds() - cpu
        writes = operator.writes()
        assert operator.stop(120) == 0
    print(f"  {writes:.0f} writes: create {create_seconds:.1f} s, edit {edit_seconds:.1f} s; "
          f"operator CPU (profiled) {cpu:.1f} s = {cpu / writes * 1000:.2f} s per 1000 writes")
    report(out, args.top)


def report(out: object, top: int) -> None:
    from pathlib import Path

    folder = Path(str(out))
    for path in sorted(folder.glob("*.pstats")):
        if path.stem == "all":
            continue
        stats = pstats.Stats(str(path))
        total = stats.total_tt  # type: ignore[attr-defined]
        if total < 0.5:
            continue
        print(f"\n== {path.stem}: {total:.1f} s of CPU by cProfile; top by own time")
        stats.sort_stats("tottime").print_stats(top)
    samples = json.loads((folder / "samples.json").read_text())
    by_group: Counter[str] = Counter()
    for group, _, n in samples:
        by_group[group] += n
    print("\n== wall-clock samples (5 ms), by thread group:", dict(by_group.most_common()))
    for group in ("configmirror-worker",):
        print(f"\n== where {group} threads are, wall clock (top {top})")
        rows = [(where, n) for g, where, n in samples if g == group]
        for where, n in rows[:top]:
            print(f"  {n / by_group[group]:6.1%}  {where}")


if __name__ == "__main__":
    main()
