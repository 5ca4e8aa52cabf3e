"""charts/configmirror against helm and a real apiserver: lint, a schema that names the bad
value, the same objects as deploy/, Secrets RBAC by name only, and a real install and uninstall.

There is no kubelet here: an installed Deployment's pods never run, but every object is created
(and deleted) by the apiserver for real, so RBAC, admission and Helm's bookkeeping are real.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from configmirror import __version__
from configmirror_testing.chart import (
    CHART,
    by_key,
    container,
    documents,
    one,
    template,
    values_file,
    with_image_placeholder,
    without_helm_labels,
    yaml_diff,
)
from configmirror_testing.cluster import REPO, Cluster, Namespaces, unique_name
from configmirror_testing.e2e import Operators
from configmirror_testing.helm import Helm, release_objects
from configmirror_testing.helm import cluster_scoped_objects as all_cluster_scoped
from configmirror_testing.installs import (
    check_install,
    check_status_follows_policy,
    service_account,
)
from configmirror_testing.objects import crd, install_crd
from configmirror_testing.wait import WaitTimeout, wait_for

pytestmark = pytest.mark.controlplane
SECRET_NAMES = ["wildcard-tls", "registry-credentials"]
# What the README labels the release's namespace with before `helm install`.
NAMESPACE_LABELS = {"configmirror.io/ignore": "true",
                    "pod-security.kubernetes.io/enforce": "restricted"}

# Values that exercise every template branch the apiserver can check (a ServiceMonitor needs
# the Prometheus Operator's CRD, which this apiserver lacks: it is checked by rendering only).
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "secrets": {"secrets": {"names": SECRET_NAMES, "sourceNamespaces": ["platform", "infra-*"]}},
    "every-flag": {
        "workers": 8,
        "sourceNamespaces": ["team-*", "!team-legacy"],
        "sourceNamespaceSelector": "configmirror.io/sources=true,env in (prod,staging)",
        "deleteGrace": "5m",
        "excludeNamespaces": ["kube-system", "sandbox-*"],
        "dropLabels": ["argocd.argoproj.io/*"],
        "dropAnnotations": ["kubectl.kubernetes.io/*", "example.com/secret-ish"],
        "extraArgs": ["--log-level=debug", "--max-retries=8"],
        "extraEnv": [{"name": "CONFIGMIRROR_RESYNC_PERIOD", "value": "300"}],
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "platform",
                         "effect": "NoSchedule"}],
        "podAntiAffinity": "hard",
        "image": {"repository": "registry.example.com/configmirror", "tag": "1.2",
                  "pullPolicy": "Always"},
    },
    "one-pod": {"replicas": 1, "leaderElection": {"enabled": False},
                "podDisruptionBudget": {"enabled": False}, "podAntiAffinity": "none"},
}
SERVICE_MONITOR = {"metrics": {"serviceMonitor": {"enabled": True, "interval": "30s",
                                                  "labels": {"release": "prometheus"}}}}


# -- lint and schema -----------------------------------------------------------------------

@pytest.mark.parametrize("variant", [*VARIANTS, "service-monitor"])
def test_lint_strict_passes(helm: Helm, tmp_path: Path, variant: str) -> None:
    values = VARIANTS.get(variant, SERVICE_MONITOR)
    done = helm("lint", "--strict", str(CHART), *values_file(values, tmp_path), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(("values", "names"), [
    ({"replicas": 0}, ["/replicas", "minimum"]),
    ({"replicas": "two"}, ["/replicas", "integer"]),
    ({"replicas": 1.5}, ["/replicas", "integer"]),
    ({"image": {"tag": 1.2}}, ["/image/tag", "string"]),
    ({"image": {"pullPolicy": "Sometimes"}}, ["/image/pullPolicy", "Always"]),
    ({"workers": 0}, ["/workers", "minimum"]),
    ({"secrets": {"names": "wildcard-tls"}}, ["/secrets/names", "array"]),
    ({"secrets": {"names": ["Not_A_Name"]}}, ["/secrets/names/0", "pattern"]),
    ({"sourceNamespaces": "team-*"}, ["/sourceNamespaces", "array"]),
    ({"podAntiAffinity": "sometimes"}, ["/podAntiAffinity", "soft"]),
    ({"deleteGrace": "a minute"}, ["/deleteGrace", "pattern"]),
    ({"deleteGrace": -1}, ["/deleteGrace", "minimum"]),
    ({"deleteGrace": "-1s"}, ["/deleteGrace", "pattern"]),
    ({"replica": 3}, ["replica", "additional properties"]),
    ({"kinds": ["pods"]}, ["/kinds/0", "networkpolicy"]),
    ({"kinds": "networkpolicy"}, ["/kinds", "array"]),
    ({"kinds": [{"group": "example.com", "version": "v1", "kind": "Widget"}]},
     ["/kinds/0", "resource"]),
    ({"kinds": [{"group": "*", "version": "v1", "kind": "Widget", "resource": "*"}]},
     ["/kinds/0", "pattern"]),
    ({"kinds": [{"group": "example.com", "version": "v1", "kind": "Widget",
                 "resource": "widgets", "fields": ["spec", "status"]}]},
     ["/kinds/0", "fields"]),
    ({"kinds": [{"group": "example.com", "version": "v1", "kind": "Widget",
                 "resource": "widgets", "fields": []}]},
     ["/kinds/0", "fields"]),
])
def test_schema_rejects_a_bad_value_naming_it(helm: Helm, tmp_path: Path,
                                              values: dict[str, Any], names: list[str]) -> None:
    done = helm("template", "configmirror", str(CHART), *values_file(values, tmp_path),
                check=False)
    assert done.returncode != 0, f"{values} was accepted"
    assert "schema" in done.stderr, done.stderr
    for name in names:
        assert name in done.stderr, done.stderr


@pytest.mark.parametrize(("values", "message"), [
    ({"replicas": 2, "leaderElection": {"enabled": False}},
     "replicas > 1 needs leaderElection.enabled=true"),
    ({"secrets": {"names": SECRET_NAMES}},
     "secrets.names is set but secrets.sourceNamespaces is empty"),
])
def test_values_that_contradict_each_other_fail_with_a_message(
        helm: Helm, tmp_path: Path, values: dict[str, Any], message: str) -> None:
    done = helm("template", "configmirror", str(CHART), *values_file(values, tmp_path),
                check=False)
    assert done.returncode != 0, f"{values} was accepted"
    assert message in done.stderr, done.stderr


# -- what the chart renders ------------------------------------------------------------------

def test_default_values_render_the_objects_deploy_applies(
        cluster: Cluster, helm: Helm, tmp_path: Path) -> None:
    """One truth: the chart's defaults are deploy/, object for object and field for field."""
    kustomized = by_key(documents(cluster.require_plane().kubectl(
        "kustomize", str(REPO / "deploy")).stdout))
    charted = by_key(documents(template(helm, tmp_path)))
    # `helm install --create-namespace` owns the namespace; a chart that also rendered it
    # could not be installed into it. Everything else must match.
    assert kustomized.pop(("Namespace", None, "configmirror"))
    assert sorted(charted, key=str) == sorted(kustomized, key=str)
    diffs = []
    for key, expected in kustomized.items():
        want = with_image_placeholder(expected)
        got = with_image_placeholder(without_helm_labels(charted[key]))
        if got != want:
            diffs.append(f"{key}:\n{yaml_diff(want, got)}")
    assert not diffs, ("the chart's defaults differ from deploy/ (change charts/configmirror "
                       "in step with deploy/):\n" + "\n".join(diffs))


