"""Member clusters in tests: a kubeconfig that reaches one API server as two clusters (a home
and a member context), what the member side's ServiceAccount may do (SubjectAccessReview),
and the member side removed after a test, namespace and cluster-scoped objects alike.

The suite has one control plane, so a test's "member" is the same API server under a second
context name: `configmirror cluster add` installs the member side there and writes the
cluster Secret into a namespace of the test's own (--operator-namespace), as it would into a
home cluster's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from kubernetes import client

from configmirror.replication.clusters import MEMBER_ACCOUNT, MEMBER_NAMESPACE
from configmirror_testing.cluster import Cluster

HOME, MEMBER = "home", "member"  # the two contexts of `two_contexts`
MEMBER_USER = f"system:serviceaccount:{MEMBER_NAMESPACE}:{MEMBER_ACCOUNT}"
MEMBER_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{MEMBER_NAMESPACE}",
                 "system:authenticated"]
TOKEN_ROLE = f"{MEMBER_ACCOUNT}-token"  # the Role and RoleBinding of the token


def two_contexts(base: Path, path: Path, member_token: str | None = None) -> Path:
    """A copy of kubeconfig `base` with contexts `home` (its current-context) and `member`,
    both to its cluster; the member's user is `base`'s, or one holding only `member_token`."""
    doc = yaml.safe_load(base.read_text())
    current = next(c for c in doc["contexts"] if c["name"] == doc["current-context"])
    cluster, user = current["context"]["cluster"], current["context"]["user"]
    member_user = user
    if member_token is not None:
        member_user = "member-token"
        doc["users"].append({"name": member_user, "user": {"token": member_token}})
    doc["contexts"] = [{"name": HOME, "context": {"cluster": cluster, "user": user}},
                       {"name": MEMBER, "context": {"cluster": cluster, "user": member_user}}]
    doc["current-context"] = HOME
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def member_may(cluster: Cluster, verb: str, resource: str, *, group: str = "",
               name: str | None = None, namespace: str | None = None,
               subresource: str | None = None) -> bool:
    """Whether the member side's ServiceAccount may do this (a SubjectAccessReview: what
    `kubectl auth can-i --as` asks)."""
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=MEMBER_USER, groups=MEMBER_GROUPS,
        resource_attributes=client.V1ResourceAttributes(
            verb=verb, resource=resource, group=group, name=name, namespace=namespace,
            subresource=subresource)))
    status = client.AuthorizationV1Api(cluster.api_client).create_subject_access_review(
        review).status
    assert status is not None
    return bool(status.allowed)


def member_side_objects(cluster: Cluster) -> set[str]:
    """Which of the member side's objects exist, as `kind/name`."""
    reads = {
        f"clusterrole/{MEMBER_ACCOUNT}": lambda: cluster.rbac.read_cluster_role(MEMBER_ACCOUNT),
        f"clusterrolebinding/{MEMBER_ACCOUNT}":
            lambda: cluster.rbac.read_cluster_role_binding(MEMBER_ACCOUNT),
        f"role/{TOKEN_ROLE}": lambda: cluster.rbac.read_namespaced_role(
            TOKEN_ROLE, MEMBER_NAMESPACE),
        f"rolebinding/{TOKEN_ROLE}": lambda: cluster.rbac.read_namespaced_role_binding(
            TOKEN_ROLE, MEMBER_NAMESPACE),
        f"serviceaccount/{MEMBER_ACCOUNT}": lambda: cluster.core.read_namespaced_service_account(
            MEMBER_ACCOUNT, MEMBER_NAMESPACE)}
    return {name for name, read in reads.items() if _found(read)}


def namespace_exists(cluster: Cluster) -> bool:
    return _found(lambda: cluster.core.read_namespace(MEMBER_NAMESPACE))


def _found(read: Callable[[], object]) -> bool:
    try:
        read()
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def _gone(delete: Callable[[], object]) -> None:
    try:
        delete()
    except client.ApiException as err:
        if err.status != 404:
            raise


@contextmanager
def member_side_removed(cluster: Cluster) -> Iterator[None]:
    """Whatever the block installs of the member side is removed after it: the ClusterRole
    and its binding, the ServiceAccount, the token Role and binding, and namespace
    configmirror if it was not there before (finalized on the bare control plane, where no
    namespace controller runs; deploy/ may have made it earlier in the session)."""
    existed = namespace_exists(cluster)
    try:
        yield
    finally:
        remove_member_side(cluster, namespace=not existed)


def remove_member_side(cluster: Cluster, namespace: bool) -> None:
    """Delete the member side's objects (and with `namespace` its namespace)."""
    _gone(lambda: cluster.rbac.delete_cluster_role_binding(MEMBER_ACCOUNT))
    _gone(lambda: cluster.rbac.delete_cluster_role(MEMBER_ACCOUNT))
    if namespace_exists(cluster):
        _gone(lambda: cluster.rbac.delete_namespaced_role_binding(TOKEN_ROLE, MEMBER_NAMESPACE))
        _gone(lambda: cluster.rbac.delete_namespaced_role(TOKEN_ROLE, MEMBER_NAMESPACE))
        _gone(lambda: cluster.core.delete_namespaced_service_account(MEMBER_ACCOUNT,
                                                                     MEMBER_NAMESPACE))
    if namespace:
        _gone(lambda: cluster.core.delete_namespace(MEMBER_NAMESPACE))
    # A namespace deleted (here, or by `cluster remove --uninstall`) stays Terminating on
    # the bare control plane until someone does the namespace controller's job.
    if cluster.plane is not None and cluster.node is None and namespace_terminating(cluster):
        cluster.plane.finalize_namespace(MEMBER_NAMESPACE)


def namespace_terminating(cluster: Cluster) -> bool:
    try:
        found = cluster.core.read_namespace(MEMBER_NAMESPACE)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return found.metadata is not None and found.metadata.deletion_timestamp is not None
