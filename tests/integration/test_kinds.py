"""Kinds turned on by --kinds, against the real API server: the ConfigMap contract holds for
each, table-driven (one test per behaviour, parametrized over the kinds, never a copy per
kind), and RBAC per kind: deploy/'s components grant exactly what a kind turned on needs.

The kinds are the built-in ones and a custom resource, example.com/v1/Widget, whose CRD
(namespaced, a spec of any fields, a status subresource) the module installs. The operator
runs as deploy/'s ServiceAccount with deploy/'s RBAC plus the kinds' components (the
widget's: deploy/components/custom-resource-example), applied for real, as a user would
install them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from configmirror.replication.model import RELEASED_FROM, REPLICA_OF
from configmirror.replication.spec import (
    ON_DELETE,
    PULL,
    PULL_ALLOWED,
    REPLICATE_TO,
    REPLICATE_TO_MATCHING,
)
from configmirror.vocabulary import OPTIONAL, Kind
from configmirror_testing.cluster import REPO, Cluster, Namespaces
from configmirror_testing.e2e import Operators, events
from configmirror_testing.installs import deploy_with_components
from configmirror_testing.objects import (
    KIND_CONTENTS,
    WIDGET,
    admin_call,
    crd,
    install_crd,
    of_kind,
)
from configmirror_testing.operator import OperatorProcess
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane
BUILT_IN = sorted(OPTIONAL)
ALL: dict[str, Kind] = {**OPTIONAL, WIDGET.flag: WIDGET}
KINDS = [*BUILT_IN, WIDGET.flag]
COMPONENTS = REPO / "deploy" / "components"
# Each kind's component under deploy/components, and the --kinds it appends.
FOLDERS = {**{name: name for name in BUILT_IN}, WIDGET.flag: "custom-resource-example"}
FLAGS = {**{name: name for name in BUILT_IN}, WIDGET.flag: "example.com/v1/Widget"}
NAME = "team-default"


class Objects:
    """One kind's objects through the admin's client (its REST paths: vocabulary.Resource)."""

    def __init__(self, cluster: Cluster, kind: Kind) -> None:
        self.api = cluster.api_client
        self.kind = kind

    def _call(self, method: str, path: str, body: Any = None,
              content_type: str = "application/json") -> Any:
        return admin_call(self.api, method, path, body, content_type)

    def create(self, namespace: str, fields: dict[str, Any],
               annotations: dict[str, str] | None = None, name: str = NAME) -> Any:
        return self._call("POST", self.kind.resource.collection(namespace),
                          of_kind(self.kind, name, fields, annotations))

    def read(self, namespace: str, name: str = NAME) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._call("GET", self.kind.resource.item(namespace, name))
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    def patch(self, namespace: str, patch: dict[str, Any], name: str = NAME) -> Any:
        return self._call("PATCH", self.kind.resource.item(namespace, name), patch,
                          "application/merge-patch+json")

    def replace(self, namespace: str, fields: dict[str, Any], name: str = NAME) -> Any:
        """Each of `fields` replaced whole (a JSON patch), as a hand edit does."""
        return self._call("PATCH", self.kind.resource.item(namespace, name),
                          [{"op": "replace", "path": f"/{f}", "value": v}
                           for f, v in fields.items()], "application/json-patch+json")

    def delete(self, namespace: str, name: str = NAME) -> None:
        self._call("DELETE", self.kind.resource.item(namespace, name))

    def content(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if obj is None else {f: obj[f] for f in self.kind.payload if f in obj}

    def wait_copy(self, namespace: str, source: str, timeout: float = 10,
                  name: str = NAME) -> dict[str, Any]:
        """The replica in `namespace` once it holds what the source in `source` holds."""
        def check() -> dict[str, Any] | None:
            replica = self.read(namespace, name)
            wanted = self.content(self.read(source, name))
            return replica if replica is not None and self.content(replica) == wanted \
                and _annotations(replica).get(REPLICA_OF) == f"{source}/{name}" else None
        return wait_for(check, timeout=timeout,
                        what=f"{self.kind.name} {namespace}/{name} a copy of {source}/{name}")

    def wait_gone(self, namespace: str, timeout: float = 10, name: str = NAME) -> None:
        wait_for(lambda: self.read(namespace, name) is None, timeout=timeout,
                 what=f"{self.kind.name} {namespace}/{name} gone")


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


@pytest.fixture(scope="module")
def widget_crd(cluster: Cluster) -> None:
    """The custom resource's CRD, installed once (cluster-scoped; kept for the run)."""
    install_crd(cluster.api_client, crd("widgets", "Widget"))


