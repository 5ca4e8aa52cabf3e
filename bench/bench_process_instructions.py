"""The whole operator process's instructions per write on a real control plane, by valgrind.

    python bench/bench_process_instructions.py [--namespaces 1000] [--rounds 1] [--base DIR]

`bench_write_path.py --instructions` counts one thread's write path on a scripted socket;
what `bench_convergence.py` reports is the CPU of the whole process (every worker, the
informers, TLS to a real API server) from ready to idle, and on a shared machine that moves
by up to a third with the load. This counts the same window exactly: the operator runs under
valgrind (callgrind), a 1 x N fan-out is created for it, and the instructions of every thread
from /readyz ok to idle (no work pending) are divided by N. Kernel time is not counted, and
the count still depends a little on timing (how many TLS connections the workers open while
they ramp up, each a full handshake of about 6 M instructions with OpenSSL 3), so the
handshakes in the window are counted too and the figure without them printed beside it.

With `--base DIR` (a checkout of other code, e.g. a worktree of 494891f) the trees alternate,
each operator with DIR/src first on its path, on one control plane; the replicas are deleted
between arms and the source is kept. Slow: a few minutes per arm at 1,000 namespaces.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from configmirror_testing.controlplane import free_port
from configmirror_testing.scrape import Scrape
from harness import REPO, RESULTS, Session, load_average, parallel, wait

SOURCE_NS = "configmirror-bench-sources"
HANDSHAKE = "_ssl__SSLSocket_do_handshake"


def callgrind_totals(path: Path) -> tuple[int, int, int]:
    """(instructions, TLS handshakes, their inclusive instructions) of one callgrind dump."""
    names: dict[str, str] = {}
    total = handshakes = handshake_cost = 0
    pending: str | None = None
    counted = False
    with path.open() as lines:
        for line in lines:
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
                continue
            fn = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if fn:
                if fn[3]:
                    names[fn[2]] = fn[3]
                pending = fn[2] if fn[1] == "cfn" else None
                continue
            if pending is not None and line.startswith("calls="):
                counted = names.get(pending) == HANDSHAKE
                if counted:
                    handshakes += int(line.split("=")[1].split()[0])
                continue
            if counted:  # the cost line after a call line: its inclusive cost
                handshake_cost += int(line.split()[1])
                counted = False
                pending = None
    return total, handshakes, handshake_cost


def trees_of(base: str | None) -> list[tuple[str, str]]:
    """("this tree", its src/), and with --base ("base", that checkout's src/)."""
    trees = [("this tree", str(REPO / "src"))]
    if base:
        trees.append(("base", str(Path(base).resolve() / "src")))
    return trees


def callgrind_operator(session: Session, src: str, out: Path, log: Path, metrics: int,
                       health: int, *flags: str) -> subprocess.Popen[bytes]:
    """`configmirror run` of `src` under callgrind (its dumps in `out`), on the session's
    cluster, serving /metrics and the probes on `metrics` and `health`."""
    out.mkdir(parents=True, exist_ok=True)
    args = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/callgrind.%p",
            sys.executable, "-m", "configmirror", "run",
            "--kubeconfig", str(session.cluster.kubeconfig),
            "--metrics-bind-address", f"127.0.0.1:{metrics}",
            "--health-probe-bind-address", f"127.0.0.1:{health}", "--workers", "32",
            "--log-level", "warning", *flags]
    with log.open("ab") as output:
        return subprocess.Popen(args, stdout=output, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": src, "PYTHONHASHSEED": "0"})


def dump(proc: subprocess.Popen[bytes], out: Path, count: int) -> Path:
    """Dump the counters of `proc` (callgrind zeroes them after a dump), its `count`th; the
    newest dump."""
    subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True,
                   capture_output=True, timeout=300)
    wait(lambda: len(list(out.glob(f"callgrind.{proc.pid}.*"))) >= count, 300,
         "callgrind's dump", interval=0.5)
    time.sleep(1)  # the file is written in pieces
    return max(out.glob(f"callgrind.{proc.pid}.*"), key=lambda p: int(p.suffix[1:]))


def one_arm(session: Session, src: str, namespaces: int, out: Path) -> dict[str, float]:
    """One operator of `src` under callgrind: the window's instructions per write."""
    watcher = session.watcher
    metrics, health = free_port(), free_port()
    proc = callgrind_operator(session, src, out, RESULTS / "process-instructions.log",
                              metrics, health, "--kube-api-qps", "0")

    def probe(url: str) -> bytes | None:
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                return bytes(resp.read())
        except OSError:
            return None

    def idle() -> bool:
        scrape = Scrape.fetch(f"http://127.0.0.1:{metrics}/metrics", timeout=60)
        return scrape is not None and scrape.idle()

    try:
        wait(lambda: probe(f"http://127.0.0.1:{health}/readyz") == b"ok", 900,
             "the operator under valgrind to be ready", interval=0.5)
        dump(proc, out, 1)
        started = time.monotonic()
        wait(lambda: watcher.live() >= namespaces, 1800, "the replicas", interval=0.5)
        seconds = time.monotonic() - started
        wait(idle, 900, "the operator to be idle", interval=1)
        window = dump(proc, out, 2)
        scrape = Scrape.fetch(f"http://127.0.0.1:{metrics}/metrics", timeout=60)
        writes = scrape.value("configmirror_replica_writes_total") if scrape else float("nan")
    finally:
        proc.terminate()
        proc.wait(120)
    total, handshakes, handshake_cost = callgrind_totals(window)
    return {"per_write": total / namespaces, "handshakes": handshakes,
            "without_handshakes": (total - handshake_cost) / namespaces, "writes": writes,
            "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--base", help="a checkout of the code to compare with")
    args = parser.parse_args()
    trees = trees_of(args.base)[::-1]  # the base first
    figures: Counter[str] = Counter()
    with Session(None) as session, tempfile.TemporaryDirectory() as scratch:
        cluster, watcher = session.cluster, session.watcher
        cluster.namespaces(SOURCE_NS, 1)
        targets = cluster.namespaces("bench", args.namespaces)
        cluster.create_sources(f"{SOURCE_NS}-000", 1, "bench-*")
        print(f"whole process, 1 x {args.namespaces}, instructions per write from ready to "
              f"idle (valgrind); {load_average()}")
        for run in range(args.rounds):
            for label, src in trees:
                got = one_arm(session, src, args.namespaces,
                              Path(scratch) / f"{run}-{label.replace(' ', '-')}")
                figures[label] += got["without_handshakes"]
                print(f"  run {run + 1} {label:9s} {got['per_write'] / 1000:7.1f} thousand "
                      f"instructions/write; {got['handshakes']:.0f} TLS handshakes in the "
                      f"window, without them {got['without_handshakes'] / 1000:7.1f} thousand "
                      f"({got['writes']:.0f} writes in {got['seconds']:.0f} s under valgrind)",
                      flush=True)
                parallel(lambda ns: cluster.kube.request(
                    "delete", f"/api/v1/namespaces/{ns}/configmaps/src-0000"), targets, 16)
                wait(lambda: watcher.live() == 0, 300, "the replicas to be deleted")
    if args.base:
        print(f"  this tree / base, without handshakes, mean of {args.rounds}: "
              f"{figures['this tree'] / figures['base']:.3f}")


if __name__ == "__main__":
    main()
