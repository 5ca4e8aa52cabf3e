"""The operator's CPU per write, in one process, without a cluster: a measure the load leaves alone.

    python bench/bench_write_path.py [--namespaces 2000] [--runs 3] [--base /tmp/hot-base]
                                     [--profile | --instructions]

Drives the real write path of a 1 x N fan-out through a real `Manager` (its queue, gate,
controller step, replicator, memory, informers, stores and metrics; no thread is started):
the source's watch event, its plan, then for every target key the controller's step
(`Controller._process`), the request written through `Kube` and `transport` to a socket
whose peer answers with the server's recorded answer (a 201 with the stored object,
managedFields included), and the watch event of that write read off a chunked stream,
applied to the cache and dispatched to the handler (the echo of our own write). The peer's
side costs the same in both arms (one recv, one send per write).

CPU is `time.process_time()` per write (its median, plus the plan's share): unlike the
wall clock it does not wait for other processes, but a loaded core still runs slower (a
busy sibling hyperthread, shared caches), which only ever adds, so the least of several
alternated runs is each tree's own figure, and cProfile's calls per write (`--profile`) are
exact. With `--instructions`, valgrind counts the instructions per write instead: exact
and the same at any load, but slow (minutes). Two trees are compared in one run: with
`--base DIR` (a checkout of the code before, e.g. a worktree of main) the arms alternate,
each in a fresh process with DIR/src first on its path. `--profile` adds cProfile's call
counts per write of the functions called most.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

SOURCE_NS = "configmirror-bench-sources-000"
PAYLOAD = 900
_ANSWER_HEAD = ("HTTP/1.1 201 Created\r\nAudit-Id: 5c3f0f2e-2a8c-4b8e-9a51-1f0d3c1b9a77\r\n"
                "Cache-Control: no-cache, private\r\nContent-Type: application/json\r\n"
                "X-Kubernetes-Pf-Flowschema-Uid: 0e7d4d2c-6e0b-4bb5-a4a0-3f0f6f1d2b11\r\n"
                "X-Kubernetes-Pf-Prioritylevel-Uid: 9b8f2c8e-1d57-4c33-8d3e-0f8a4c5b6d22\r\n"
                "Date: Wed, 02 Dec 2026 06:00:00 GMT\r\nContent-Length: {}\r\n\r\n")
_WATCH_HEAD = (b"HTTP/1.1 200 OK\r\nAudit-Id: 1\r\nCache-Control: no-cache, private\r\n"
               b"Content-Type: application/json\r\nDate: Wed, 02 Dec 2026 06:00:00 GMT\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")


class Peer:
    """The server's end: what the next request is answered with, sent once it is written."""

    def __init__(self) -> None:
        self.answer = b""


def scripted_socket(peer: Peer) -> tuple[socket.socket, socket.socket]:
    """(ours, the server's): ours answers each sendall with peer.answer from the other end."""
    ours, theirs = socket.socketpair()

    class Scripted(socket.socket):
        def sendall(self, data: Any, flags: int = 0) -> None:
            super().sendall(data, flags)
            theirs.recv(1 << 20)
            theirs.sendall(peer.answer)
    scripted = Scripted(ours.family, ours.type, ours.proto, fileno=ours.detach())
    return scripted, theirs


def stored(body: dict[str, Any], version: int) -> dict[str, Any]:
    """What the API server stores of a create of `body`, as it answers and watches it."""
    obj = json.loads(json.dumps(body))
    meta = obj["metadata"]
    meta.update({
        "uid": f"3f1e0c52-8a4b-4c8e-9d0e-{version:012d}", "resourceVersion": str(version),
        "creationTimestamp": "2026-12-02T06:00:00Z",
        "managedFields": [{
            "manager": "configmirror", "operation": "Update", "apiVersion": "v1",
            "time": "2026-12-02T06:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, **{f"f:{k}": {} for k in obj.get("data", {})}},
                         "f:metadata": {
                             "f:annotations": {".": {}, **{f"f:{k}": {}
                                                           for k in meta["annotations"]}},
                             "f:labels": {".": {}, **{f"f:{k}": {} for k in meta["labels"]}}}}}]})
    return obj


