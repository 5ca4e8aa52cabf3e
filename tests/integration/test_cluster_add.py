"""`configmirror cluster add`, `list` and `remove` against the real API server.

The suite has one control plane, so the member is that API server under a second context
(configmirror_testing.memberside.two_contexts): `add` installs the member side there as an
admin, and writes the cluster Secret into a namespace of the test's own, which stands for the
home operator's (--operator-namespace). What the member side's ServiceAccount may do is asked
of the API server's own authorizer (SubjectAccessReview, as `kubectl auth can-i --as` does),
what it must not do included; its token is then used for real. Every test removes the member
side it made, cluster-scoped objects included.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from configmirror.cli import cluster as cluster_cli
from configmirror.cli import main as cli
from configmirror.client.kube import ApiError
from configmirror.operator.policy import POLICY_LABEL
from configmirror.replication.clusters import (
    CLUSTER_LABEL,
    MEMBER_ACCOUNT,
    MEMBER_NAMESPACE,
    member_of,
)
from configmirror.replication.model import REPLICA_LABEL
from configmirror.replication.spec import SOURCE_CLUSTER
from configmirror_testing.cluster import REPO, Cluster, Namespaces
from configmirror_testing.memberside import (
    MEMBER,
    TOKEN_ROLE,
    member_may,
    member_side_objects,
    member_side_removed,
    namespace_exists,
    two_contexts,
)

pytestmark = pytest.mark.controlplane

RBAC = "rbac.authorization.k8s.io"
NETWORKING = "networking.k8s.io"


class Cli:
    """`configmirror ARGS` in this process, with the test's kubeconfig and home namespace."""

    def __init__(self, kubeconfig: Path, home: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.kubeconfig = kubeconfig
        self.home = home
        self.capsys = capsys

    def __call__(self, *argv: str, home: bool = True) -> tuple[int, str, str]:
        words = [*argv, "--kubeconfig", str(self.kubeconfig)]
        if home:
            words += ["--operator-namespace", self.home]
        self.capsys.readouterr()
        code = cli.main(words)
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *argv: str) -> str:
        code, out, err = self(*argv)
        assert code == 0, err
        return out