@pytest.fixture(scope="module")
def kinds_kubeconfig(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory,
                     widget_crd: None) -> Iterator[Path]:
    """deploy/ with every kind's component applied for real; a kubeconfig holding only a
    token of its ServiceAccount."""
    with deploy_with_components(
            cluster, tmp_path_factory.mktemp("kinds-install"), list(FOLDERS.values()),
            [Path(folder) / "rbac.yaml" for folder in FOLDERS.values()]) as kubeconfig:
        yield kubeconfig


@pytest.fixture
def start(operators: Operators, kinds_kubeconfig: Path) -> Any:
    def start(*flags: str) -> OperatorProcess:
        return operators(*(f"--kinds={flag}" for flag in FLAGS.values()),
                         "--bindable-roles=view", *flags, kubeconfig=kinds_kubeconfig)
    return start


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> Kind:
    return ALL[request.param]


def kubectl_name(kind: Kind) -> str:
    """The resource as kubectl names it: `networkpolicies`, `widgets.example.com`."""
    return f"{kind.plural}.{kind.resource.group}" if kind.custom else kind.plural


# -- the contract, for every kind ----------------------------------------------------------------

def test_a_matching_source_reaches_every_matching_namespace_and_a_new_one_within_2s(
        cluster: Cluster, namespaces: Namespaces, start: Any, kind: Kind) -> None:
    objects = Objects(cluster, kind)
    source = namespaces()
    teams = [namespaces({"tier": "team"}) for _ in range(2)]
    other = namespaces({"tier": "infra"})
    start()
    objects.create(source, KIND_CONTENTS[kind.flag][0], {REPLICATE_TO_MATCHING: "tier=team"})
    for team in teams:
        replica = objects.wait_copy(team, source)
        assert replica["apiVersion"] == kind.resource.api_version
    later = namespaces({"tier": "team"})
    objects.wait_copy(later, source, timeout=2)
    assert objects.read(other) is None
    (event, *_) = wait_for(lambda: events(cluster, source, NAME, "Replicated"),
                           what="the Replicated Event")
    assert event.involved_object.kind == kind.name
    assert event.involved_object.api_version == kind.resource.api_version


def test_an_edit_updates_every_replica_and_a_hand_edit_or_deletion_is_repaired(
        cluster: Cluster, namespaces: Namespaces, start: Any, kind: Kind) -> None:
    objects = Objects(cluster, kind)
    first, edited = KIND_CONTENTS[kind.flag]
    source, team = namespaces(), namespaces()
    operator = start()
    objects.create(source, first, {REPLICATE_TO: team})
    objects.wait_copy(team, source)
    objects.patch(source, edited)
    objects.wait_copy(team, source)
    assert objects.content(objects.read(team)) == objects.content(objects.read(source))
    objects.replace(team, first)  # by hand: drift
    objects.wait_copy(team, source)
    objects.delete(team)
    objects.wait_copy(team, source)
    operator.wait_idle()
    written = operator.metric("configmirror_replica_writes_total", resource=kind.plural)
    assert written >= 4, "create, update, repair, re-create: counted under the kind"


def test_a_foreign_object_is_left_alone_and_replaced_once_deleted(
        cluster: Cluster, namespaces: Namespaces, start: Any, kind: Kind) -> None:
    objects = Objects(cluster, kind)
    first, edited = KIND_CONTENTS[kind.flag]
    source, team = namespaces(), namespaces()
    objects.create(team, edited)  # the team's own
    start()
    objects.create(source, first, {REPLICATE_TO: team})
    (conflict, *_) = wait_for(lambda: events(cluster, source, NAME, "TargetConflict"),
                              what="the TargetConflict Event")
    assert f"{team}/{NAME} exists and is not a replica" in conflict.message
    foreign = objects.read(team)
    assert foreign is not None and REPLICA_OF not in _annotations(foreign)
    assert objects.content(foreign) != objects.content(objects.read(source))
    objects.delete(team)
    objects.wait_copy(team, source)


def test_a_namespace_pulls_a_source_that_allows_it(
        cluster: Cluster, namespaces: Namespaces, start: Any, kind: Kind) -> None:
    objects = Objects(cluster, kind)
    source = namespaces()
    start()
    objects.create(source, KIND_CONTENTS[kind.flag][0], {PULL_ALLOWED: "*"})
    team = namespaces()
    cluster.core.patch_namespace(team, {"metadata": {"annotations": {
        PULL: f"{kind.flag}/{source}/{NAME}"}}})
    objects.wait_copy(team, source)
    cluster.core.patch_namespace(team, {"metadata": {"annotations": {PULL: None}}})
    objects.wait_gone(team)


