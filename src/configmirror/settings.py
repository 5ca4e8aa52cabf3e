"""Settings: what the command line and CONFIGMIRROR_* environment variables configure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from configmirror.spec import DEFAULT_DROP, DEFAULT_EXCLUDED


@dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = None
    context: str | None = None
    workers: int = 32  # measured: docs/benchmarks.md, "--workers"
    max_retries: int = 5
    resync_period: float = 600.0
    source_namespaces: str = "*"
    source_namespace_selector: str = ""  # deploy/ and the chart: configmirror.io/source=true
    exclude_namespaces: str = DEFAULT_EXCLUDED
    drop_labels: str = DEFAULT_DROP
    drop_annotations: str = DEFAULT_DROP
    leader_elect: bool = False
    leader_election_namespace: str = "configmirror"
    leader_election_id: str = "configmirror"
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    log_format: str = "text"
    log_level: str = "info"
    dry_run: bool = False
    drain_timeout: float = 25.0  # SIGTERM: how long in-flight reconciles may take to finish
    # Seconds every removal waits after its cause is first seen (a source deleted, a namespace
    # that stops matching): a source recreated, or a label put back, within it costs nothing.
    delete_grace: float = 60.0
    # configmirror_source_replicas{kind, source, state}: a series per source and state, so
    # off unless asked (cardinality).
    source_metrics: bool = False
    # The client-side limit on requests per second, shared by every request (0: none), and
    # the burst above it (kube-controller-manager's --kube-api-qps/--kube-api-burst).
    kube_api_qps: float = 50.0
    kube_api_burst: int = 100
    # Secrets are off unless an admin names them: exact names, and the namespaces (globs)
    # whose Secrets of those names are sources.
    secret_names: str = ""
    secret_source_namespaces: str = ""

    @property
    def secrets(self) -> list[str]:
        """The Secret names replicated (empty: Secrets are never read)."""
        return [n.strip() for n in self.secret_names.split(",") if n.strip()]


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)(h|ms|m|s))")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float:
    """Seconds in a duration as Kubernetes tools write them: `60s`, `1m30s`, `1h`, `500ms`,
    `0` (or a plain number of seconds). Raises ValueError naming the text."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"{text!r} is not a duration (use e.g. 60s, 1m30s, 0s)") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not 0 <= seconds < float("inf"):  # negative, NaN or infinite
        raise ValueError(f"{text!r} is not a duration (use e.g. 60s, 1m30s, 0s)")
    return seconds


def format_duration(seconds: float) -> str:
    """`60s`, `0.5s`: how --help and plan say a duration."""
    return f"{seconds:g}s"
