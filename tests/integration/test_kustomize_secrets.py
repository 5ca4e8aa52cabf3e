"""deploy/components/secrets in a user's overlay: a Secret name added in one place (the
component's ClusterRole, by one patch) is granted by RBAC and admitted by the admission policy,
which asks RBAC; a name not listed is neither. The overlay is built with kubectl's kustomize and
its RBAC and policy applied to the suite's real API server, under a namespace and a name prefix
of their own, so nothing deploy/ or another module installs is touched."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from configmirror_testing.cluster import REPO, Cluster, unique_name
from configmirror_testing.installs import create_secret, service_account
from configmirror_testing.wait import wait_for

pytestmark = pytest.mark.controlplane
COMPONENT = REPO / "deploy" / "components" / "secrets"
LISTED = ["wildcard-tls", "registry-credentials"]  # the component's own
ADDED, UNLISTED = "db-password", "api-token"
# What the overlay applies: the ServiceAccount, its Secrets RBAC and the admission policy.
APPLIED = {"Namespace", "ServiceAccount", "ValidatingAdmissionPolicy",
           "ValidatingAdmissionPolicyBinding"}


def component_names() -> tuple[list[str], list[str]]:
    """The names in the component's --secret-names and in its ClusterRole's resourceNames."""
    patch = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())["patches"][0]
    (flag,) = [op["value"] for op in yaml.safe_load(patch["patch"])
               if op["value"].startswith("--secret-names=")]
    (role,) = [d for d in yaml.safe_load_all((COMPONENT / "rbac.yaml").read_text())
               if d["kind"] == "ClusterRole"]
    (names,) = [r["resourceNames"] for r in role["rules"] if "resourceNames" in r]
    return flag.split("=", 1)[1].split(","), names


def test_the_components_flag_names_exactly_what_its_rbac_grants_and_its_policy_names_none() -> None:
    flag, rbac = component_names()
    assert flag == rbac == LISTED
    policy = (COMPONENT / "admission.yaml").read_text()
    body = "\n".join(line for line in policy.splitlines() if not line.lstrip().startswith("#"))
    assert not any(name in body for name in LISTED), "the policy asks RBAC; it lists no name"


@pytest.fixture(scope="module")
def overlay(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[list[dict[str, Any]], Path]]:
    """An overlay of deploy/ and the component, in a namespace of its own with a name prefix,
    adding ADDED with one patch; its RBAC and policy applied. Its rendering, and a kubeconfig
    holding a token of its ServiceAccount."""
    plane = cluster.require_plane()
    folder = tmp_path_factory.mktemp("kustomize-secrets") / "overlay"
    folder.mkdir()
    home = unique_name("ks")
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(REPO / "deploy", folder)],
        "components": [os.path.relpath(COMPONENT, folder)],
        "namespace": home, "namePrefix": f"{home}-",
        "patches": [{"target": {"kind": "ClusterRole", "name": "configmirror-secrets"},
                     "patch": yaml.safe_dump([{"op": "add", "path": "/rules/0/resourceNames/-",
                                               "value": ADDED}])}]}))
    docs = [d for d in yaml.safe_load_all(plane.kubectl("kustomize", str(folder)).stdout) if d]
    applied = yaml.safe_dump_all([
        d for d in docs if d["kind"] in APPLIED
        or (d["kind"].startswith("ClusterRole") and d["metadata"]["name"].endswith("-secrets"))])
    plane.kubectl("apply", "-f", "-", input=applied)
    try:
        namespace, name = service_account(docs)
        yield docs, cluster.token_kubeconfig(namespace, name, folder.parent / "kubeconfig")
    finally:
        plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=applied)
        plane.finalize_namespace(home)


def test_an_overlay_adds_a_name_to_rbac_with_one_patch_and_the_policy_follows_unchanged(
        overlay: tuple[list[dict[str, Any]], Path]) -> None:
    docs, _ = overlay
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"
               and d["metadata"]["name"].endswith("configmirror-secrets")]
    assert [r.get("resourceNames") for r in role["rules"]] == [[*LISTED, ADDED], None]
    assert [r["verbs"] for r in role["rules"]] == [
        ["list", "watch", "update", "patch", "delete"], ["create"]]
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    ours = yaml.safe_load_all((COMPONENT / "admission.yaml").read_text())
    assert policy["spec"] == next(d for d in ours if d["kind"] == policy["kind"])["spec"]
    # Only the RBAC knows the new name; the operator's flag is the component's until the
    # overlay says otherwise (the component's comments: a second patch).
    (flag,) = [a for d in docs if d["kind"] == "Deployment"
               for a in d["spec"]["template"]["spec"]["containers"][0]["args"]
               if a.startswith("--secret-names=")]
    assert re.split("[=,]", flag)[1:] == LISTED


@pytest.mark.parametrize(("verb", "name", "namespace", "allowed"), [
    # The name the overlay added, as the operator uses it: a watch by name in every namespace.
    ("list", ADDED, None, True),
    ("watch", ADDED, None, True),
    ("update", ADDED, "default", True),
    ("patch", ADDED, "default", True),
    ("delete", ADDED, "default", True),
    # A name the component lists.
    ("list", LISTED[0], None, True),
    ("watch", LISTED[1], None, True),
    ("update", LISTED[1], "default", True),
    # Not listed: nothing but create, which RBAC cannot restrict by name (the policy does).
    ("list", UNLISTED, None, False),
    ("watch", UNLISTED, None, False),
    ("update", UNLISTED, "default", False),
    ("delete", UNLISTED, "default", False),
    ("create", None, "default", True),
    # Never every Secret, never a get (the cache answers reads).
    ("list", None, None, False),
    ("watch", None, None, False),
    ("list", None, "default", False),
    ("get", ADDED, "default", False),
    ("deletecollection", None, "default", False),
])
def test_rbac_grants_the_service_account_exactly_the_listed_and_added_names(
        cluster: Cluster, overlay: tuple[list[dict[str, Any]], Path], verb: str,
        name: str | None, namespace: str | None, allowed: bool) -> None:
    docs, _ = overlay
    home, account = service_account(docs)
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{home}:{account}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{home}",
                "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(
            verb=verb, resource="secrets", name=name, namespace=namespace)))
    status = client.AuthorizationV1Api(cluster.api_client).create_subject_access_review(
        review).status
    assert status is not None and bool(status.allowed) is allowed, (verb, name, namespace, status)


def test_the_admission_policy_admits_the_added_name_and_refuses_an_unlisted_one(
        overlay: tuple[list[dict[str, Any]], Path]) -> None:
    docs, kubeconfig = overlay
    home, _ = service_account(docs)
    # A policy takes a moment to be in force; dry runs pass admission as a create does.
    wait_for(lambda: create_secret(kubeconfig, home, UNLISTED, dry_run=True) == 403,
             timeout=30, what="the admission policy to refuse an unlisted Secret name")
    assert create_secret(kubeconfig, home, ADDED, dry_run=True) == 201
    assert create_secret(kubeconfig, home, LISTED[0], dry_run=True) == 201