def test_default_image_is_configmirrors_own_version(helm: Helm, tmp_path: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["appVersion"] == __version__
    image = container(documents(template(helm, tmp_path)))["image"]
    assert image == f"{values['image']['repository']}:{__version__}"


def test_helm_labels_are_on_every_object(helm: Helm, tmp_path: Path) -> None:
    """What `without_helm_labels` strips is there to strip (or the comparison proves less)."""
    for obj in documents(template(helm, tmp_path)):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "configmirror", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", obj["metadata"]["name"]


def test_defaults_pass_no_optional_flag_but_the_source_namespace_selector_and_the_grace(
        helm: Helm, tmp_path: Path) -> None:
    args = container(documents(template(helm, tmp_path)))["args"]
    assert args == ["run", "--leader-elect", "--log-format=json", "--metrics-bind-address=:8080",
                    "--health-probe-bind-address=:8081",
                    "--source-namespace-selector=configmirror.io/source=true",
                    "--delete-grace=60s"]


@pytest.mark.parametrize(("given", "flag"), [
    ("deleteGrace=60", "--delete-grace=60"),  # a number (helm --set makes one): seconds
    ("deleteGrace=0", "--delete-grace=0"),    # zero is a value, not "unset"
    ("deleteGrace=1.5", "--delete-grace=1.5"),
    ("deleteGrace=1h30m", "--delete-grace=1h30m"),
])
def test_delete_grace_takes_what_the_flag_takes(helm: Helm, given: str, flag: str) -> None:
    """values.schema.json takes what --delete-grace takes (a Go duration, or a number of
    seconds), and the template writes a number as the flag reads it."""
    done = helm("template", "configmirror", str(CHART), "--set", given)
    args = container(documents(done.stdout))["args"]
    assert [a for a in args if a.startswith("--delete-grace")] == [flag]


def test_an_empty_source_namespace_selector_lets_every_namespace_push(
        helm: Helm, tmp_path: Path) -> None:
    args = container(documents(template(helm, tmp_path, {"sourceNamespaceSelector": ""})))["args"]
    assert not any(a.startswith("--source-namespace-selector") for a in args)


def test_values_become_flags_and_extra_args_come_last(helm: Helm, tmp_path: Path) -> None:
    values = {**VARIANTS["every-flag"], **VARIANTS["secrets"]}
    objects = documents(template(helm, tmp_path, values, release="platform"))
    c = container(objects)
    assert c["args"] == [
        "run", "--leader-elect", "--leader-election-id=platform-configmirror",
        "--log-format=json", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
        "--workers=8",
        "--source-namespaces=team-*,!team-legacy",
        "--source-namespace-selector=configmirror.io/sources=true,env in (prod,staging)",
        "--delete-grace=5m",
        "--exclude-namespaces=kube-system,sandbox-*",
        "--drop-labels=argocd.argoproj.io/*",
        "--drop-annotations=kubectl.kubernetes.io/*,example.com/secret-ish",
        "--secret-names=wildcard-tls,registry-credentials",
        "--secret-source-namespaces=platform,infra-*",
        "--log-level=debug", "--max-retries=8",
    ]
    assert c["image"] == "registry.example.com/configmirror:1.2"
    assert c["imagePullPolicy"] == "Always"
    assert c["env"][2:] == [{"name": "CONFIGMIRROR_RESYNC_PERIOD", "value": "300"}]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"] == values["tolerations"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["podAntiAffinity"]


def test_kinds_become_one_flag_and_a_cluster_role_each_with_exactly_their_verbs(
        helm: Helm, tmp_path: Path) -> None:
    objects = documents(template(helm, tmp_path, {"kinds": ["networkpolicy", "limitrange"]}))
    assert "--kinds=networkpolicy,limitrange" in container(objects)["args"]
    roles = {o["metadata"]["name"]: o["rules"] for o in objects if o["kind"] == "ClusterRole"}
    verbs = ["list", "watch", "create", "update", "patch", "delete"]
    assert roles["configmirror-networkpolicy"] == [
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": verbs}]
    assert roles["configmirror-limitrange"] == [
        {"apiGroups": [""], "resources": ["limitranges"], "verbs": verbs}]
    assert "configmirror-resourcequota" not in roles
    bound = {o["roleRef"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"}
    assert {"configmirror-networkpolicy", "configmirror-limitrange"} <= bound
    objects = documents(template(helm, tmp_path, {"kinds": ["rolebinding"],
                                                  "bindableRoles": ["view", "edit"]}))
    assert "--bindable-roles=view,edit" in container(objects)["args"]
    roles = {o["metadata"]["name"]: o["rules"] for o in objects if o["kind"] == "ClusterRole"}
    assert roles["configmirror-rolebinding"][1] == {
        "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles", "roles"],
        "resourceNames": ["view", "edit"], "verbs": ["bind"]}
    assert not any("escalate" in rule["verbs"] for rules in roles.values() for rule in rules)


def test_a_custom_resource_becomes_its_group_version_kind_and_one_exact_cluster_role(
        helm: Helm, tmp_path: Path) -> None:
    widget = {"group": "example.com", "version": "v1", "kind": "Widget", "resource": "widgets"}
    objects = documents(template(helm, tmp_path, {"kinds": ["networkpolicy", widget]}))
    assert "--kinds=networkpolicy,example.com/v1/Widget" in container(objects)["args"]
    roles = {o["metadata"]["name"]: o["rules"] for o in objects if o["kind"] == "ClusterRole"}
    assert roles["configmirror-widgets.example.com"] == [
        {"apiGroups": ["example.com"], "resources": ["widgets"],
         "verbs": ["list", "watch", "create", "update", "patch", "delete"]}]
    bound = {o["roleRef"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"}
    assert "configmirror-widgets.example.com" in bound


def test_a_custom_resources_fields_follow_its_kind_in_the_flag(helm: Helm, tmp_path: Path) -> None:
    widget = {"group": "example.com", "version": "v1", "kind": "Widget", "resource": "widgets",
              "fields": ["spec", "settings"]}
    objects = documents(template(helm, tmp_path, {"kinds": [widget]}))
    assert "--kinds=example.com/v1/Widget:spec:settings" in container(objects)["args"]


def test_one_pod_without_leader_election_renders_no_lease_rbac(
        helm: Helm, tmp_path: Path) -> None:
    objects = documents(template(helm, tmp_path, VARIANTS["one-pod"]))
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
                     "ServiceAccount"]
    assert "--leader-elect" not in container(objects)["args"]
    assert "affinity" not in one(objects, "Deployment")["spec"]["template"]["spec"]


def test_affinity_replaces_the_anti_affinity_preset(helm: Helm, tmp_path: Path) -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "node-role.kubernetes.io/platform", "operator": "Exists"}]}]}}}
    objects = documents(template(helm, tmp_path, {"affinity": affinity}))
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["affinity"] == affinity