def arm(namespaces: int, profile: bool, limit: int | None = None) -> dict[str, Any]:
    """One measurement in this process, with whatever configmirror is first on the path;
    `limit`: stop after that many writes (the rest stay queued)."""
    from kubernetes import client as k8s_client

    import configmirror
    try:  # one package per layer
        from configmirror.client import transport
        from configmirror.client.kube import Kube
        from configmirror.operator.manager import Manager
        from configmirror.operator.settings import Settings
        from configmirror.replication.model import REPLICA_OF
        from configmirror.replication.plan import desired_body
        from configmirror.replication.spec import REPLICATE_TO
    except ImportError:  # a --base tree from before the packages: one flat module each
        from configmirror.kube import Kube  # type: ignore[no-redef]
        from configmirror.manager import Manager  # type: ignore[no-redef]
        from configmirror.model import REPLICA_OF  # type: ignore[no-redef]
        from configmirror.plan import desired_body  # type: ignore[no-redef]
        from configmirror.settings import Settings  # type: ignore[no-redef]
        from configmirror.spec import REPLICATE_TO  # type: ignore[no-redef]

        from configmirror import transport  # type: ignore[no-redef,attr-defined]
    try:
        from configmirror.vocabulary import CONFIGMAP
    except ImportError:  # the code before the vocabulary module (494891f)
        from configmirror.model import CONFIGMAP  # type: ignore[no-redef]

    configuration = k8s_client.Configuration()
    configuration.host = "http://127.0.0.1:9"
    kube = Kube(configuration, qps=0)
    peer = Peer()
    ends: list[socket.socket] = []

    def connect(timeout: float) -> Any:
        ours, theirs = scripted_socket(peer)
        ends.extend((ours, theirs))
        return transport._Connection(ours, timeout)
    kube._connections._connect = connect  # type: ignore[method-assign]
    manager = Manager(Settings(workers=32, kube_api_qps=0), kube)
    cached = manager.cache.kinds[CONFIGMAP]
    informer = next(i for i in cached.informers)
    ns_informer = manager.cache.namespace_informer

    def dispatch(inf: Any) -> None:
        """What the dispatcher thread does with what the reader queued."""
        batch = list(inf._changes)
        inf._changes.clear()
        for change in batch:
            if change is not None:
                inf._call(*change)

    names = [f"bench-{i:04d}" for i in range(namespaces)]
    for version, name in enumerate([SOURCE_NS, *names], start=1):
        ns_informer._apply({"type": "ADDED", "object": {"metadata": {
            "name": name, "uid": f"ns-{version}", "resourceVersion": str(version)},
            "status": {"phase": "Active"}}})
    dispatch(ns_informer)
    version = namespaces + 10
    source = {"metadata": {"namespace": SOURCE_NS, "name": "src-0000", "uid": "src",
                           "resourceVersion": str(version),
                           "creationTimestamp": "2026-12-02T06:00:00Z",
                           "annotations": {REPLICATE_TO: "bench-*"}},
              "data": {"payload": "x" * PAYLOAD}}
    # The watch stream, opened as the informer opens it.
    peer.answer = _WATCH_HEAD
    stream = kube.watch(informer._path, {"resourceVersion": str(version)}, read_timeout=60)
    watch_peer = ends[-1]
    informer._apply({"type": "ADDED", "object": source})
    # The answers and events, made before the clock starts (the server's work, not ours).
    owner = cached.caches.get(f"{SOURCE_NS}/src-0000")
    answers: dict[str, tuple[bytes, bytes]] = {}
    for i, name in enumerate(names):
        written = stored(desired_body(owner, name), version + 1 + i)
        body = json.dumps(written, separators=(",", ":")).encode()
        event = json.dumps({"type": "ADDED", "object": written},
                           separators=(",", ":")).encode() + b"\n"
        answers[name] = (_ANSWER_HEAD.format(len(body)).encode() + body,
                         b"%x\r\n%s\r\n" % (len(event), event))
    assert owner is not None and owner.compiled is not None
    assert all(REPLICA_OF in json.loads(a[0].split(b"\r\n\r\n", 1)[1])["metadata"]
               ["annotations"] for a in list(answers.values())[:1])
    controller = manager.controller
    queue = manager.queue

    clock = time.process_time
    per_write: list[float] = []  # each write's CPU, its watch event included
    once: list[float] = []  # the source's event and plan

    def run() -> int:
        started = clock()
        dispatch(informer)  # the source's event: its key queued
        while (item := queue.get()) is not None:
            if item.role == "target":
                answer, chunk = answers[item.namespace]
                peer.answer = answer
                controller._process(item, "0")
                watch_peer.sendall(chunk)
                informer._apply(stream.next_event(5.0))
                dispatch(informer)
                now = clock()
                per_write.append(now - started)
                if len(per_write) == limit:
                    break
            else:
                controller._process(item, "0")
                now = clock()
                once.append(now - started)
            started = now
        return len(per_write)

    gc.collect()
    profiler = cProfile.Profile() if profile else None
    started = time.process_time()
    if profiler is not None:
        profiler.enable()
    writes = run()
    if profiler is not None:
        profiler.disable()
    used = time.process_time() - started
    expected = namespaces if limit is None else limit
    assert writes == expected, (writes, expected)
    assert kube.total({"create"}) == expected
    replicator = manager.replicators[CONFIGMAP]
    memory = getattr(replicator, "_memory", None)  # before the memory module: its own field
    expectations = (memory.expectations if memory is not None
                    else replicator._expectations)  # type: ignore[attr-defined]
    assert len(expectations) == 0, "an echo was missed"
    # A write's median, plus its share of the plan: one key that met a busy core costs
    # more CPU (a shared cache, a sibling hyperthread), and the median leaves those out.
    typical = statistics.median(per_write) + sum(once) / namespaces
    result: dict[str, Any] = {"code": os.path.dirname(configmirror.__file__),
                              "us_per_write": typical * 1e6,
                              "us_mean": used / namespaces * 1e6, "writes": writes}
    if profiler is not None:
        stats = pstats.Stats(profiler)
        calls = sorted(((v[1], f"{os.path.basename(k[0])}:{k[2]}") for k, v in
                        stats.stats.items()), reverse=True)  # type: ignore[attr-defined]
        result["calls_per_write"] = sum(c for c, _ in calls) / namespaces
        result["top_calls"] = [(round(c / namespaces, 2), name) for c, name in calls[:40]]
        tottime = sorted(((v[2], f"{os.path.basename(k[0])}:{k[2]}") for k, v in
                          stats.stats.items()), reverse=True)  # type: ignore[attr-defined]
        result["top_tottime_us"] = [(round(t / namespaces * 1e6, 2), name)
                                    for t, name in tottime[:30]]
    return result


