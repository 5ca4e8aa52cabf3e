"""Settings: what the command line and CONFIGMIRROR_* environment variables configure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from configmirror.replication.spec import DEFAULT_DROP, DEFAULT_EXCLUDED


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
    # The operator's own namespace: in a pod the pod's (policy.own_namespace), outside one
    # this. It never receives replicas, whatever its labels.
    operator_namespace: str = "configmirror"
    # Member clusters (operator/fleet.py): this cluster's name, as sources' replicate-to-clusters
    # and replicas in members name it; and whether the inventory of members (Secrets labelled
    # configmirror.io/cluster in the operator's namespace) is watched at all.
    cluster_name: str = "local"
    member_clusters: bool = False
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
    # --adopt-from: whose mirrors every source takes over in place ("": none, unless a source
    # says so with configmirror.io/adopt).
    adopt_from: str = ""
    # The kinds replicated (comma-separated; the flag may be repeated): ConfigMaps always,
    # and each other kind only when named here (its RBAC comes with it): a built-in kind by
    # its name, a custom resource as GROUP/VERSION/Kind (resolved through discovery).
    kinds: str = "configmap"
    # The roles (names) a replicated RoleBinding may reference; the operator's `bind` is
    # granted on these names only. Empty: no RoleBinding source is valid.
    bindable_roles: str = ""

    @property
    def secrets(self) -> list[str]:
        """The Secret names replicated (empty: Secrets are never read)."""
        return [n.strip() for n in self.secret_names.split(",") if n.strip()]

    @property
    def kind_names(self) -> list[str]:
        """The kinds --kinds names, each once, in order: a built-in kind's name in lower case,
        a custom resource's GROUP/VERSION/Kind as written."""
        names = (n.strip() if "/" in n else n.strip().lower() for n in self.kinds.split(","))
        return list(dict.fromkeys(n for n in names if n))


# Go's time.ParseDuration: a sign, then one or more numbers each with its unit.
_NUMBER = r"\d+\.?\d*|\.\d+"
_DURATION_PART = re.compile(rf"({_NUMBER})(ns|us|\u00b5s|\u03bcs|ms|s|m|h)", re.ASCII)
_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0,
          "m": 60.0, "h": 3600.0}
DURATION_SYNTAX = "Go's syntax: 90s, 10m, 1h30m, 1.5s, 300ms; a bare number is seconds"


def parse_duration(text: str) -> float:
    """Seconds in a duration written as Go's time.ParseDuration reads it (`90s`, `10m`,
    `1h30m`, `1.5s`, `300ms`), or as a bare number of seconds (`60`, `0.5`), which older
    configmirror flags took. Raises ValueError saying what is wrong (not naming the text)."""
    body = text.strip()
    sign, body = (body[0], body[1:]) if body[:1] in ("+", "-") else ("", body)
    if re.fullmatch(_NUMBER, body, re.ASCII):
        seconds = float(body)
    else:
        parts = _DURATION_PART.findall(body)
        if not body or "".join(n + u for n, u in parts) != body:
            raise ValueError(f"not a duration ({DURATION_SYNTAX})")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if sign == "-" and seconds:
        raise ValueError("a negative duration")
    if seconds == float("inf"):
        raise ValueError("too long a duration")
    return seconds


def format_duration(seconds: float) -> str:
    """`60s`, `0.5s`: how --help and plan say a duration."""
    return f"{seconds:g}s"
