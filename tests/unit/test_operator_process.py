"""The launcher's stop: an operator that ignores SIGTERM fails the test with its threads'
stacks, so that a hang in CI says where it hung."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from configmirror_testing.operator import OperatorProcess
from configmirror_testing.wait import wait_for

# Stands in for an operator whose shutdown hangs: SIGTERM ignored, a thread blocked in a wait.
HUNG = """
import signal, sys, threading, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.argv[1:] == ["stubborn"]:
    signal.signal(signal.SIGABRT, signal.SIG_IGN)
def blocked_in_shutdown():
    threading.Event().wait()
threading.Thread(target=blocked_in_shutdown, daemon=True).start()
print("started", flush=True)
time.sleep(600)
"""


def hung_operator(tmp_path: Path, *args: str) -> OperatorProcess:
    """A process in the launcher's place, with faulthandler on as the launcher turns it on."""
    op = OperatorProcess.__new__(OperatorProcess)
    op.log_path = tmp_path / "operator.log"
    with open(op.log_path, "ab") as out:
        op.proc = subprocess.Popen([sys.executable, "-c", HUNG, *args], stdout=out,
                                   stderr=subprocess.STDOUT, env={"PYTHONFAULTHANDLER": "1"})
    wait_for(lambda: "started" in op.log(), timeout=30, what="the stand-in to start")
    return op


def test_an_operator_that_ignores_sigterm_fails_with_its_threads_stacks(tmp_path: Path) -> None:
    op = hung_operator(tmp_path)
    with pytest.raises(AssertionError) as raised:
        op.stop(timeout=0.5)
    message = str(raised.value)
    assert "ignored SIGTERM for 0.5 s" in message
    assert "blocked_in_shutdown" in message, "the hung thread's stack is in the message"
    assert op.proc.returncode == -6, "SIGABRT ended it: it does not outlive the test"


def test_one_that_ignores_sigabrt_too_is_killed(tmp_path: Path) -> None:
    op = hung_operator(tmp_path, "stubborn")
    with pytest.raises(AssertionError, match="ignored SIGTERM"):
        op.stop(timeout=0.5, abort_timeout=0.5)
    assert op.proc.returncode == -9


def test_an_operator_that_stops_gives_its_exit_code(tmp_path: Path) -> None:
    op = OperatorProcess.__new__(OperatorProcess)
    op.log_path = tmp_path / "operator.log"
    op.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    assert op.stop(timeout=10) == -15
