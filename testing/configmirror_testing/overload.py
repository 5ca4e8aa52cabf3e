"""An overloaded API server for one identity: API Priority and Fairness objects that give one
ServiceAccount a single seat (or a few) and reject what does not fit with 429, as a busy
shared control plane does. Everything else the server serves as before.

    throttle = Throttle(plane, namespace, "operator-sa")
    throttle.apply()       # a PriorityLevelConfiguration and a FlowSchema, in force on return
    ...
    throttle.remove()
"""

from __future__ import annotations

import urllib.error
from typing import Any

from configmirror_testing.controlplane import ControlPlane
from configmirror_testing.wait import wait_for

API = "/apis/flowcontrol.apiserver.k8s.io/v1"
# The apiserver flags that leave a small server: its total concurrency is their sum, shared
# out by the priority levels' shares, so a level with 1 share of about 250 gets one seat.
SMALL_SERVER_FLAGS = ("--max-requests-inflight=20", "--max-mutating-requests-inflight=10")


class Throttle:
    """One priority level with `shares` nominal concurrency shares that neither lends nor
    borrows and rejects (429) what finds no free seat, and a FlowSchema sending every request
    of ServiceAccount `namespace/name` there."""

    def __init__(self, plane: ControlPlane, namespace: str, name: str, shares: int = 1) -> None:
        self.plane = plane
        self.namespace = namespace
        self.account = name
        self.name = f"throttle-{namespace}-{name}"[:63]
        self.shares = shares

    def apply(self) -> None:
        self.plane.api("POST", f"{API}/prioritylevelconfigurations", {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration", "metadata": {"name": self.name},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": self.shares, "lendablePercent": 0,
                "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}})
        self.plane.api("POST", f"{API}/flowschemas", {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": self.name},
            "spec": {
                "priorityLevelConfiguration": {"name": self.name},
                # Ahead of every default schema a ServiceAccount would otherwise match
                # (service-accounts: 9000, global-default: 9900).
                "matchingPrecedence": 500,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                        "namespace": self.namespace, "name": self.account}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                       "resources": ["*"], "namespaces": ["*"],
                                       "clusterScope": True}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}})
        wait_for(self._in_force, timeout=30, what=f"FlowSchema {self.name} to be in force")

    def remove(self) -> None:
        for kind in ("flowschemas", "prioritylevelconfigurations"):
            try:
                self.plane.api("DELETE", f"{API}/{kind}/{self.name}")
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise

    def _in_force(self) -> bool:
        status: dict[str, Any] = self.plane.api("GET", f"{API}/flowschemas/{self.name}")
        conditions = (status.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Dangling" and c.get("status") == "False"
                   for c in conditions)