def test_a_removal_waits_out_the_grace_and_retain_releases(
        cluster: Cluster, namespaces: Namespaces, start: Any, kind: Kind) -> None:
    objects = Objects(cluster, kind)
    first, _ = KIND_CONTENTS[kind.flag]
    source = namespaces()
    leaving, kept = namespaces({"tier": "team"}), namespaces({"tier": "team"})
    operator = start("--delete-grace=3s")
    objects.create(source, first, {REPLICATE_TO_MATCHING: "tier=team", ON_DELETE: "retain"})
    objects.wait_copy(leaving, source)
    objects.wait_copy(kept, source)
    cluster.core.patch_namespace(leaving, {"metadata": {"labels": {"tier": None}}})
    wait_for(lambda: operator.metric("configmirror_pending_removals") >= 1,
             what="the removal to wait out its grace")
    assert objects.read(leaving) is not None, "nothing is removed within the grace"
    objects.wait_gone(leaving, timeout=15)
    objects.delete(source)  # retain: the replica stays, as the namespace's own
    released = wait_for(lambda: RELEASED_FROM in _annotations(objects.read(kept) or {}),
                        timeout=15, what="the replica released")
    assert released
    replica = objects.read(kept)
    assert replica is not None and REPLICA_OF not in _annotations(replica)
    assert objects.content(replica) == first