@pytest.fixture
def run(cluster: Cluster, namespaces: Namespaces, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    """The CLI with a kubeconfig of two contexts (home and member, one API server), a home
    namespace of the test's own, no CONFIGMIRROR_* or KUBECONFIG of the caller's, and the
    member side removed after the test."""
    for name in [n for n in os.environ if n.startswith("CONFIGMIRROR_")] + ["KUBECONFIG"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli, "_setup_logging", lambda fmt, level, timestamps: None)
    kubeconfig = two_contexts(cluster.kubeconfig, tmp_path / "kubeconfig")
    with member_side_removed(cluster):
        yield Cli(kubeconfig, namespaces(), capsys)


def secret_of(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """A Secret as API JSON (what replication.clusters reads)."""
    found = cluster.core.read_namespaced_secret(name, namespace)
    return dict(cluster.api_client.sanitize_for_serialization(found))


def member_kube(secret: dict[str, Any], home: str = "local") -> Any:
    """A client of the member through the Secret's kubeconfig (its token)."""
    return cluster_cli.member_client(member_of(secret, home))


# -- add ------------------------------------------------------------------------------------------

def test_add_installs_the_member_side_and_writes_a_secret_whose_token_works(
        cluster: Cluster, run: Cli) -> None:
    out = run.ok("cluster", "add", "east", "--context", MEMBER, "--label", "env=prod",
                 "--label", "region=eu", "--token-duration", "1h")
    lines = out.splitlines()
    assert lines[0].startswith(f"cluster east: the member side in context {MEMBER} (https://")
    assert lines[0].endswith("for configmaps, namespaces")
    assert [line.split(" ")[1] for line in lines[2:7]] == ["created"] * 5, out
    assert lines[7].startswith(f"token of serviceaccount {MEMBER_NAMESPACE}/{MEMBER_ACCOUNT} "
                               "minted, expires ")
    assert lines[8].startswith(f"secret/cluster-east created in namespace {run.home} of the "
                               "home cluster (the current context): cluster east, server https://")
    assert len(lines) == 9
    assert member_side_objects(cluster) == {
        f"clusterrole/{MEMBER_ACCOUNT}", f"clusterrolebinding/{MEMBER_ACCOUNT}",
        f"role/{TOKEN_ROLE}", f"rolebinding/{TOKEN_ROLE}", f"serviceaccount/{MEMBER_ACCOUNT}"}

    secret = secret_of(cluster, run.home, "cluster-east")
    member = member_of(secret, "local")
    assert (member.name, dict(member.labels)) == ("east", {"env": "prod", "region": "eu"})
    expiry = cluster_cli.token_expiry(member.kubeconfig)
    assert expiry is not None
    assert timedelta(minutes=55) < expiry - datetime.now(UTC) <= timedelta(hours=1, minutes=1)
    with member_kube(secret) as kube:
        names = {n["metadata"]["name"] for n in kube.request("list", "/api/v1/namespaces")["items"]}
        assert run.home in names
        with pytest.raises(ApiError) as denied:  # the token is the member side's, no admin's
            kube.request("list", f"/api/v1/namespaces/{run.home}/secrets")
        assert denied.value.status == 403


def test_the_member_side_may_do_exactly_the_listed_rules(cluster: Cluster, run: Cli) -> None:
    run.ok("cluster", "add", "east", "--context", MEMBER, "--kinds", "networkpolicy",
           "--secret-names", "tls,registry")
    ns = run.home
    allowed = [
        *[(verb, "configmaps", "", None, None) for verb in ("list", "watch")],
        *[(verb, "configmaps", "", None, ns) for verb in ("create", "update", "patch",
                                                          "delete")],
        ("list", "namespaces", "", None, None), ("watch", "namespaces", "", None, None),
        *[(verb, "secrets", "", "tls", ns) for verb in ("list", "watch", "update", "patch",
                                                        "delete")],
        ("list", "secrets", "", "registry", None),
        ("create", "secrets", "", None, ns),  # RBAC cannot name a create
        *[(verb, "networkpolicies", NETWORKING, None, ns)
          for verb in ("list", "watch", "create", "update", "patch", "delete")],
    ]
    for verb, resource, group, name, namespace in allowed:
        assert member_may(cluster, verb, resource, group=group, name=name,
                          namespace=namespace), (verb, resource, name, namespace)
    assert member_may(cluster, "create", "serviceaccounts", subresource="token",
                      name=MEMBER_ACCOUNT, namespace=MEMBER_NAMESPACE)
    denied = [
        ("get", "configmaps", "", "cfg", ns),          # no get: the cache answers reads
        ("get", "secrets", "", "tls", ns),
        ("list", "secrets", "", None, ns),             # not every Secret
        ("list", "secrets", "", "other", None),
        ("update", "secrets", "", "other", ns),
        ("delete", "secrets", "", "other", ns),
        ("get", "namespaces", "", ns, None),
        ("create", "namespaces", "", None, None),
        ("delete", "namespaces", "", ns, None),
        ("create", "limitranges", "", None, ns),        # a kind not turned on
        ("list", "limitranges", "", None, None),
        ("list", "roles", RBAC, None, None),
        ("bind", "clusterroles", RBAC, "view", None),
        ("escalate", "clusterroles", RBAC, None, None),
        ("create", "events", "", None, ns),
        ("get", "serviceaccounts", "", MEMBER_ACCOUNT, MEMBER_NAMESPACE),
        ("list", "serviceaccounts", "", None, MEMBER_NAMESPACE),
        ("deletecollection", "configmaps", "", None, ns),
    ]
    for verb, resource, group, name, namespace in denied:
        assert not member_may(cluster, verb, resource, group=group, name=name,
                              namespace=namespace), (verb, resource, name, namespace)
    for account, namespace in (("configmirror", MEMBER_NAMESPACE), (MEMBER_ACCOUNT, ns),
                               ("default", MEMBER_NAMESPACE)):  # another account's token
        assert not member_may(cluster, "create", "serviceaccounts", subresource="token",
                              name=account, namespace=namespace), (account, namespace)


def test_add_follows_the_published_policy_and_again_changes_only_what_differs(
        cluster: Cluster, run: Cli) -> None:
    cluster.core.create_namespaced_config_map(run.home, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="configmirror-policy", labels={POLICY_LABEL: "true"}),
        data={"kinds": "configmap,rolebinding", "bindable-roles": "view",
              "secret-names": "", "operator-namespace": run.home}))
    # No --operator-namespace: the operator is found through its policy, and its namespace
    # holds the Secret.
    code, out, err = run("cluster", "add", "east", "--context", MEMBER, home=False)
    assert code == 0, err
    assert f"following the operator in namespace {run.home}" in err, err
    assert f"secret/cluster-east created in namespace {run.home} " in out, out
    rules = cluster.rbac.read_cluster_role(MEMBER_ACCOUNT).rules
    assert [(r.resources, r.resource_names, r.verbs) for r in rules][2:] == [
        (["rolebindings"], None, ["list", "watch", "create", "update", "patch", "delete"]),
        (["clusterroles", "roles"], ["view"], ["bind"])]
    assert member_may(cluster, "bind", "clusterroles", group=RBAC, name="view")
    assert not member_may(cluster, "bind", "clusterroles", group=RBAC, name="admin")

    out = run.ok("cluster", "add", "east", "--context", MEMBER)
    assert [line.split(" ")[1] for line in out.splitlines()[1:7]] == ["unchanged"] * 6, out
    assert "secret/cluster-east configured" in out  # a new token

    out = run.ok("cluster", "add", "east", "--context", MEMBER, "--kinds", "configmap")
    assert f"clusterrole.{RBAC}/{MEMBER_ACCOUNT} configured" in out
    assert not member_may(cluster, "bind", "clusterroles", group=RBAC, name="view")


