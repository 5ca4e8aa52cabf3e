"""Reading the chart (charts/configmirror) as the tests do: `helm template` of it with values,
its documents, one object of a kind, and a diff against deploy/ that ignores Helm's own labels.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeAlias

import yaml

from configmirror_testing.cluster import unique_name
from configmirror_testing.helm import Helm
from configmirror_testing.tools import REPO

CHART = REPO / "charts" / "configmirror"
# Labels Helm charts carry and kustomize's deploy/ does not; the rest must be equal.
HELM_OWN_LABELS = ("helm.sh/chart", "app.kubernetes.io/instance",
                   "app.kubernetes.io/managed-by", "app.kubernetes.io/version")


def values_file(values: dict[str, Any], folder: Path) -> list[str]:
    """`-f file` arguments carrying `values` (none for no values)."""
    if not values:
        return []
    path = folder / f"values-{unique_name('v')}.yaml"
    path.write_text(yaml.safe_dump(values))
    return ["-f", str(path)]


def template(helm: Helm, folder: Path, values: dict[str, Any] | None = None,
             release: str = "configmirror", namespace: str = "configmirror") -> str:
    """`helm template` of the chart: the manifest, as helm writes it."""
    return helm("template", release, str(CHART), "--namespace", namespace,
                *values_file(values or {}, folder)).stdout


def documents(manifest: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


Key: TypeAlias = tuple[str, str | None, str]


def by_key(objects: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """Objects by (kind, namespace, name); a duplicate key is a bug in the manifest."""
    keyed: dict[Key, dict[str, Any]] = {}
    for obj in objects:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace"), meta["name"])
        assert key not in keyed, f"{key} appears twice"
        keyed[key] = obj
    return keyed


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def without_helm_labels(value: Any) -> Any:
    """`value` with Helm's own label keys removed from every mapping, however deep."""
    if isinstance(value, dict):
        return {k: without_helm_labels(v) for k, v in value.items() if k not in HELM_OWN_LABELS}
    if isinstance(value, list):
        return [without_helm_labels(v) for v in value]
    return value


def with_image_placeholder(obj: dict[str, Any]) -> dict[str, Any]:
    """The image comes from values (chart) or kustomize's images: (deploy/); compared apart."""
    if obj["kind"] == "Deployment":
        for c in obj["spec"]["template"]["spec"]["containers"]:
            c["image"] = "<image>"
    return obj


def yaml_diff(expected: Any, actual: Any) -> str:
    return "\n".join(difflib.unified_diff(
        yaml.safe_dump(expected).splitlines(), yaml.safe_dump(actual).splitlines(),
        "kubectl kustomize deploy/", "helm template", lineterm=""))
