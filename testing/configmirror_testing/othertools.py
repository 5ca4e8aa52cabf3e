"""The mirrors kubernetes-reflector and kubernetes-replicator write, as they write them: their
marks and their content, each field at the file and line of the tool's public source that
writes it (read for facts; none of their code is here). For the tests of adoption.

    body = reflector_mirror(source_body, "team-a")        # a ConfigMap or Secret body
    body = replicator_copy(source_body, "team-a")
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

# emberstack/kubernetes-reflector, src/ES.Kubernetes.Reflector/Mirroring/Core/Annotations.cs,
# lines 5 and 15-20.
RF = "reflector.v1.k8s.emberstack.com/"
# mittwald/kubernetes-replicator, replicate/common/consts.go, lines 5-8 and 11-12.
RP = "replicator.v1.mittwald.de/"


def reflector_mirror(source: dict[str, Any], namespace: str, auto: bool = True,
                     at: datetime | None = None) -> dict[str, Any]:
    """What kubernetes-reflector creates in `namespace` for `source` (a ConfigMap or Secret
    body, with its resourceVersion).

    ResourceMirror.cs (ResourceReflect, lines 561-576): a clone of the source's content,
    named as the source, whose annotations are only reflector's four: `auto-reflects` (C#'s
    bool.ToString(): "True" or "False"), `reflects` NS/NAME, `reflected-version` the source's
    resourceVersion, and `reflected-at` in the round-trip format "O" (line 572). The clone:
    ConfigMapMirror.cs, lines 38-45 (apiVersion, kind, data, binaryData; no labels);
    SecretMirror.cs, lines 37-44 (apiVersion, kind, type, data).
    """
    meta = source["metadata"]
    when = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f0+00:00")
    body: dict[str, Any] = {"apiVersion": "v1", "kind": source["kind"], "metadata": {
        "name": meta["name"], "namespace": namespace, "annotations": {
            RF + "auto-reflects": "True" if auto else "False",
            RF + "reflects": f"{meta['namespace']}/{meta['name']}",
            RF + "reflected-version": meta["resourceVersion"],
            RF + "reflected-at": when}}}
    if source["kind"] == "Secret":
        body["type"] = source.get("type", "Opaque")
        body["data"] = dict(source.get("data") or {})
    else:
        body["data"] = dict(source.get("data") or {})
        if source.get("binaryData"):
            body["binaryData"] = dict(source["binaryData"])
    return body


def replicator_copy(source: dict[str, Any], namespace: str, at: datetime | None = None
                    ) -> dict[str, Any]:
    """What kubernetes-replicator creates in `namespace` for a source with `replicate-to`.

    replicate/configmap/configmaps.go (ReplicateObjectTo, lines 183-250, a new object): the
    source's data and binaryData (lines 204-217; Go omits an empty binaryData), the source's
    labels unless it says `strip-labels` (lines 226-239), and as annotations only the three
    marks (lines 240-242): `replicated-at` (RFC 3339), `replicated-from-version` (the
    source's resourceVersion) and `replicated-keys` (its keys, sorted, comma-joined). A
    Secret's copy also takes the source's type (replicate/secret/secrets.go, lines 146 and
    199-202).
    """
    meta = source["metadata"]
    data = dict(source.get("data") or {})
    binary = dict(source.get("binaryData") or {})
    annotations = meta.get("annotations") or {}
    labels = {} if RP + "strip-labels" in annotations else dict(meta.get("labels") or {})
    body: dict[str, Any] = {"apiVersion": "v1", "kind": source["kind"], "metadata": {
        "name": meta["name"], "namespace": namespace, "labels": labels, "annotations": {
            RP + "replicated-at": (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            RP + "replicated-from-version": meta["resourceVersion"],
            RP + "replicated-keys": ",".join(sorted([*data, *binary]))}},
        "data": data}
    if binary:
        body["binaryData"] = binary
    if source["kind"] == "Secret":
        body["type"] = source.get("type", "Opaque")
    return body


def marks(tool: str) -> str:
    """The annotation prefix of `tool`'s marks ("reflector" or "kubernetes-replicator")."""
    return RF if tool == "reflector" else RP