def test_the_member_component_applied_by_gitops_is_what_add_finds_unchanged(
        cluster: Cluster, run: Cli) -> None:
    plane = cluster.require_plane()
    rendered = [d for d in yaml.safe_load_all(plane.kubectl(
        "kustomize", str(REPO / "deploy" / "components" / "member")).stdout) if d]
    def key(obj: dict[str, Any]) -> tuple[str, str]:
        return obj["kind"], obj["metadata"]["name"]

    installed = cluster_cli.member_side(cluster_cli.member_rules([]))
    assert sorted(rendered, key=key) == sorted(installed, key=key)
    namespace = [d for d in rendered if d["kind"] == "Namespace"]
    if not namespace_exists(cluster):  # the namespace as the component makes it
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(namespace))
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        [d for d in rendered if d["kind"] != "Namespace"]))
    out = run.ok("cluster", "add", "east", "--context", MEMBER)
    assert [line.split(" ")[1] for line in out.splitlines()[2:7]] == ["unchanged"] * 5, out


def test_the_fleet_component_grants_the_operator_its_namespaces_secrets_and_the_flag(
        cluster: Cluster, tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(REPO / "deploy", overlay)],
        "components": [os.path.relpath(REPO / "deploy" / "components" / "fleet", overlay)],
        "namespace": "platform-ops"}))
    docs = [d for d in yaml.safe_load_all(cluster.require_plane().kubectl(
        "kustomize", str(overlay)).stdout) if d]
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("fleet")]
    assert role["metadata"]["namespace"] == "platform-ops"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "verbs": ["get", "list", "watch", "update", "patch"]}]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"
                  and d["roleRef"]["name"] == role["metadata"]["name"]]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "configmirror",
                                    "namespace": "platform-ops"}]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"][-1] == \
        "--member-clusters"


# -- what add refuses -----------------------------------------------------------------------------

def test_a_context_that_does_not_exist_is_one_line_and_nothing_is_written(
        cluster: Cluster, run: Cli) -> None:
    code, out, err = run("cluster", "add", "east", "--context", "nope")
    assert code == 1 and out == ""
    (line,) = err.splitlines()
    assert "context 'nope' is not in" in line, line
    assert member_side_objects(cluster) == set()


def test_without_admin_rights_in_the_member_it_says_the_apis_403(
        cluster: Cluster, run: Cli, namespaces: Namespaces, tmp_path: Path) -> None:
    weak = namespaces()
    token = cluster.service_account_kubeconfig(weak, "nobody", tmp_path / "weak")
    user = yaml.safe_load(token.read_text())["users"][0]["user"]["token"]
    run.kubeconfig = two_contexts(cluster.kubeconfig, tmp_path / "two", member_token=user)
    code, _, err = run("cluster", "add", "east", "--context", MEMBER)
    assert code == 1
    (line,) = [e for e in err.splitlines() if not e.startswith("configmirror: no running")]
    assert line.startswith(f"configmirror: context {MEMBER}: cannot create or update "), line
    assert "403 Forbidden" in line and f"system:serviceaccount:{weak}:nobody" in line, line
    assert cluster.core.list_namespaced_secret(run.home).items == [], "nothing at home"


@pytest.mark.parametrize(("argv", "said"), [
    (("local",), "cluster local is the home cluster's own name (--cluster-name)"),
    (("prod", "--cluster-name", "prod"), "cluster prod is the home cluster's own name"),
])
def test_the_home_clusters_own_name_is_refused(cluster: Cluster, run: Cli,
                                               argv: tuple[str, ...], said: str) -> None:
    code, _, err = run("cluster", "add", *argv, "--context", MEMBER)
    assert code == 1 and said in err, err
    assert member_side_objects(cluster) == set()


