"""`configmirror run` as a subprocess: the one launcher of the tests, benchmarks and demo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import ClassVar

from configmirror_testing.controlplane import free_port
from configmirror_testing.scrape import Scrape
from configmirror_testing.wait import wait_for


class OperatorProcess:
    """One operator process on its own ports, logging to `log`; stopped with SIGTERM.

    Every one launched is in `launched` (in order), so that a failed test's report can show
    the logs of the operators it ran (tests/conftest.py). Each runs with Python's
    faulthandler on: one that ignores SIGTERM is sent SIGABRT, and the stacks of all its
    threads end up in its log, which says where it hung."""

    launched: ClassVar[list[OperatorProcess]] = []

    def __init__(self, kubeconfig: Path | str, log: Path, *flags: str,
                 env: dict[str, str] | None = None) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log
        log.parent.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "configmirror", "run", "--kubeconfig", str(kubeconfig),
                "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
                "--health-probe-bind-address", f"127.0.0.1:{self.health_port}", *flags]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         env={**os.environ, "PYTHONFAULTHANDLER": "1",
                                              **(env or {})})
        OperatorProcess.launched.append(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- probes and metrics ------------------------------------------------------------------

    def probe(self, path: str) -> str | None:
        """The body of /healthz or /readyz, or None when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}",
                                        timeout=5) as resp:
                return str(resp.read().decode())
        except OSError:
            return None

    def scrape(self) -> Scrape:
        """One reading of /metrics (an empty one while the process does not answer)."""
        return Scrape.fetch(f"http://127.0.0.1:{self.metrics_port}/metrics") or Scrape(())

    def metric(self, name: str, **labels: str) -> float:
        """`name`'s samples whose labels include `labels`, summed (0 if absent)."""
        return self.scrape().value(name, **labels)

    def writes(self) -> float:
        """Replica writes (create, update, delete) by the operator's own count."""
        return self.metric("configmirror_replica_writes_total")

    def idle(self) -> bool:
        """Nothing queued, in flight, delayed or waiting for the server (one scrape)."""
        scrape = Scrape.fetch(f"http://127.0.0.1:{self.metrics_port}/metrics")
        return scrape is not None and scrape.idle()

    # -- lifecycle ------------------------------------------------------------------------------

    def wait_ready(self, timeout: float = 30) -> None:
        wait_for(lambda: self.probe("/readyz") == "ok", timeout=timeout,
                 what="the operator to become ready", abort=self._died)

    def wait_idle(self, timeout: float = 60) -> None:
        wait_for(self.idle, timeout=timeout, what="the operator to be idle", abort=self._died)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        """User + system CPU time the process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 30, abort_timeout: float = 10) -> int:
        """SIGTERM and wait; raises AssertionError if it ignores SIGTERM, after a SIGABRT
        (faulthandler writes every thread's stack to the log: the message ends with them)
        and, if that does not end it either, a SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGABRT)
                try:
                    self.proc.wait(abort_timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                raise AssertionError(f"operator ignored SIGTERM for {timeout} s; its log's "
                                     f"end, with its threads' stacks at the SIGABRT:\n"
                                     f"{self.log_tail(200)}") from None
        return self.proc.returncode

    def log_tail(self, lines: int = 60) -> str:
        """The log's last `lines` lines: what every failure message about it shows."""
        try:
            return "\n".join(self.log().splitlines()[-lines:])
        except OSError as err:
            return f"(no log: {err})"

    def _died(self) -> str | None:
        if self.proc.poll() is None:
            return None
        return f"the operator exited with {self.proc.returncode}:\n{self.log_tail()}"
