"""Where the operator's CPU per write goes, by function: py-spy sampling a cold fan-out.

    python bench/profile_pyspy.py [--sources 1] [--namespaces 5000] [--workers 32] [--top 30]

Starts the operator under `py-spy record` (from PyPI; it launches the operator, since
attaching to a running process is not possible everywhere), waits until it is ready and idle,
creates the sources, waits for every replica and for the operator to be idle again, then
stops it. Only the thread holding the GIL is sampled (--gil: the one running Python code;
py-spy's idea of an idle thread misses one blocked in an SSL read), so the samples are the
Python part of the operator's CPU (not the C code that runs without the GIL: TLS, the
kernel's side of a socket). Stacks of the start-up (imports, the informers' first LISTs,
the configuration and its endpoint) are counted apart. Sampling does not slow the process
the way cProfile does (bench/profile_operator.py). Prints CPU per 1,000 writes of the
operator (its own process, not py-spy's), then the write phase's samples by module and the
functions with the most samples of their own (and inclusive).
The raw stacks are bench/results/pyspy/stacks.txt.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
import time
from collections import Counter
from pathlib import Path

from harness import RESULTS, Session, common_args, cpu_of, load_average, wait

SOURCE_NS = "pyspy-src"
RATE = 250  # samples per second per thread


def main() -> None:
    parser = common_args(__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=1)
    parser.add_argument("--namespaces", type=int, default=5000)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    pyspy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or \
        shutil.which("py-spy")
    if pyspy is None:
        sys.exit("profile_pyspy: no py-spy; pip install py-spy")
    out = RESULTS / "pyspy"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    stacks = out / "stacks.txt"
    wrapper = out / "python"  # what the operator is launched with: py-spy, then python
    wrapper.write_text(f"#!/bin/sh\nexec {pyspy} record --rate {RATE} --format raw "
                       f"--gil --nonblocking -o {stacks} -- {sys.executable} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    total = args.sources * args.namespaces
    with Session(args.kubeconfig) as session:
        cluster, watcher = session.cluster, session.watcher
        cluster.namespaces(SOURCE_NS, 1)
        cluster.namespaces("spy", args.namespaces)
        print(f"py-spy profile: {args.sources} sources x {args.namespaces} namespaces, "
              f"--workers {args.workers} --kube-api-qps 0; {load_average()}")
        real, sys.executable = sys.executable, str(wrapper)
        try:
            operator = session.operator(args.workers)
        finally:
            sys.executable = real
        operator.wait_ready(120)
        session.idle(operator, 300)
        child = _child(operator.pid)
        cpu = startup = cpu_of(child)
        started = time.monotonic()
        cluster.create_sources(f"{SOURCE_NS}-000", args.sources, "spy-*")
        wait(lambda: watcher.live() >= total, 1200, "the replicas")
        seconds = time.monotonic() - started
        session.idle(operator, 300)
        cpu = cpu_of(child) - cpu
        writes = operator.writes()
        os.kill(child, signal.SIGTERM)  # py-spy writes its stacks when its child ends
        assert operator.proc.wait(120) == 0
    print(f"  start-up to ready and idle: {startup:.2f} s of CPU (in the samples too: imports, "
          f"the informers' first LISTs)")
    print(f"  {writes:.0f} writes in {seconds:.1f} s; the operator's CPU from the sources' "
          f"creation to idle: {cpu:.2f} s = {cpu / writes * 1000:.2f} s per 1,000 writes")
    report(stacks, args.top)


def _child(pid: int) -> int:
    """The process py-spy launched (the operator)."""
    def children() -> list[str]:
        found: list[str] = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += (task / "children").read_text().split()
        return found
    wait(lambda: bool(children()), 30, "py-spy to launch the operator")
    return int(children()[0])


def report(stacks: Path, top: int) -> None:
    """Samples by module and by function (own and inclusive), from py-spy's raw stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    total = startup = 0
    for line in stacks.read_text().splitlines():
        frames, _, count = line.rpartition(" ")
        n = int(count)
        names = [_function(frame) for frame in frames.split(";")[1:]]  # [0]: the thread
        if not names:
            continue
        if any(name.startswith(STARTUP) for name in names):
            startup += n
            continue
        total += n
        own[names[-1]] += n
        modules[names[-1].partition(" ")[2].partition(":")[0]] += n
        for name in set(names):
            inclusive[name] += n
    print(f"\n== {startup} samples ({startup / RATE:.1f} s) in the start-up, left out; "
          f"{total} ({total / RATE:.1f} s) holding the GIL after it, by module (own samples)")
    for module, n in modules.most_common(15):
        print(f"  {n / total:6.1%}  {module}")
    print(f"\n== top {top} functions by own samples (inclusive beside)")
    for name, n in own.most_common(top):
        print(f"  {n / total:6.1%} {inclusive[name] / total:6.1%}  {name}")
    print(f"\n== top {top} functions by inclusive samples")
    for name, n in inclusive.most_common(top):
        print(f"  {n / total:6.1%}  {name}")


STARTUP = ("_find_and_load ", "Informer._list ", "endpoint ", "load_configuration ")


def _function(frame: str) -> str:
    """`function (path:line)` -> `function file` with the path shortened to its module."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rpartition(":")[0]
    for marker in ("site-packages/", "lib/python3.", "src/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "lib/python3.":
                path = path.partition("/")[2]
            break
    return f"{name} {path}"


if __name__ == "__main__":
    main()