def test_service_monitor_is_rendered_only_when_enabled(helm: Helm, tmp_path: Path) -> None:
    assert "ServiceMonitor" not in {o["kind"] for o in documents(template(helm, tmp_path))}
    objects = documents(template(helm, tmp_path, SERVICE_MONITOR, namespace="monitoring-test"))
    monitor, service = one(objects, "ServiceMonitor"), one(objects, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items(), "selects the Service"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["monitoring-test"]}
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["interval"] == "30s"


# -- against the apiserver -------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
def test_rendered_manifest_passes_server_side_dry_run(
        cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path, variant: str) -> None:
    plane = cluster.require_plane()
    manifest = template(helm, tmp_path, VARIANTS[variant], release=unique_name("dry"),
                        namespace=namespace)
    done = plane.kubectl("apply", "--dry-run=server", "-f", "-", input=manifest)
    applied = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(applied) == len(documents(manifest)), done.stdout
    assert all(line.endswith("(server dry run)") for line in applied), done.stdout


def test_helm_install_server_dry_run_passes_and_creates_nothing(
        cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path) -> None:
    release = unique_name("dry")
    done = helm("install", release, str(CHART), "--namespace", namespace, "--dry-run=server",
                *values_file(VARIANTS["secrets"], tmp_path), kubeconfig=cluster.kubeconfig)
    assert "STATUS: pending-install" in done.stdout, done.stdout
    assert f"name: {release}-configmirror-secrets" in done.stdout
    assert helm_objects(cluster, release) == set()