def test_a_cluster_another_secret_names_already_is_refused(cluster: Cluster, run: Cli) -> None:
    cluster.core.create_namespaced_secret(run.home, client.V1Secret(
        metadata=client.V1ObjectMeta(name="capi-east", labels={CLUSTER_LABEL: "east"}),
        data={"value": base64.b64encode(b"{}").decode()}))
    code, _, err = run("cluster", "add", "east", "--context", MEMBER)
    assert code == 1 and "cluster east is named already by secret capi-east" in err, err
    assert member_side_objects(cluster) == set()


# -- list and remove ------------------------------------------------------------------------------

def replica(name: str, home: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(
        name=name, labels={REPLICA_LABEL: "true"}, annotations={SOURCE_CLUSTER: home}))


def test_list_shows_the_member_reachable_its_token_expiry_and_its_replicas_then_remove(
        cluster: Cluster, run: Cli, namespaces: Namespaces) -> None:
    run.ok("cluster", "add", "east", "--context", MEMBER, "--label", "env=prod")
    cluster.core.create_namespaced_secret(run.home, client.V1Secret(
        metadata=client.V1ObjectMeta(name="broken", labels={CLUSTER_LABEL: "west"})))

    def listed() -> dict[str, dict[str, Any]]:
        doc = json.loads(run.ok("cluster", "list", "-o", "json"))
        assert doc["home"] == "local" and doc["namespace"] == run.home
        return {c["secret"]: c for c in doc["clusters"]}

    before = listed()
    east = before["cluster-east"]
    assert (east["name"], east["labels"], east["reachable"], east["fault"]) == (
        "east", {"env": "prod"}, True, None)
    assert east["server"] == str(cluster_cli.server_of(
        member_of(secret_of(cluster, run.home, "cluster-east"), "local").kubeconfig))
    assert east["version"].startswith("v1.")
    expiry = datetime.strptime(east["token_expiry"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert expiry > datetime.now(UTC) + timedelta(hours=23)
    broken = before["broken"]
    assert broken["name"] == "west" and "has no kubeconfig" in broken["fault"]
    assert broken["reachable"] is None

    target = namespaces()  # a replica of this home, and one of another's: counted, not
    cluster.core.create_namespaced_config_map(target, replica("ours", "local"))
    cluster.core.create_namespaced_config_map(target, replica("theirs", "elsewhere"))
    assert listed()["cluster-east"]["replicas"] == east["replicas"] + 1

    text = run.ok("cluster", "list").splitlines()
    assert text[0].split()[:4] == ["NAME", "LABELS", "SERVER", "REACHABLE"]
    assert [row.split()[0] for row in text[1:3]] == ["east", "west"]
    assert text[1].split()[3] == "yes" and text[2].split()[3] == "invalid"
    assert text[3].startswith("secret/broken: cluster west: the Secret has no kubeconfig")

    assert run.ok("cluster", "remove", "east").splitlines() == [
        f"secret/cluster-east deleted from namespace {run.home} (cluster east; its replicas "
        "in the member stay)"]
    assert "cluster-east" not in listed()
    assert len(member_side_objects(cluster)) == 5, "the member side stays without --uninstall"
    code, _, err = run("cluster", "remove", "east")
    assert code == 1 and f"there is no cluster east (no Secret labelled {CLUSTER_LABEL}=east" \
        in err, err


def test_a_member_that_does_not_answer_is_listed_unreachable(cluster: Cluster, run: Cli) -> None:
    run.ok("cluster", "add", "east", "--context", MEMBER, "--server", "https://127.0.0.1:1")
    (east,) = json.loads(run.ok("cluster", "list", "-o", "json"))["clusters"]
    assert east["reachable"] is False and east["server"] == "https://127.0.0.1:1"
    assert east["reason"].startswith("ConnectionError: "), east
    assert east["replicas"] is None and east["token_expiry"] is not None


def test_remove_uninstall_deletes_the_secret_and_the_member_side(
        cluster: Cluster, run: Cli) -> None:
    created = not namespace_exists(cluster)
    run.ok("cluster", "add", "east", "--context", MEMBER)
    out = run.ok("cluster", "remove", "east", "--uninstall", "--context", MEMBER)
    lines = out.splitlines()
    assert lines[0].startswith("secret/cluster-east deleted")
    assert [line.split(" ")[1] for line in lines[1:6]] == ["deleted"] * 5, out
    assert lines[6] == (f"namespace/{MEMBER_NAMESPACE} deleted" if created else
                        f"namespace/{MEMBER_NAMESPACE} kept: `cluster add` did not create it")
    assert member_side_objects(cluster) == set()
    assert cluster.core.list_namespaced_secret(run.home).items == []
