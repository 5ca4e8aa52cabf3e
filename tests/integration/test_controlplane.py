"""The test control plane itself: a real apiserver, 410 on compaction, restarts, RBAC."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from kubernetes import client, config, watch

from configmirror_testing.cluster import Cluster, Namespaces
from configmirror_testing.controlplane import ControlPlane
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane


def _configmap(name: str, data: dict[str, str] | None = None) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data or {"k": "v"})


def _children_of_this_process() -> set[int]:
    children: set[int] = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines()
                          if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(os.getpid()):
            children.add(int(status.parent.name))
    return children


def test_start_create_list_watch_stop_leaves_nothing(cluster: Cluster) -> None:
    """Its own control plane: used through the kubernetes client, then stopped without a trace."""
    plane = ControlPlane(cluster.require_plane().assets)
    before = _children_of_this_process()
    plane.start()
    pids, folder = plane.pids, plane.dir
    try:
        assert len(pids) == 2 and set(pids) <= _children_of_this_process()
        core = client.CoreV1Api(config.new_client_from_config(str(plane.kubeconfig)))
        created = core.create_namespaced_config_map("default", _configmap("hello"))
        names = [cm.metadata.name for cm in core.list_namespaced_config_map("default").items]
        assert "hello" in names
        events = watch.Watch().stream(
            core.list_namespaced_config_map, "default",
            resource_version=created.metadata.resource_version, timeout_seconds=10)
        core.patch_namespaced_config_map("hello", "default", {"data": {"k": "v2"}})
        first = next(events)
        events.close()  # an open watch would hold up the apiserver's graceful stop
        assert (first["type"], first["object"].data) == ("MODIFIED", {"k": "v2"})
    finally:
        plane.stop()
    assert not folder.exists(), "the control plane's temp folder was left behind"
    assert _children_of_this_process() <= before, "etcd or kube-apiserver outlived stop()"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists()


def test_watch_from_compacted_resource_version_gets_410(uncached_cluster: Cluster) -> None:
    plane = uncached_cluster.require_plane()
    core = uncached_cluster.core
    ns = Namespaces(uncached_cluster, "compact")
    name = ns()
    try:
        old_rv = core.list_namespaced_config_map(name).metadata.resource_version
        for i in range(3):
            core.create_namespaced_config_map(name, _configmap(f"cm-{i}"))
        plane.compact()
        with pytest.raises(client.ApiException) as raised:
            # The Python Watch retries one 410 with the same stale version, then raises.
            for _ in watch.Watch().stream(core.list_namespaced_config_map, name,
                                          resource_version=old_rv, timeout_seconds=10):
                pass
        assert raised.value.status == 410
    finally:
        ns.cleanup()


def test_client_sees_objects_from_before_and_after_an_apiserver_restart(
        cluster: Cluster, namespace: str) -> None:
    plane = cluster.require_plane()
    core = cluster.core
    core.create_namespaced_config_map(namespace, _configmap("before"))
    port = plane.apiserver_port
    plane.restart_apiserver()
    assert plane.apiserver_port == port
    core.create_namespaced_config_map(namespace, _configmap("after"))  # same client, new server
    names = {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}
    assert {"before", "after"} <= names


def test_rbac_is_on_service_account_token_needs_a_binding(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    rbac = cluster.rbac
    as_sa = client.CoreV1Api(config.new_client_from_config(str(
        cluster.service_account_kubeconfig(namespace, "reader", tmp_path / "sa.kubeconfig"))))

    with pytest.raises(client.ApiException) as refused:
        as_sa.list_config_map_for_all_namespaces()
    assert refused.value.status == 403
    assert f"system:serviceaccount:{namespace}:reader" in json.loads(refused.value.body)["message"]

    role = f"{namespace}-cm-reader"
    rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name=role),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["list"])]))
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=role),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                  name=role),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader",
                                       namespace=namespace)]))
    try:
        wait_for(lambda: _can_list(as_sa), what="the binding to take effect")
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)


def _can_list(core: client.CoreV1Api) -> bool:
    try:
        core.list_config_map_for_all_namespaces(limit=1)
        return True
    except client.ApiException as err:
        if err.status == 403:
            return False
        raise


def test_finalize_namespace_ends_terminating(cluster: Cluster, namespaces: Namespaces) -> None:
    plane = cluster.require_plane()
    name = namespaces()
    cluster.core.create_namespaced_config_map(name, _configmap("inside"))
    namespaces.delete(name, finalize=False)
    phase = cluster.core.read_namespace(name).status.phase
    assert phase == "Terminating", "without a controller-manager a namespace stays Terminating"
    plane.finalize_namespace(name)

    def gone() -> bool:
        try:
            cluster.core.read_namespace(name)
            return False
        except client.ApiException as err:
            return err.status == 404

    wait_for(gone, what=f"namespace {name} to disappear")