def test_install_with_a_bad_value_fails_before_creating_anything(
        cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path) -> None:
    release = unique_name("bad")
    done = helm("install", release, str(CHART), "--namespace", namespace,
                *values_file({"replicas": 0}, tmp_path), kubeconfig=cluster.kubeconfig,
                check=False)
    assert done.returncode != 0 and "/replicas" in done.stderr, done.stderr
    assert helm_objects(cluster, release) == set()
    assert cluster.core.list_namespaced_secret(namespace).items == [], "no release record"


def helm_objects(cluster: Cluster, release: str) -> set[str]:
    return release_objects(cluster.require_plane(), release)


def cluster_scoped_objects(cluster: Cluster) -> set[str]:
    return all_cluster_scoped(cluster.require_plane())


def test_install_then_uninstall_leaves_no_cluster_scoped_objects(
        cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path) -> None:
    release = unique_name("cm")
    before = cluster_scoped_objects(cluster)
    helm("install", release, str(CHART), "--namespace", namespace,
         *values_file(VARIANTS["secrets"], tmp_path), kubeconfig=cluster.kubeconfig)
    fullname = f"{release}-configmirror"
    # The chart's ClusterRoles and bindings, and what the apiserver made for it (the
    # Service's ClusterIP is an IPAddress object): all must go with the release.
    added = cluster_scoped_objects(cluster) - before
    assert {f"clusterrole.rbac.authorization.k8s.io/{fullname}",
            f"clusterrole.rbac.authorization.k8s.io/{fullname}-secrets",
            f"clusterrolebinding.rbac.authorization.k8s.io/{fullname}",
            f"clusterrolebinding.rbac.authorization.k8s.io/{fullname}-secrets"} <= added, added
    assert f"deployment.apps/{fullname}" in helm_objects(cluster, release)

    helm("uninstall", release, "--namespace", namespace, kubeconfig=cluster.kubeconfig)
    with contextlib.suppress(WaitTimeout):  # the assertions below say what is left
        wait_for(lambda: not cluster_scoped_objects(cluster) - before
                 and not helm_objects(cluster, release), timeout=30, what="uninstall")
    assert cluster_scoped_objects(cluster) - before == set(), "cluster-scoped leftovers"
    assert helm_objects(cluster, release) == set(), "leftovers in the release's namespace"
    assert cluster.core.list_namespaced_secret(namespace).items == [], "no release record left"


