"""One source, many namespaces: the work unit is a replica, so a fan-out uses every worker,
a bad target costs only itself, a namespace event wakes only what it can affect, and the
client-side rate limit holds."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from configmirror.replication.spec import REPLICATE_TO, REPLICATE_TO_MATCHING
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.e2e import (
    Operators,
    configmap,
    read,
    requests_into,
    restricted_operator_identity,
)
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane


def replicas_with(cluster: Cluster, label: str, data: dict[str, str]) -> int:
    """How many replicas in namespaces labelled `fanout=<label>` hold `data`."""
    found = cluster.core.list_config_map_for_all_namespaces(
        label_selector="configmirror.io/replica=true").items
    spaces = {n.metadata.name for n in cluster.core.list_namespace(
        label_selector=f"fanout={label}").items}
    return sum(1 for cm in found if cm.metadata.namespace in spaces and (cm.data or {}) == data)


def test_one_source_to_300_namespaces_spreads_its_writes_over_every_worker(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src = namespaces()
    namespaces.many(300, labels={"fanout": src})
    operator = operators("--workers", "4", "--kube-api-qps", "0")
    cluster.core.create_namespaced_config_map(src, configmap(
        "ca", {REPLICATE_TO_MATCHING: f"fanout={src}"}, data={"v": "1"}))
    wait_for(lambda: replicas_with(cluster, src, {"v": "1"}) == 300, timeout=120,
             what="300 replicas")
    operator.wait_idle()
    by_worker = [operator.metric("configmirror_worker_changes_total", worker=str(w))
                 for w in range(4)]
    assert sum(by_worker) == 300, by_worker
    assert min(by_worker) >= 30, f"writes by worker: {by_worker}: some workers idled"
    assert operator.metric("configmirror_reconciles_total", role="source") >= 1


def test_a_forbidden_target_among_50_costs_only_itself(
        cluster: Cluster, namespaces: Namespaces, operators: Operators, tmp_path: Path) -> None:
    src = namespaces()
    allowed = [namespaces() for _ in range(49)]
    forbidden = namespaces()
    kubeconfig, user = restricted_operator_identity(cluster, src, [src, *allowed], tmp_path)
    operator = operators(kubeconfig=kubeconfig)
    cluster.core.create_namespaced_config_map(src, configmap(
        "cfg", {REPLICATE_TO: ",".join([*allowed, forbidden])}, data={"v": "1"}))
    for ns in allowed:
        wait_for(lambda ns=ns: read(cluster, ns, "cfg"), what=f"the replica in {ns}")
    cluster.core.patch_namespaced_config_map("cfg", src, {"data": {"v": "2"}})
    for ns in allowed:
        wait_for(lambda ns=ns: (read(cluster, ns, "cfg").data or {}) == {"v": "2"},  # type: ignore[union-attr]
                 what=f"the edit to reach {ns}")
    operator.wait_idle()
    for ns in allowed:  # one create and one update each: never rewritten for the other's sake
        verbs = sorted(e["verb"] for e in requests_into(cluster, user, ns))
        assert verbs == ["create", "update"], (ns, verbs)
    tried = requests_into(cluster, user, forbidden)
    assert [e["responseStatus"]["code"] for e in tried] == [403, 403], \
        "one try per change of the source, no retry loop"
    assert operator.metric("configmirror_reconcile_given_up_total") == 0


def test_a_namespace_relabel_wakes_only_sources_that_can_select_it(
        cluster: Cluster, namespaces: Namespaces, operators: Operators) -> None:
    src = namespaces()
    prod = f"prod-{src}"
    x = namespaces(labels={"env": "dev"})
    operator = operators()
    cluster.core.create_namespaced_config_map(src, configmap(
        "by-name", {REPLICATE_TO: "nothing-*"}))
    cluster.core.create_namespaced_config_map(src, configmap(
        "by-label", {REPLICATE_TO_MATCHING: f"env={prod}"}))
    operator.wait_idle()

    def modified_namespaces() -> float:
        return operator.metric("configmirror_informer_events_total", resource="namespaces",
                               type="MODIFIED")

    def reconciles(role: str) -> float:
        return operator.metric("configmirror_reconciles_total", role=role)

    before = (reconciles("source"), reconciles("target"), modified_namespaces())
    cluster.core.patch_namespace(x, {"metadata": {"labels": {"env": "staging"}}})
    wait_for(lambda: modified_namespaces() > before[2], what="the operator to see the relabel")
    operator.wait_idle()
    assert (reconciles("source"), reconciles("target")) == before[:2], \
        "no source can select the namespace: no work at all"

    cluster.core.patch_namespace(x, {"metadata": {"labels": {"env": prod}}})
    wait_for(lambda: read(cluster, x, "by-label"), what="the replica of the source it now matches")
    operator.wait_idle()
    assert reconciles("source") == before[0], "a relabel plans no source"
    # One reconcile decides and writes the replica; its own watch event costs one more that
    # finds it in sync. Nothing for the source that selects by name.
    assert reconciles("target") - before[1] <= 2
    assert read(cluster, x, "by-name") is None


def _stamps(events: list[dict[str, Any]]) -> list[float]:
    return sorted(datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00"))
                  .timestamp() for e in events)


def test_a_fan_out_to_300_namespaces_never_exceeds_the_client_side_rate_limit(
        cluster: Cluster, namespaces: Namespaces, operators: Operators, tmp_path: Path) -> None:
    src = namespaces()
    namespaces.many(300, labels={"fanout": src})
    kubeconfig, user = restricted_operator_identity(cluster, src, [], tmp_path)
    cluster.rbac.create_cluster_role_binding({  # may write everywhere, as itself
        "metadata": {"name": f"{src}-write"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": f"{user.rsplit(':', 1)[1]}-write"},
        "subjects": [{"kind": "ServiceAccount", "name": user.rsplit(":", 1)[1],
                      "namespace": src}]})
    qps, burst = 40.0, 5
    operator = operators("--kube-api-qps", str(qps), "--kube-api-burst", str(burst),
                         "--workers", "8", kubeconfig=kubeconfig)
    cluster.core.create_namespaced_config_map(src, configmap(
        "ca", {REPLICATE_TO_MATCHING: f"fanout={src}"}, data={"v": "1"}))
    wait_for(lambda: replicas_with(cluster, src, {"v": "1"}) == 300, timeout=120,
             what="300 replicas")
    operator.wait_idle()
    stamps = _stamps(cluster.audit(user))
    assert len(stamps) >= 300
    # A token bucket lets through at most burst + qps * w requests in any w seconds. The
    # audit stamps are taken at the server, after a thread wake-up, a TLS handshake for a new
    # connection and the network: allow them 0.25 s of jitter (0.1 s was exceeded by one
    # request on a loaded 2-core machine, where a request released on time can reach the
    # server late and land beside the next ones). Without the limit, 8 workers send several
    # hundred a second here: 50 or more in any 0.25 s, against the 25 allowed.
    jitter = 0.25
    for window in (0.25, 1.0, 5.0):
        j = 0
        for i in range(len(stamps)):
            while stamps[i] - stamps[j] > window:
                j += 1
            assert i - j + 1 <= burst + qps * (window + jitter), \
                f"{i - j + 1} requests within {window} s (limit {burst} + {qps}/s)"
    spent = stamps[-1] - stamps[0]
    assert spent >= (len(stamps) - burst) / qps * 0.95, "the writes were paced, not bunched"
