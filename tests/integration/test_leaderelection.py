"""Leader election on a real Lease: one leads; when it stops, another leads in time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from kubernetes import client

from configmirror.client.kube import Kube, load_configuration
from configmirror.client.leaderelection import LeaderElector
from configmirror_testing.cluster import Cluster
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane

LEASE, RENEW, RETRY = 3.0, 2.0, 0.5


class Candidate:
    def __init__(self, cluster: Cluster, namespace: str, identity: str) -> None:
        self.kube = Kube(load_configuration(str(cluster.kubeconfig)))
        self.started = threading.Event()
        self.lost = threading.Event()
        self.elector = LeaderElector(
            self.kube, namespace, "configmirror-test", identity,
            on_started_leading=self.started.set, on_stopped_leading=self.lost.set,
            lease_duration=LEASE, renew_deadline=RENEW, retry_period=RETRY)

    def close(self) -> None:
        self.elector.stop()
        self.kube.close()


@pytest.fixture
def candidates(cluster: Cluster, namespace: str) -> Iterator[list[Candidate]]:
    made = [Candidate(cluster, namespace, f"candidate-{i}") for i in range(2)]
    yield made
    for c in made:
        c.close()


def test_one_leads_and_the_other_takes_over_when_it_stops(
        cluster: Cluster, namespace: str, candidates: list[Candidate]) -> None:
    for c in candidates:
        c.elector.start()
    wait_for(lambda: any(c.elector.is_leader() for c in candidates), what="a leader")
    leader = next(c for c in candidates if c.elector.is_leader())
    other = next(c for c in candidates if c is not leader)
    wait_for(lambda: other.elector._observed is not None, what="the standby to see the lease")
    assert not other.elector.is_leader(), "two leaders at once"
    stopped_at = time.monotonic()
    leader.elector.stop()  # releases the lease
    wait_for(other.elector.is_leader, timeout=LEASE + 2 * RETRY, what="the takeover")
    assert time.monotonic() - stopped_at < LEASE, "a released lease is taken at once"
    assert other.started.is_set() and not other.lost.is_set()


def test_a_leader_that_dies_without_releasing_is_replaced_after_the_lease(
        cluster: Cluster, namespace: str, candidates: list[Candidate]) -> None:
    """A lease held by a process that is gone: taken once it has not changed for LEASE s."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.CoordinationV1Api(cluster.api_client).create_namespaced_lease(
        namespace, client.V1Lease(
            metadata=client.V1ObjectMeta(name="configmirror-test"),
            spec=client.V1LeaseSpec(holder_identity="crashed-process",
                                    lease_duration_seconds=int(LEASE), acquire_time=now,
                                    renew_time=now, lease_transitions=0)))
    candidate = candidates[0]
    started = time.monotonic()
    candidate.elector.start()
    wait_for(candidate.elector.is_leader, timeout=LEASE + 3 * RETRY + 2,
             what="the takeover of an expired lease")
    assert time.monotonic() - started >= LEASE, "a live-looking lease was taken early"
