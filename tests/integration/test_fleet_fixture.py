"""The member clusters' fixture itself (tests/fixtures.py `members`,
configmirror_testing.fleet): two more control planes beside the home one, each with a fault
proxy in front, a cluster Secret configmirror reads, and an API server a test stops and
starts."""

from __future__ import annotations

import time

import pytest
import urllib3
import yaml
from kubernetes import client, config

from configmirror.replication.clusters import CLUSTER_LABEL, member_of
from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.fleet import Members

pytestmark = [pytest.mark.controlplane]


def namespace_names(cluster: Cluster) -> set[str]:
    return {str(ns.metadata.name) for ns in cluster.core.list_namespace().items
            if ns.metadata is not None}


def test_two_members_start_each_a_cluster_of_its_own(
        members: Members, cluster: Cluster, member_namespaces: dict[str, Namespaces]) -> None:
    b, c = members.b, members.c
    print(f"members started in {members.startup_seconds:.1f} s; memory (MiB): "
          + ", ".join(f"{m.name} {m.memory()}" for m in members))
    assert [m.name for m in members] == ["b", "c"]
    home = cluster.require_plane()
    assert len({home.server, b.server, c.server}) == 3
    assert len({home.etcd_endpoint, b.plane.etcd_endpoint, c.plane.etcd_endpoint}) == 3
    assert b.plane.assets == home.assets, "the same binaries as the home cluster's"

    only_in_b = member_namespaces["b"]()
    assert only_in_b in namespace_names(b.cluster)
    assert only_in_b not in namespace_names(c.cluster)
    assert only_in_b not in namespace_names(cluster)


def test_a_cluster_secret_is_one_configmirror_reads_and_reaches_its_member(
        members: Members, member_namespaces: dict[str, Namespaces]) -> None:
    b = members.b
    secret = b.cluster_secret(labels={"env": "prod"})
    assert secret["metadata"]["labels"] == {CLUSTER_LABEL: "b", "env": "prod"}
    member = member_of(secret, "local")
    assert (member.name, dict(member.labels), member.secret) == ("b", {"env": "prod"},
                                                                 "cluster-b")
    doc = yaml.safe_load(member.kubeconfig)
    assert [c["cluster"]["server"] for c in doc["clusters"]] == [b.proxied_server]
    assert "certificate-authority" not in doc["clusters"][0]["cluster"], "self-contained"

    # What the Secret holds reaches the member, through the proxy.
    marked = member_namespaces["b"]()
    accepted = b.proxy.accepted
    api = config.new_client_from_config_dict(doc)  # type: ignore[no-untyped-call]
    assert client.CoreV1Api(api).read_namespace(marked).to_dict()["metadata"]["name"] == marked
    assert b.proxy.accepted > accepted

    # A ServiceAccount's token instead of the admin's: still one context, still via the proxy.
    token = b.token_kubeconfig("configmirror", "configmirror-member", seconds=600)
    with_token = member_of(b.cluster_secret(kubeconfig=token, secret_name="b-token"), "local")
    token_api = config.new_client_from_config_dict(  # type: ignore[no-untyped-call]
        yaml.safe_load(with_token.kubeconfig))
    review = client.AuthenticationV1Api(token_api).create_self_subject_review(
        client.V1SelfSubjectReview()).to_dict()
    assert review["status"]["user_info"]["username"] == \
        "system:serviceaccount:configmirror:configmirror-member"


def test_a_partition_times_requests_out_and_heal_ends_it(members: Members) -> None:
    b, c = members.b, members.c
    proxied = b.proxied.core
    proxied.list_namespace(limit=1)  # a connection open, kept alive
    assert b.partition() >= 1, "the open connection went silent"

    began = time.monotonic()
    with pytest.raises((urllib3.exceptions.HTTPError, OSError)):
        proxied.list_namespace(limit=1, _request_timeout=1)
    print(f"a request to the partitioned member gave up after {time.monotonic() - began:.1f} s")
    assert not b.reachable(timeout=1), "a new connection is not answered either"
    assert b.reachable(proxied=False), "the member itself is up"
    assert c.reachable(), "the other member is not affected"

    b.heal()
    assert b.reachable()
    assert proxied.list_namespace(limit=1, _request_timeout=5).items


def test_latency_slows_the_member_down_until_healed(members: Members) -> None:
    c = members.c
    c.proxy.latency(0.5)
    assert not c.reachable(timeout=0.5), "a TLS handshake and a request take several trips"
    c.heal()
    assert c.reachable(timeout=2)


def test_the_api_server_stopped_and_started_again_on_the_same_address(
        members: Members) -> None:
    b = members.b
    server, proxied = b.server, b.proxied_server
    b.stop_apiserver()
    assert not b.reachable(timeout=1) and not b.reachable(proxied=False, timeout=1)
    began = time.monotonic()
    b.start_apiserver()
    print(f"kube-apiserver restarted in {time.monotonic() - began:.1f} s")
    assert (b.server, b.proxied_server) == (server, proxied)
    assert b.reachable(), "the same certificate: the proxied kubeconfig's CA still holds"
    assert b.proxied.core.list_namespace(limit=1, _request_timeout=5).items

    began = time.monotonic()
    with b.down(1):
        assert not b.reachable(timeout=0.5)
    assert time.monotonic() - began >= 1
    assert b.reachable()


def test_what_a_test_leaves_broken_is_restored(members: Members) -> None:
    c = members.c
    c.stop_apiserver()
    c.partition()
    c.proxy.latency(1)
    assert sorted(members.restore()["c"]) == ["healed its proxy",
                                              "started its kube-apiserver again"]
    assert c.reachable()
    assert members.restore() == {}