def instructions(namespaces: int, base: str | None) -> None:
    """Instructions per write, counted by valgrind (callgrind): the same on a loaded machine
    as on an idle one. Each tree runs twice, stopping after a quarter and after three
    quarters of the N writes; the difference over the writes between is the loop's alone
    (start-up, the recorded answers and the plan are the same in both)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [("this tree", os.path.join(here, "src"))]
    if base:
        trees.insert(0, ("base", os.path.join(os.path.abspath(base), "src")))
    low, high = namespaces // 4, namespaces * 3 // 4
    print(f"write path, 1 x {namespaces}, instructions per write (valgrind, writes {low} to "
          f"{high}); load {os.getloadavg()[0]:.2f}")
    counted: dict[str, float] = {}
    for label, src in trees:
        totals = []
        for limit in (low, high):
            err = subprocess.run(
                ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                 sys.executable, os.path.abspath(__file__), "--arm", "--namespaces",
                 str(namespaces), "--limit", str(limit)],
                env={**os.environ, "PYTHONPATH": src, "PYTHONHASHSEED": "0"}, check=True,
                capture_output=True, text=True).stderr
            totals.append(int(err.rsplit("Collected :", 1)[1].split()[0]))
        counted[label] = (totals[1] - totals[0]) / (high - low)
        print(f"  {label:9s} {counted[label] / 1000:8.1f} thousand instructions/write "
              f"(load {os.getloadavg()[0]:.2f})", flush=True)
    if base:
        print(f"  this tree / base: {counted['this tree'] / counted['base']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--base", help="a checkout of the code to compare with")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions under valgrind (exact, slow) instead")
    parser.add_argument("--arm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(arm(args.namespaces, args.profile, args.limit)))
        return
    if args.instructions:
        instructions(args.namespaces, args.base)
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [("this tree", os.path.join(here, "src"))]
    if args.base:
        trees.insert(0, ("base", os.path.join(os.path.abspath(args.base), "src")))
    print(f"write path, 1 x {args.namespaces}, CPU per write; load {os.getloadavg()[0]:.2f}")
    figures: dict[str, list[float]] = {label: [] for label, _ in trees}
    for run in range(args.runs):
        for label, src in trees:
            env = {**os.environ, "PYTHONPATH": src, "PYTHONHASHSEED": "0"}
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--arm", "--namespaces",
                 str(args.namespaces), *(["--profile"] if args.profile else [])],
                env=env, check=True, capture_output=True, text=True).stdout
            result = json.loads(out)
            figures[label].append(result["us_per_write"])
            line = (f"  run {run + 1} {label:9s} {result['us_per_write']:7.1f} us/write "
                    f"(median; mean {result['us_mean']:.1f})")
            if "calls_per_write" in result:
                line += f", {result['calls_per_write']:.0f} calls/write"
            print(line, f"(load {os.getloadavg()[0]:.2f})", flush=True)
            if args.profile and run == 0:
                print("    calls per write:", *(f"{c:6.2f} {n}" for c, n in
                                                 result["top_calls"]), sep="\n      ")
                print("    own time per write (us, under cProfile):",
                      *(f"{t:6.2f} {n}" for t, n in result["top_tottime_us"]),
                      sep="\n      ")
    # Another process on the core (a sibling hyperthread, the shared caches) only ever adds
    # CPU time to a run, so the least of the alternated runs is each tree's own cost.
    for label, values in figures.items():
        print(f"  {label}: least {min(values):.1f} us/write (median {statistics.median(values):.1f}"
              f", max {max(values):.1f})")
    if args.base:
        ratio = min(figures["this tree"]) / min(figures["base"])
        print(f"  this tree / base, least of each: {ratio:.3f}")


if __name__ == "__main__":
    main()