# -- Secrets RBAC, for real ---------------------------------------------------------------------

@dataclass
class Installed:
    """A release of the chart installed for real: what it rendered, where, and what it said."""
    docs: list[dict[str, Any]]
    namespace: str
    release: str
    notes: str
    kubeconfig: Path  # holding only a token of the release's ServiceAccount


@pytest.fixture(scope="module")
def installed(cluster: Cluster, helm: Helm,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """The chart with Secrets on, installed as its README says (the namespace created and
    labelled first, then `helm install`), under a release name and in a namespace that are
    not the defaults; uninstalled after the module."""
    folder = tmp_path_factory.mktemp("installed")
    namespaces = Namespaces(cluster, "t-chart-ops")
    release = unique_name("mirror")
    try:
        namespace = namespaces(NAMESPACE_LABELS)
        done = helm("install", release, str(CHART), "--namespace", namespace,
                    *values_file(VARIANTS["secrets"], folder), kubeconfig=cluster.kubeconfig)
        try:
            docs = documents(helm("get", "manifest", release, "--namespace", namespace,
                                  kubeconfig=cluster.kubeconfig).stdout)
            yield Installed(docs, namespace, release, done.stdout,
                            cluster.token_kubeconfig(namespace, f"{release}-configmirror",
                                                     folder / "kubeconfig"))
        finally:
            helm("uninstall", release, "--namespace", namespace, kubeconfig=cluster.kubeconfig)
    finally:
        namespaces.cleanup()


@pytest.fixture(scope="module")
def secrets_rbac(installed: Installed) -> Path:
    """A kubeconfig of the installed release's ServiceAccount (Secrets on)."""
    return installed.kubeconfig


def test_a_release_of_another_name_in_another_namespace_replicates_and_keeps_the_secret_guarantee(
        cluster: Cluster, installed: Installed, namespaces: Namespaces,
        operators: Operators) -> None:
    fullname = f"{installed.release}-configmirror"
    assert service_account(installed.docs) == (installed.namespace, fullname)
    check_install(cluster, operators, namespaces, installed.docs, installed.kubeconfig,
                  lease=fullname)


@pytest.mark.operator_process
def test_status_without_flags_judges_with_the_installed_releases_policy(
        cluster: Cluster, installed: Installed, namespaces: Namespaces,
        operators: Operators) -> None:
    """The chart ships --source-namespace-selector=configmirror.io/source=true: `kubectl
    configmirror status` with no policy flag reports a source outside such a namespace as not
    allowed, as the release's operator does, under a release name that is not the default."""
    check_status_follows_policy(cluster, operators, namespaces, installed.docs,
                                installed.kubeconfig, lease=f"{installed.release}-configmirror")


def test_the_install_notes_say_which_labels_the_namespaces_need(installed: Installed) -> None:
    notes = installed.notes.split("NOTES:", 1)[1]
    assert (f"kubectl label namespace {installed.namespace} configmirror.io/ignore=true "
            "pod-security.kubernetes.io/enforce=restricted") in notes
    assert "kubectl label namespace NAMESPACE configmirror.io/source=true" in notes
    # ...and before the ConfigMap is annotated.
    assert notes.index("configmirror.io/source=true") < notes.index("kubectl annotate")


def test_the_readme_creates_and_labels_the_namespace_before_the_install() -> None:
    """The README's install, in the order the `installed` fixture follows: no moment in which
    the release's namespace exists unlabelled (a `replicate-to: "*"` source would write into
    it), and the restricted Pod Security level from the start."""
    readme = (CHART / "README.md").read_text()
    blocks = readme.split("```")[1::2]
    install = next(b for b in blocks if "helm install" in b)
    commands = [c for c in (line.split("#")[0].strip() for line in install.splitlines()) if c]
    labels = " ".join(f"{k}={v}" for k, v in NAMESPACE_LABELS.items())
    create = commands.index("kubectl create namespace configmirror")
    label = commands.index(f"kubectl label namespace configmirror {labels}")
    helm_install = next(i for i, c in enumerate(commands) if c.startswith("helm install"))
    assert create < label < helm_install, commands
    assert not [b for b in blocks if "--create-namespace" in b]


def test_the_notes_give_no_label_command_for_a_selector_no_label_can_satisfy(
        helm: Helm, tmp_path: Path) -> None:
    values = {"sourceNamespaceSelector": "env in (prod,staging)"}
    done = helm("install", "configmirror", str(CHART), "--dry-run=client", "--namespace", "x",
                *values_file(values, tmp_path))
    notes = done.stdout.split("NOTES:", 1)[1]
    assert 'may hold sources: label' in notes and "env in (prod,staging)" in notes
    assert "kubectl label namespace NAMESPACE" not in notes


@pytest.mark.parametrize("resource", ["networkpolicies.networking.k8s.io", "limitranges",
                                      "resourcequotas", "roles.rbac.authorization.k8s.io",
                                      "rolebindings.rbac.authorization.k8s.io",
                                      "serviceaccounts"])
@pytest.mark.parametrize(("verb", "namespace"), [("list", None), ("watch", None),
                                                 ("create", "default"), ("update", "default"),
                                                 ("delete", "default")])
def test_a_release_without_kinds_holds_no_permission_on_any_other_kind(
        cluster: Cluster, secrets_rbac: Path, verb: str, resource: str,
        namespace: str | None) -> None:
    scope = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    done = cluster.require_plane().kubectl("auth", "can-i", verb, resource, *scope,
                                           kubeconfig=secrets_rbac, check=False)
    assert done.stdout.strip() == "no", done.stdout + done.stderr


@pytest.fixture(scope="module")
def widget_rbac(cluster: Cluster, helm: Helm,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kubeconfig of the ServiceAccount of a release installed with one custom resource
    turned on (example.com/v1/Widget, resource widgets): its RBAC as the API server applies
    it. The CRD is installed (kept for the run, as test_kinds does) so that kubectl resolves
    widgets.example.com to its group, as the operator's requests name it."""
    folder = tmp_path_factory.mktemp("widget-release")
    namespaces = Namespaces(cluster, "t-chart-widget")
    release = unique_name("widgets")
    widget = {"group": "example.com", "version": "v1", "kind": "Widget", "resource": "widgets"}
    install_crd(cluster.api_client, crd("widgets", "Widget"))
    try:
        namespace = namespaces(NAMESPACE_LABELS)
        helm("install", release, str(CHART), "--namespace", namespace,
             *values_file({"kinds": [widget]}, folder), kubeconfig=cluster.kubeconfig)
        try:
            yield cluster.token_kubeconfig(namespace, f"{release}-configmirror",
                                           folder / "kubeconfig")
        finally:
            helm("uninstall", release, "--namespace", namespace, kubeconfig=cluster.kubeconfig)
    finally:
        namespaces.cleanup()


@pytest.mark.parametrize(("verb", "resource", "namespace", "allowed"), [
    ("list", "widgets.example.com", None, True),
    ("watch", "widgets.example.com", None, True),
    *[(verb, "widgets.example.com", "default", True)
      for verb in ("create", "update", "patch", "delete")],
    # Exactly the verbs configmirror uses: not one object read by name, not a collection
    # deleted; and the plural in no other group, nor any other plural of its group.
    ("get", "widgets.example.com", "default", False),
    ("deletecollection", "widgets.example.com", "default", False),
    ("create", "widgets.example.org", "default", False),
    ("create", "gadgets.example.com", "default", False),
    ("list", "networkpolicies.networking.k8s.io", None, False),
])
def test_a_release_with_a_custom_resource_holds_exactly_its_verbs_on_it_and_nothing_else(
        cluster: Cluster, widget_rbac: Path, verb: str, resource: str, namespace: str | None,
        allowed: bool) -> None:
    scope = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    done = cluster.require_plane().kubectl("auth", "can-i", verb, resource, *scope,
                                           kubeconfig=widget_rbac, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stdout + done.stderr


@pytest.mark.parametrize(("verb", "resource", "namespace", "allowed"), [
    *[(verb, f"secrets/{name}", "default", True)
      for verb in ("list", "watch", "update", "delete") for name in SECRET_NAMES],
    # Not even the listed names may be read one by one: the operator only watches them.
    *[("get", f"secrets/{name}", "default", False) for name in SECRET_NAMES],
    ("list", "secrets/wildcard-tls", None, True),
    ("watch", "secrets/registry-credentials", None, True),
    ("create", "secrets", "default", True),
    # Another name, any name, or every Secret: denied.
    ("get", "secrets/db-password", "default", False),
    ("update", "secrets/db-password", "default", False),
    ("delete", "secrets/db-password", "default", False),
    ("get", "secrets", "default", False),
    ("list", "secrets", "default", False),
    ("list", "secrets", None, False),
    ("watch", "secrets", None, False),
    ("patch", "secrets/wildcard-tls", "default", True),  # releasing a replica
    ("patch", "secrets/db-password", "default", False),
    ("deletecollection", "secrets", "default", False),
])
def test_secrets_rbac_grants_exactly_the_listed_names(
        cluster: Cluster, secrets_rbac: Path, verb: str, resource: str,
        namespace: str | None, allowed: bool) -> None:
    scope = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    done = cluster.require_plane().kubectl("auth", "can-i", verb, resource, *scope,
                                           kubeconfig=secrets_rbac, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stdout + done.stderr


def test_the_charts_admission_policy_refuses_its_service_account_another_secret_name(
        cluster: Cluster, secrets_rbac: Path) -> None:
    core = client.CoreV1Api(config.new_client_from_config(str(secrets_rbac)))

    def create(name: str) -> int:
        try:
            core.create_namespaced_secret("default", {
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}},
                dry_run="All")  # admission runs; nothing is written
        except client.ApiException as err:
            return int(err.status)
        return 201

    wait_for(lambda: create("db-password") == 403, timeout=30,
             what="the chart's admission policy to be in force")
    assert [create(name) for name in SECRET_NAMES] == [201] * len(SECRET_NAMES)


def test_secrets_rbac_lets_a_list_by_name_through_and_no_other(
        cluster: Cluster, secrets_rbac: Path) -> None:
    """A list by metadata.name (how a client watches only named Secrets) passes for a listed
    name; another name, or every Secret, is forbidden."""
    core = client.CoreV1Api(config.new_client_from_config(str(secrets_rbac)))
    core.list_secret_for_all_namespaces(field_selector="metadata.name=wildcard-tls")
    with pytest.raises(client.ApiException) as denied:
        core.list_secret_for_all_namespaces(field_selector="metadata.name=db-password")
    assert denied.value.status == 403
    with pytest.raises(client.ApiException) as denied:
        core.list_secret_for_all_namespaces()
    assert denied.value.status == 403


# -- member clusters: the home side (fleet) and the member side ---------------------------------

FLEET = {"fleet": {"enabled": True}}
WIDGET_ENTRY = {"group": "example.com", "version": "v1", "kind": "Widget", "resource": "widgets"}
MEMBER_SIDE = {"memberSide": {"enabled": True,
                              "kinds": ["rolebinding", WIDGET_ENTRY, "networkpolicy"],
                              "secretNames": SECRET_NAMES, "bindableRoles": ["view"]}}


@pytest.mark.parametrize("values", [FLEET, {**FLEET, "clusterName": "prod-eu"}, MEMBER_SIDE,
                                    {**FLEET, **MEMBER_SIDE}])
def test_lint_strict_passes_with_member_clusters(helm: Helm, tmp_path: Path,
                                                 values: dict[str, Any]) -> None:
    done = helm("lint", "--strict", str(CHART), *values_file(values, tmp_path), check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("values", "names"), [
    ({"clusterName": "Prod"}, ["/clusterName", "pattern"]),
    ({"clusterName": "a" * 64}, ["/clusterName"]),
    ({"fleet": {"enabled": "yes"}}, ["/fleet/enabled", "boolean"]),
    ({"fleet": {"clusters": []}}, ["/fleet", "additional properties"]),
    ({"memberSide": {"kinds": ["pods"]}}, ["/memberSide/kinds/0", "networkpolicy"]),
    ({"memberSide": {"secretNames": ["Not_A_Name"]}}, ["/memberSide/secretNames/0", "pattern"]),
    ({"memberSide": {"bindableRoles": "view"}}, ["/memberSide/bindableRoles", "array"]),
])
def test_schema_rejects_a_bad_member_cluster_value_naming_it(
        helm: Helm, tmp_path: Path, values: dict[str, Any], names: list[str]) -> None:
    done = helm("template", "configmirror", str(CHART), *values_file(values, tmp_path),
                check=False)
    assert done.returncode != 0, f"{values} was accepted"
    assert "schema" in done.stderr, done.stderr
    for name in names:
        assert name in done.stderr, done.stderr


def test_fleet_renders_the_objects_deploy_applies_with_the_fleet_component(
        cluster: Cluster, helm: Helm, tmp_path: Path) -> None:
    """One truth for the home side too: fleet.enabled is deploy/ plus components/fleet."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(REPO / "deploy", overlay)],
        "components": [os.path.relpath(REPO / "deploy" / "components" / "fleet", overlay)]}))
    kustomized = by_key(documents(cluster.require_plane().kubectl(
        "kustomize", str(overlay)).stdout))
    charted = by_key(documents(template(helm, tmp_path, FLEET)))
    assert kustomized.pop(("Namespace", None, "configmirror"))
    assert sorted(charted, key=str) == sorted(kustomized, key=str)
    diffs = [f"{key}:\n{yaml_diff(with_image_placeholder(want), got)}"
             for key, want in kustomized.items()
             if (got := with_image_placeholder(without_helm_labels(charted[key])))
             != with_image_placeholder(want)]
    assert not diffs, "\n".join(diffs)


def test_the_cluster_name_is_a_flag_unless_it_is_local(helm: Helm, tmp_path: Path) -> None:
    def args(values: dict[str, Any]) -> list[str]:
        return list(container(documents(template(helm, tmp_path, values)))["args"])

    assert not any(a.startswith(("--cluster-name", "--member-clusters")) for a in args({}))
    assert not any(a.startswith("--cluster-name") for a in args({"clusterName": "local"}))
    given = args({**FLEET, "clusterName": "prod-eu", "extraArgs": ["--log-level=debug"]})
    assert given[-3:] == ["--cluster-name=prod-eu", "--member-clusters", "--log-level=debug"]


def test_the_member_side_is_what_cluster_add_installs(helm: Helm, tmp_path: Path) -> None:
    from configmirror.cli.cluster import member_rules, member_side
    from configmirror.vocabulary import NETWORKPOLICY, ROLEBINDING, Kind, Resource

    widget = Kind(Resource("widgets", "Widget", "example.com"), ("spec",), custom=True)
    wanted = by_key(member_side(member_rules([ROLEBINDING, widget, NETWORKPOLICY],
                                             SECRET_NAMES, ["view"])))
    objects = documents(template(helm, tmp_path, MEMBER_SIDE, namespace="platform-ops"))
    member = by_key([without_helm_labels(o) for o in objects
                     if o["metadata"]["labels"].get("app.kubernetes.io/component") == "member"])
    assert member == wanted
    # Installed in namespace configmirror itself, the chart leaves the namespace to the install.
    there = by_key(documents(template(helm, tmp_path, MEMBER_SIDE, namespace="configmirror")))
    assert ("Namespace", None, "configmirror") not in there
    assert ("ServiceAccount", "configmirror", "configmirror-member") in there
    assert not any(o["metadata"]["labels"].get("app.kubernetes.io/component") == "member"
                   for o in documents(template(helm, tmp_path)))