def command(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    """`configmirror ARGS` with no CONFIGMIRROR_* or KUBECONFIG variable of ours."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONFIGMIRROR_",
                                                                       "KUBERNETES_SERVICE_"))}
    clean.pop("KUBECONFIG", None)
    return subprocess.run([sys.executable, "-m", "configmirror", *args, "--kubeconfig",
                           str(kubeconfig)], capture_output=True, text=True, timeout=60,
                          env=clean, check=False)


def test_plan_status_and_wait_name_a_source_as_kind_ns_name(
        cluster: Cluster, namespaces: Namespaces, start: Any, kind: Kind) -> None:
    objects = Objects(cluster, kind)
    source, team = namespaces(), namespaces()
    start()
    objects.create(source, KIND_CONTENTS[kind.flag][0], {REPLICATE_TO: team})
    ref = f"{kind.flag}/{source}/{NAME}"
    # Judge with these flags (no operator publishes a policy in the source's namespace).
    flags = (f"--kinds={FLAGS[kind.flag]}", "--bindable-roles=view", "--operator-namespace",
             source)
    done = command("wait", ref, "--timeout=30s", *flags, kubeconfig=cluster.kubeconfig)
    assert done.returncode == 0, done.stderr
    done = command("status", "-n", source, f"{kubectl_name(kind)}/{NAME}", "-o", "json", *flags,
                   kubeconfig=cluster.kubeconfig)
    assert done.returncode == 0, done.stderr
    (status,) = json.loads(done.stdout)["sources"]
    assert (status["kind"], status["source"], status["targets"], status["in_sync"]) == (
        kind.name, f"{source}/{NAME}", 1, 1)
    done = command("plan", ref, *flags, kubeconfig=cluster.kubeconfig)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{kind.flag} {source}/{NAME}: in sync, 1 target namespace(s)" in done.stdout
    fields = ", ".join(sorted(KIND_CONTENTS[kind.flag][0]))  # those the source has
    assert f"content  {fields}; hash " in done.stdout
    done = command("status", ref, "--operator-namespace", source,
                   kubeconfig=cluster.kubeconfig)
    assert done.returncode != 0 and f"--kinds to name {kind.flag}" in done.stderr


# -- RBAC: exactly what a kind turned on needs ---------------------------------------------------

RESOURCES = {"networkpolicy": "networkpolicies.networking.k8s.io",
             "limitrange": "limitranges", "resourcequota": "resourcequotas",
             "role": "roles.rbac.authorization.k8s.io",
             "rolebinding": "rolebindings.rbac.authorization.k8s.io",
             "serviceaccount": "serviceaccounts", WIDGET.flag: "widgets.example.com"}


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize(("verb", "namespace", "allowed"), [
    ("list", None, True), ("watch", None, True), ("create", "default", True),
    ("update", "default", True), ("patch", "default", True), ("delete", "default", True),
    ("get", "default", False), ("deletecollection", "default", False),
])
def test_a_kinds_component_grants_exactly_the_verbs_configmirror_uses(
        cluster: Cluster, kinds_kubeconfig: Path, name: str, verb: str,
        namespace: str | None, allowed: bool) -> None:
    scope = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    done = cluster.require_plane().kubectl("auth", "can-i", verb, RESOURCES[name], *scope,
                                           kubeconfig=kinds_kubeconfig, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stdout + done.stderr


def test_every_component_names_its_kind_in_its_flag_and_its_rbac_only() -> None:
    for name in KINDS:
        folder = COMPONENTS / FOLDERS[name]
        patch = yaml.safe_load((folder / "kustomization.yaml").read_text())["patches"][0]
        flags = [op["value"] for op in yaml.safe_load(patch["patch"])]
        (role,) = [d for d in yaml.safe_load_all((folder / "rbac.yaml").read_text())
                   if d["kind"] == "ClusterRole"]
        resource = ALL[name].resource
        kind_rule, *bind = role["rules"]
        assert kind_rule == {"apiGroups": [resource.group], "resources": [resource.plural],
                             "verbs": ["list", "watch", "create", "update", "patch",
                                       "delete"]}
        if name != "rolebinding":
            assert (flags, bind) == ([f"--kinds={FLAGS[name]}"], [])
            continue
        (rule,) = bind  # bind on exactly the roles the flag lists
        assert flags[0] == f"--kinds={name}" and flags[1].startswith("--bindable-roles=")
        assert rule["verbs"] == ["bind"] and rule["resourceNames"] == \
            flags[1].split("=", 1)[1].split(",")


@pytest.mark.parametrize(("resource", "allowed"), [
    ("clusterroles.rbac.authorization.k8s.io/view", True),
    ("roles.rbac.authorization.k8s.io/view", True),
    ("clusterroles.rbac.authorization.k8s.io/cluster-admin", False),
    ("clusterroles.rbac.authorization.k8s.io/admin", False),
    ("clusterroles.rbac.authorization.k8s.io", False),
])
def test_the_operator_may_bind_the_listed_roles_only(
        cluster: Cluster, kinds_kubeconfig: Path, resource: str, allowed: bool) -> None:
    done = cluster.require_plane().kubectl("auth", "can-i", "bind", resource, "-n", "default",
                                           kubeconfig=kinds_kubeconfig, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stdout + done.stderr
    escalate = cluster.require_plane().kubectl(
        "auth", "can-i", "escalate", "clusterroles.rbac.authorization.k8s.io", "-n", "default",
        kubeconfig=kinds_kubeconfig, check=False)
    assert escalate.stdout.strip() == "no"


# -- RBAC's escalation checks, as InvalidSpec ----------------------------------------------------

def test_a_rolebinding_to_cluster_admin_is_an_invalid_spec_and_nothing_is_written(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    objects = Objects(cluster, OPTIONAL["rolebinding"])
    source, team = namespaces(), namespaces()
    operator = start()
    _, edited = KIND_CONTENTS["rolebinding"]
    objects.create(source, {**edited, "roleRef": {**edited["roleRef"], "name": "cluster-admin"}},
                   {REPLICATE_TO: team})
    (event,) = wait_for(lambda: events(cluster, source, NAME, "InvalidSpec"),
                        what="the InvalidSpec Event")
    assert "ClusterRole 'cluster-admin' is not one the operator may bind" in event.message
    assert "--bindable-roles: view" in event.message
    operator.wait_idle()
    assert objects.read(team) is None and operator.writes() == 0


def test_a_role_granting_what_the_operator_does_not_hold_is_an_invalid_spec_not_a_loop(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    objects = Objects(cluster, OPTIONAL["role"])
    source, team = namespaces(), namespaces()
    operator = start()
    objects.create(source, {"rules": [{"apiGroups": [""], "resources": ["secrets"],
                                       "verbs": ["get"]}]}, {REPLICATE_TO: team})
    (event,) = wait_for(lambda: events(cluster, source, NAME, "InvalidSpec"),
                        what="the InvalidSpec Event")
    assert "grants permissions it does not hold itself" in event.message
    operator.wait_idle()
    assert objects.read(team) is None
    assert events(cluster, source, NAME, "ReplicationFailed") == []
    assert operator.metric("configmirror_replica_writes_total") == 0


# -- a custom resource: its spec, never its status; resolved at start or not at all ----------

def test_a_custom_resources_status_is_never_copied_and_its_change_writes_nothing(
        cluster: Cluster, namespaces: Namespaces, start: Any) -> None:
    objects = Objects(cluster, WIDGET)
    first, _ = KIND_CONTENTS[WIDGET.flag]
    source, team = namespaces(), namespaces()
    operator = start()
    objects.create(source, first, {REPLICATE_TO: team})
    objects.wait_copy(team, source)
    operator.wait_idle()
    written = operator.writes()
    seen = operator.metric("configmirror_informer_events_total", resource="widgets",
                           type="MODIFIED")
    # Its controller's status, through the status subresource: the source's resourceVersion
    # moves, its spec does not.
    before = objects.read(source)
    assert before is not None
    objects._call("PATCH", WIDGET.resource.item(source, NAME) + "/status",
                  {"status": {"ready": True, "observedGeneration": 1}},
                  "application/merge-patch+json")
    after = objects.read(source)
    assert after is not None and after["status"]["ready"] is True
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    wait_for(lambda: operator.metric("configmirror_informer_events_total", resource="widgets",
                                     type="MODIFIED") > seen,
             what="the operator to see the status change")
    operator.wait_idle()
    replica = objects.read(team)
    assert replica is not None and "status" not in replica
    assert objects.content(replica) == first
    assert operator.writes() == written, "a status change is no change of what is copied"


def test_a_custom_resource_named_with_fields_copies_those_fields_and_no_other(
        cluster: Cluster, namespaces: Namespaces, operators: Operators,
        widget_crd: None) -> None:
    named = Kind(WIDGET.resource, ("settings", "spec"), custom=True)
    objects, only_spec = Objects(cluster, named), Objects(cluster, WIDGET)
    source, team = namespaces(), namespaces()
    operator = operators("--kinds=example.com/v1/Widget:spec:settings",
                         kubeconfig=cluster.kubeconfig)
    objects.create(source, {"spec": {"size": 1}, "settings": {"colour": "blue"}},
                   {REPLICATE_TO: team})
    replica = objects.wait_copy(team, source)
    assert objects.content(replica) == {"spec": {"size": 1}, "settings": {"colour": "blue"}}
    objects.patch(source, {"settings": {"colour": "green"}})
    replica = objects.wait_copy(team, source)
    assert replica["settings"] == {"colour": "green"}
    assert only_spec.content(replica) == {"spec": {"size": 1}}
    operator.wait_idle()
    assert operator.metric("configmirror_replica_writes_total") == 2


def run_at_start(kinds: str, cluster: Cluster) -> subprocess.CompletedProcess[str]:
    """`configmirror run --kinds=KINDS` as the admin: what it says, once it has exited."""
    return command("run", f"--kinds={kinds}", "--metrics-bind-address=0",
                   "--health-probe-bind-address=0", kubeconfig=cluster.kubeconfig)


@pytest.mark.parametrize(("kinds", "said"), [
    ("example.com/v1/Gadget", "--kinds: example.com/v1/Gadget: gadgets.example.com is "
                              "cluster-scoped; configmirror replicates namespaced kinds only"),
    ("example.com/v1/Sprocket", "--kinds: example.com/v1/Sprocket: example.com/v1 has no kind "
                                "Sprocket"),
    ("nowhere.example.com/v1/Widget", "--kinds: nowhere.example.com/v1/Widget: the API server "
                                      "serves no nowhere.example.com/v1 (is its "
                                      "CustomResourceDefinition installed?)"),
])
def test_a_cluster_scoped_or_unknown_custom_resource_stops_the_operator_at_start_naming_it(
        cluster: Cluster, widget_crd: None, kinds: str, said: str) -> None:
    install_crd(cluster.api_client, crd("gadgets", "Gadget", scope="Cluster"))
    done = run_at_start(f"networkpolicy,{kinds}", cluster)
    assert done.returncode == 1, done.stderr
    assert done.stderr == f"configmirror: {said}\n"


def test_a_command_naming_a_custom_resource_not_turned_on_says_which_are(
        cluster: Cluster, namespaces: Namespaces, widget_crd: None) -> None:
    space = namespaces()
    done = command("status", f"gadgets.example.com/{space}/{NAME}", "--kinds=example.com/v1/Widget",
                   "--operator-namespace", space, kubeconfig=cluster.kubeconfig)
    assert done.returncode == 1
    assert done.stderr.endswith("\nconfigmirror: 'gadgets.example.com': the operator's --kinds "
                                "names no such custom resource (it names "
                                "example.com/v1/Widget)\n"), done.stderr
    assert "Traceback" not in done.stderr
