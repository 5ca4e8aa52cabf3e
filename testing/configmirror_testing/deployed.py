"""configmirror as a cluster runs it: a Deployment's pods, their rollout, the leader, /metrics.

Read through the API server only (the pod proxy reaches /metrics), so the same reader works on
any cluster with a kubelet: the kind clusters of `make cluster-test` and `make kind-test`.

    operator = DeployedOperator(api_client, "configmirror", "configmirror")
    operator.wait_rollout()          # every pod of the current template Ready, one leader
    operator.leader()                # the pod holding the Lease
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from configmirror_testing.scrape import Scrape
from configmirror_testing.wait import wait_for

METRICS_PORT = 8080


@dataclass(frozen=True)
class Rollout:
    """A finished rollout: the Ready pods of the Deployment's current template, and the
    leader among them."""

    pods: tuple[str, ...]
    leader: str


class DeployedOperator:
    """The Deployment `name` in `namespace`; `lease` names its leader-election Lease."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str,
                 lease: str | None = None) -> None:
        self.namespace = namespace
        self.name = name
        self.lease = lease or name
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)

    def deployment(self) -> dict[str, Any]:
        return self._json(self.apps.read_namespaced_deployment(self.name, self.namespace))

    def pods(self) -> list[dict[str, Any]]:
        """The Deployment's pods, of any template, not being deleted."""
        labels = self.deployment()["spec"]["selector"]["matchLabels"]
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        found = self._json(self.core.list_namespaced_pod(self.namespace,
                                                         label_selector=selector))["items"]
        return [p for p in found if "deletionTimestamp" not in p["metadata"]]

    def leader(self) -> str | None:
        """The pod holding the Lease (an identity is `<hostname>_<random>`; a pod's hostname
        is its name), or None when nobody holds it."""
        try:
            lease = self._json(self.coordination.read_namespaced_lease(self.lease,
                                                                       self.namespace))
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        holder = lease["spec"].get("holderIdentity")
        return str(holder).rsplit("_", 1)[0] if holder else None

    def metrics(self, pod: str) -> Scrape:
        """One reading of a pod's /metrics, through the API server's pod proxy."""
        text = self.core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod}:{METRICS_PORT}", self.namespace, "metrics", _request_timeout=10)
        return Scrape.parse(str(text))

    def log(self, pod: str) -> str:
        return str(self.core.read_namespaced_pod_log(pod, self.namespace, _request_timeout=30))

    def wait_rollout(self, timeout: float = 180,
                     args: Callable[[list[str]], bool] | None = None) -> Rollout:
        """Wait until the Deployment's current template runs with every replica Ready and no
        other pod left, and one of them leads (the Lease and the `configmirror_leader`
        metric agree). `args`, when given, must accept every pod's container args."""

        def settled() -> Rollout | None:
            deployment = self.deployment()
            status, wanted = deployment["status"], deployment["spec"]["replicas"]
            if (status.get("observedGeneration") != deployment["metadata"]["generation"]
                    or any(status.get(field) != wanted
                           for field in ("replicas", "updatedReplicas", "readyReplicas"))):
                return None
            pods = self.pods()
            if len(pods) != wanted or not all(is_ready(p) for p in pods):
                return None
            if args is not None and not all(args(p["spec"]["containers"][0].get("args", []))
                                            for p in pods):
                return None
            names = tuple(sorted(p["metadata"]["name"] for p in pods))
            leader = self.leader()
            if leader not in names:
                return None
            try:
                leading = [n for n in names
                           if self.metrics(n).value("configmirror_leader") == 1]
            except client.ApiException:  # a pod the proxy cannot reach yet
                return None
            return Rollout(names, leader) if leader and leading == [leader] else None

        rollout = wait_for(settled, timeout, f"deployment {self.namespace}/{self.name} to "
                           "roll out with one leader", interval=0.5)
        assert rollout is not None  # wait_for returns a true value
        return rollout

    def _json(self, obj: Any) -> dict[str, Any]:
        """A client model as the API's JSON (camelCase keys, no None fields)."""
        return dict(self.api_client.sanitize_for_serialization(obj))  # type: ignore[no-untyped-call]


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
