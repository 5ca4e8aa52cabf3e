"""Adoption: the mirrors kubernetes-reflector and kubernetes-replicator made, recognised by
their own marks, and the one merge patch that makes such a mirror configmirror's replica.

Each tool marks what it writes with annotations (read from its public source; file and line
at each name below). A mirror is recognised only by those marks: anything else of a
replica's name in a target namespace is foreign and stays untouched (plan.decide,
`TargetConflict`). kubernetes-reflector's mirrors name their source (`reflects`);
kubernetes-replicator's pushed copies do not, so plan.decide takes one only when no other
source of its name could have made it. Pure: annotations in, a Mirror or a patch out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from configmirror.replication.spec import KUBERNETES_REPLICATOR, REFLECTOR

# kubernetes-reflector (emberstack/kubernetes-reflector,
# src/ES.Kubernetes.Reflector/Mirroring/Core/Annotations.cs, lines 5 and 15-20). Its
# ResourceMirror.cs writes all four on every mirror it creates or patches (lines 547-553 and
# 565-572), and takes an object for a mirror when `reflects` parses as NS/NAME
# (MirroringPropertiesExtensions.cs, lines 67-70; MirroringProperties.cs, line 25).
RF = "reflector.v1.k8s.emberstack.com/"
RF_REFLECTS = RF + "reflects"
RF_AUTO_REFLECTS = RF + "auto-reflects"
RF_REFLECTED_VERSION = RF + "reflected-version"
RF_REFLECTED_AT = RF + "reflected-at"
# kubernetes-replicator (mittwald/kubernetes-replicator, replicate/common/consts.go, lines
# 5-8). replicate/configmap/configmaps.go writes the three marks on every copy it pushes
# (lines 240-242) or pulls (lines 140-142); a pulled one also carries the user's
# `replicate-from`. It deletes a copy as its own only when the copy's data keys are exactly
# `replicated-keys` (lines 306-311): otherwise the object holds keys of someone else's.
RP = "replicator.v1.mittwald.de/"
RP_FROM = RP + "replicate-from"
RP_REPLICATED_AT = RP + "replicated-at"
RP_FROM_VERSION = RP + "replicated-from-version"
RP_KEYS = RP + "replicated-keys"
RP_MARKS = (RP_REPLICATED_AT, RP_FROM_VERSION, RP_KEYS)
MARKS = {REFLECTOR: (RF_REFLECTS, RF_AUTO_REFLECTS, RF_REFLECTED_VERSION, RF_REFLECTED_AT),
         KUBERNETES_REPLICATOR: RP_MARKS}


@dataclass(frozen=True, slots=True)
class Mirror:
    """Another tool's mirror, as the cache keeps it (rare objects: their metadata is kept,
    so the patch that adopts one can take every mark off)."""

    tool: str                      # spec.REFLECTOR or spec.KUBERNETES_REPLICATOR
    names: str | None              # the source ("ns/name") its marks name; None: none
    payload: str                   # digest of its content (model.payload_digest)
    immutable: bool                # neither tool writes it: set by someone else, if at all
    labels: Mapping[str, str]
    annotations: Mapping[str, str]


def mirror_of(annotations: Mapping[str, str], keys: Iterable[str]) -> tuple[str, str | None] | None:
    """Which tool made an object, and which source its marks name, from its annotations and
    its data keys (`data` and `binaryData`); None: no tool's mirror, by their own rules."""
    reflects = annotations.get(RF_REFLECTS)
    if reflects is not None:
        namespace, _, name = reflects.strip().partition("/")
        if namespace and name and "/" not in name:
            return REFLECTOR, f"{namespace}/{name}"
        return None
    if all(mark in annotations for mark in RP_MARKS) and \
            ",".join(sorted(keys)) == annotations[RP_KEYS]:
        pulled = annotations.get(RP_FROM, "").strip()
        return KUBERNETES_REPLICATOR, pulled or None
    return None


def marked(annotations: Mapping[str, str]) -> bool:
    """Whether an object carries a mark of either tool (the cheap test before `mirror_of`)."""
    return RF_REFLECTS in annotations or RP_KEYS in annotations


def adoption_patch(mirror: Mirror, labels: Mapping[str, str], annotations: Mapping[str, str],
                   immutable: bool, resource_version: str) -> dict[str, Any]:
    """The merge patch that makes `mirror` (its data already the source's) hold exactly the
    replica's `labels` and `annotations`: ours in, the tool's (and anything else not ours)
    out, and `immutable` when the source is (neither tool copies it; it may only turn on),
    on the version decided from (a mirror changed meanwhile gets a 409)."""
    patch: dict[str, Any] = {"metadata": {
        "resourceVersion": resource_version,
        "labels": _difference(mirror.labels, labels),
        "annotations": _difference(mirror.annotations, annotations)}}
    if immutable and not mirror.immutable:
        patch["immutable"] = True
    return patch


def _difference(have: Mapping[str, str], want: Mapping[str, str]) -> dict[str, str | None]:
    changes: dict[str, str | None] = {k: v for k, v in want.items() if have.get(k) != v}
    changes.update((k, None) for k in have if k not in want)
    return changes
