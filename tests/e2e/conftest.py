"""End-to-end helpers: the operator as a subprocess (`configmirror run`), and ConfigMap makers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from configmirror.envtest import free_port
from tests.conftest import Cluster, wait_for


class Operator:
    """One `configmirror run` process against the test cluster."""

    def __init__(self, kubeconfig: Path, log: Path, *flags: str,
                 env: dict[str, str] | None = None) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log
        args = [sys.executable, "-m", "configmirror", "run", "--kubeconfig", str(kubeconfig),
                "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
                "--health-probe-bind-address", f"127.0.0.1:{self.health_port}",
                "--resync-period", "30", *flags]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})

    def wait_ready(self, timeout: float = 30) -> None:
        wait_for(lambda: self.get("/readyz", self.health_port) == "ok" or self._exited(),
                 timeout=timeout, what="the operator to become ready")
        assert self.proc.poll() is None, f"operator exited early:\n{self.log()}"

    def _exited(self) -> bool:
        return self.proc.poll() is not None

    @staticmethod
    def get(path: str, port: int) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return str(resp.read().decode())
        except OSError:
            return None

    def metric(self, name: str, labels: str = "") -> float:
        """A sample from /metrics, e.g. metric('configmirror_replica_writes_total',
        'action="create"'); 0 if absent."""
        text = self.get("/metrics", self.metrics_port) or ""
        pattern = "^" + re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else
                                           r"(\{[^}]*\})?") + r" ([0-9.e+-]+)$"
        return sum(float(m.group(m.lastindex or 1))
                   for m in re.finditer(pattern, text, re.MULTILINE))

    def writes(self) -> float:
        return self.metric("configmirror_replica_writes_total")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"operator ignored SIGTERM for {timeout} s") from None
        return self.proc.returncode


IN_CLUSTER = os.environ.get("CONFIGMIRROR_E2E_OPERATOR") == "in-cluster"


class InClusterOperator:
    """The operator `make kind-test` deployed: running already, not ours to start or stop."""

    @staticmethod
    def _local_only(what: str) -> Any:
        pytest.skip(f"needs a local operator process ({what}); the in-cluster one is used")

    def wait_ready(self, timeout: float = 30) -> None:
        pass

    def metric(self, name: str, labels: str = "") -> float:
        return self._local_only("its /metrics")  # type: ignore[no-any-return]

    def writes(self) -> float:
        return self.metric("configmirror_replica_writes_total")

    def log(self) -> str:
        return self._local_only("its log")  # type: ignore[no-any-return]

    def stop(self, timeout: float = 30) -> int:
        return self._local_only("stopping it")  # type: ignore[no-any-return]


class Operators:
    """Starts operators for one test and stops them (checking a clean exit) afterwards."""

    def __init__(self, cluster: Cluster, folder: Path) -> None:
        self.cluster = cluster
        self.folder = folder
        self.started: list[Operator] = []
        self.in_cluster_used = False

    def __call__(self, *flags: str, kubeconfig: Path | None = None, wait: bool = True,
                 env: dict[str, str] | None = None) -> Operator:
        if IN_CLUSTER:
            if flags or kubeconfig or self.in_cluster_used:
                InClusterOperator._local_only("flags or restarts")
            self.in_cluster_used = True
            return InClusterOperator()  # type: ignore[return-value]
        # CONFIGMIRROR_E2E_OPERATOR_KUBECONFIG runs the operator as another identity (the
        # RBAC proof runs these tests with only deploy/'s ServiceAccount token).
        default = os.environ.get("CONFIGMIRROR_E2E_OPERATOR_KUBECONFIG") or self.cluster.kubeconfig
        op = Operator(kubeconfig or Path(default),
                      self.folder / f"operator-{len(self.started)}.log", *flags, env=env)
        self.started.append(op)
        if wait:
            op.wait_ready()
        return op

    def stop_all(self) -> None:
        codes = [(op, op.stop()) for op in self.started]
        for op, code in codes:
            assert code == 0, f"operator exited with {code}:\n{op.log()[-3000:]}"


@pytest.fixture
def operators(cluster: Cluster, tmp_path: Path) -> Iterator[Operators]:
    ops = Operators(cluster, tmp_path)
    try:
        yield ops
    finally:
        ops.stop_all()


@pytest.fixture
def operator(operators: Operators) -> Operator:
    """A running operator with default flags."""
    return operators()


def configmap(name: str, annotations: dict[str, str] | None = None,
              data: dict[str, str] | None = None, **extra: Any) -> client.V1ConfigMap:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations,
                                     labels=extra.pop("labels", None)),
        data=data if data is not None else {"greeting": "hello"}, **extra)


def read(cluster: Cluster, namespace: str, name: str) -> client.V1ConfigMap | None:
    try:
        return cluster.core.read_namespaced_config_map(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def events(cluster: Cluster, namespace: str, name: str, reason: str | None = None
           ) -> list[client.CoreV1Event]:
    found = cluster.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in found if reason is None or e.reason == reason]
