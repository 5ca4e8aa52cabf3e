"""Profiles a whole Python process, every thread, when CONFIGMIRROR_PROFILE names a folder.

bench/profile_operator.py puts this folder on the operator's PYTHONPATH, so the operator runs
exactly as in the benchmarks (`python -m configmirror run ...`) with two profilers on:
  - cProfile in every thread (threading.Thread.run is wrapped), timed by the thread's own
    CPU clock (time.thread_time), so waiting for the server or the GIL counts nothing;
    written at exit as one pstats file per thread-name group (workers, informers, ...) plus
    all.pstats;
  - a sampler: every 5 ms, the innermost frame of each thread, in wall-clock time (where a
    worker waits for the server, and where it computes), written as samples.json.
With CONFIGMIRROR_THREAD_CPU=file (no profiler: nothing slows down), each thread's own CPU
time (time.thread_time at its end) summed by thread-name group is written to that file as
JSON at exit. With CONFIGMIRROR_STACKS_ON_SIGUSR1=1, SIGUSR1 prints every thread's stack (a
hung stop); CONFIGMIRROR_SWITCH_INTERVAL=s sets sys.setswitchinterval (an experiment: 1, 5
and 20 ms gave the same CPU per write, docs/benchmarks.md §3). Without any it does nothing.
"""

from __future__ import annotations

import atexit
import collections
import cProfile
import json
import os
import pstats
import re
import sys
import threading
import time
from pathlib import Path

_OUT = os.environ.get("CONFIGMIRROR_PROFILE")
SAMPLER = "profiler-sampler"


def _group(name: str) -> str:
    """configmirror-worker-3 -> configmirror-worker; Thread-12 (process_request_thread) ->
    Thread (per-request HTTP threads)."""
    return re.sub(r"[-_ ]?\d+.*$", "", name) or name


def _start(out: Path) -> None:
    profiles: list[tuple[str, cProfile.Profile]] = []
    lock = threading.Lock()
    original_run = threading.Thread.run

    def run(self: threading.Thread) -> None:
        if self.name == SAMPLER:
            original_run(self)
            return
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append((self.name, profile))
        profile.enable()
        try:
            original_run(self)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign]
    main = cProfile.Profile(time.thread_time)
    profiles.append(("MainThread", main))

    samples: collections.Counter[tuple[str, str]] = collections.Counter()
    stop = threading.Event()
    names: dict[int, str] = {}

    def sample() -> None:
        me = threading.get_ident()
        while not stop.wait(0.005):
            for thread in threading.enumerate():
                names[thread.ident or 0] = thread.name
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                where = f"{frame.f_code.co_filename}:{frame.f_code.co_name}:{frame.f_lineno}"
                caller = frame.f_back
                if caller is not None:
                    where += f" <- {caller.f_code.co_filename}:{caller.f_code.co_name}"
                samples[(_group(names.get(ident, "?")), where)] += 1

    # A daemon: interpreter shutdown joins the other threads before atexit stops this one.
    sampler = threading.Thread(target=sample, name=SAMPLER, daemon=True)

    def dump() -> None:
        main.disable()
        stop.set()
        sampler.join(5)
        out.mkdir(parents=True, exist_ok=True)
        groups: dict[str, pstats.Stats] = {}
        every: pstats.Stats | None = None
        for name, profile in profiles:
            try:
                stats = pstats.Stats(profile)
            except TypeError:  # a thread that never ran
                continue
            group = _group(name)
            if group in groups:
                groups[group].add(profile)
            else:
                groups[group] = stats
            if every is None:
                every = pstats.Stats(profile)
            else:
                every.add(profile)
        for group, stats in groups.items():
            stats.dump_stats(str(out / f"{group}.pstats"))
        if every is not None:
            every.dump_stats(str(out / "all.pstats"))
        (out / "samples.json").write_text(json.dumps(
            [[group, where, n] for (group, where), n in samples.most_common()]))
        (out / "wall.txt").write_text(f"{time.monotonic() - started:.3f}\n")

    started = time.monotonic()
    atexit.register(dump)
    sampler.start()
    main.enable()


def _thread_cpu(out: Path) -> None:
    cpu: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    original_run = threading.Thread.run

    def run(self: threading.Thread) -> None:
        try:
            original_run(self)
        finally:
            spent = time.thread_time()
            with lock:
                cpu[_group(self.name)] += spent

    def dump() -> None:  # atexit runs after the interpreter has joined the other threads
        cpu["MainThread"] += time.thread_time()
        out.write_text(json.dumps(dict(cpu.most_common())))

    threading.Thread.run = run  # type: ignore[method-assign]
    atexit.register(dump)


if _OUT:
    _start(Path(_OUT))
if os.environ.get("CONFIGMIRROR_THREAD_CPU"):
    _thread_cpu(Path(os.environ["CONFIGMIRROR_THREAD_CPU"]))
if os.environ.get("CONFIGMIRROR_SWITCH_INTERVAL"):  # an experiment: the GIL's hand-over period
    sys.setswitchinterval(float(os.environ["CONFIGMIRROR_SWITCH_INTERVAL"]))
if os.environ.get("CONFIGMIRROR_STACKS_ON_SIGUSR1"):
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)
