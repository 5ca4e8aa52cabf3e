"""Objects the tests and benchmarks create, as plain JSON bodies the client accepts as they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from configmirror.replication.model import DEFAULT_RULES, CachedObject, object_from_json
from configmirror.vocabulary import CONFIGMAP, Kind, Resource
from configmirror_testing.wait import wait_for


def configmap(name: str, annotations: dict[str, str] | None = None,
              data: dict[str, str] | None = None, labels: dict[str, str] | None = None,
              namespace: str | None = None, **fields: Any) -> dict[str, Any]:
    """A ConfigMap body; `data` defaults to {"greeting": "hello"}; `fields` go to the top
    level (binaryData=..., immutable=True)."""
    return of_kind(CONFIGMAP, name,
                   {"data": data if data is not None else {"greeting": "hello"}, **fields},
                   annotations, labels, namespace)


def of_kind(kind: Kind, name: str, fields: dict[str, Any],
            annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            namespace: str | None = None) -> dict[str, Any]:
    """An object of `kind` with these top-level `fields` (spec=..., rules=...)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = annotations
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": kind.resource.api_version, "kind": kind.name, "metadata": metadata,
            **fields}


# Two contents of each kind --kinds turns on, as the API server stores them (defaults
# filled in): a source's first version and its edit.
KIND_CONTENTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "networkpolicy": (
        {"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
        {"spec": {"podSelector": {"matchLabels": {"app": "web"}},
                  "ingress": [{"from": [{"podSelector": {}}]}],
                  "policyTypes": ["Ingress"]}}),
    "limitrange": (
        {"spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"},
                              "defaultRequest": {"cpu": "100m"}}]}},
        {"spec": {"limits": [{"type": "Container", "default": {"cpu": "1"},
                              "defaultRequest": {"cpu": "200m"}}]}}),
    "resourcequota": (
        {"spec": {"hard": {"pods": "10"}}},
        {"spec": {"hard": {"pods": "20", "services": "5"}}}),
    # Rules the operator holds itself (RBAC's escalation check lets it write them).
    "role": (
        {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]},
        {"rules": [{"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["list", "watch"]}]}),
    # A role in deploy/'s rolebinding component's --bindable-roles; roleRef never changes.
    "rolebinding": (
        {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "view"},
         "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                       "name": "team-readers"}]},
        {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "view"},
         "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                       "name": "team-auditors"}]}),
    "serviceaccount": (
        {"automountServiceAccountToken": True},
        {"automountServiceAccountToken": False, "imagePullSecrets": [{"name": "regcred"}]}),
    # A custom resource (WIDGET): its spec, whatever its schema lets it hold.
    "widget.example.com": (
        {"spec": {"size": 1, "colours": ["blue"]}},
        {"spec": {"size": 2, "colours": ["blue", "green"], "shape": {"sides": 6}}}),
}
# The custom resource the tests install (tests/integration/test_kinds.py's CRD) and turn on
# with --kinds=example.com/v1/Widget, as discovery resolves it.
WIDGET = Kind(Resource("widgets", "Widget", "example.com", "v1"), ("spec",), custom=True)


def cached(raw: dict[str, Any], kind: Kind) -> CachedObject:
    """`raw` as the operator's cache holds it, under the default drop rules."""
    return object_from_json(raw, DEFAULT_RULES, kind)


def service_account_token(core: client.CoreV1Api, namespace: str, name: str,
                          create: bool = True, expiration_seconds: int = 3600) -> str:
    """A TokenRequest token of ServiceAccount `namespace/name` (created first if `create`)."""
    if create:
        core.create_namespaced_service_account(
            namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=[], expiration_seconds=expiration_seconds))
    status = core.create_namespaced_service_account_token(name, namespace, request).status
    assert status is not None and status.token, f"no token for {namespace}/{name}"
    return str(status.token)


def token_kubeconfig(base: Path, token: str, path: Path) -> Path:
    """A copy of kubeconfig `base` whose every context authenticates with `token` only."""
    doc = yaml.safe_load(base.read_text())
    doc["users"] = [{"name": "token-user", "user": {"token": token}}]
    for context in doc["contexts"]:
        context["context"]["user"] = "token-user"
    path.write_text(yaml.safe_dump(doc))
    return path


def crd(plural: str, kind: str, scope: str = "Namespaced") -> dict[str, Any]:
    """A CustomResourceDefinition of group example.com, version v1: a spec and settings of any
    fields, and a status subresource."""
    fields = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.example.com"},
            "spec": {"group": "example.com", "scope": scope,
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind,
                               "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "properties": {"spec": fields, "settings": fields,
                                                      "status": fields}}}}]}}


def admin_call(api: client.ApiClient, method: str, path: str, body: Any = None,
               content_type: str = "application/json") -> Any:
    """One request on any REST path through `api` (the admin's client), its JSON answer."""
    request = api.param_serialize(
        method, path, body=body, auth_settings=["BearerToken"],
        header_params={"Content-Type": content_type, "Accept": "application/json"})
    response = api.call_api(*request, _request_timeout=10)
    response.read()  # type: ignore[no-untyped-call]
    if not 200 <= response.status < 300:
        raise client.ApiException(http_resp=response)
    assert response.data is not None
    return json.loads(response.data)


def install_crd(api: client.ApiClient, body: dict[str, Any]) -> None:
    """`body` created (or kept, from an earlier run against this API server) and served:
    established, and its kind in discovery."""
    try:
        admin_call(api, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
    except client.ApiException as err:
        if err.status != 409:
            raise
    spec = body["spec"]
    path = f"/apis/{spec['group']}/{spec['versions'][0]['name']}"

    def served() -> bool:
        try:
            found = admin_call(api, "GET", path)
        except client.ApiException:
            return False
        return any(r["kind"] == spec["names"]["kind"] for r in found.get("resources") or ())
    wait_for(served, timeout=30, what=f"{body['metadata']['name']} served")
