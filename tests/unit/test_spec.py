"""Key globs (copy-labels, copy-annotations, the drop lists) and what a replica carries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from configmirror.operator.settings import DEFAULT_DROP
from configmirror.replication.model import (
    DEFAULT_RULES,
    MANAGED_BY,
    REPLICA_LABEL,
    REPLICA_OF,
    Source,
    compile_source,
)
from configmirror.replication.spec import (
    COPY_ANNOTATIONS,
    COPY_LABELS,
    REPLICATE_TO,
    InvalidSpec,
    ReplicaRules,
    parse_key_patterns,
)
from configmirror.vocabulary import CONFIGMAP


@pytest.mark.parametrize(("patterns", "key", "expected"), [
    ("team", "team", True),
    ("team", "teams", False),
    ("team,tier", "tier", True),
    ("example.com/*", "example.com/owner", True),
    ("example.com/*", "example.org/owner", False),
    ("*.example.com/*", "a.b.example.com/x", True),
    ("*,!internal.example.com/*", "internal.example.com/secret", False),
    ("*,!internal.example.com/*", "public.example.com/x", True),
    ("app.kubernetes.io/[a-m]*", "app.kubernetes.io/component", True),
    ("app.kubernetes.io/[a-m]*", "app.kubernetes.io/part-of", False),
    ("Team_Name", "Team_Name", True),
    ("*", "anything.example.com/At_All", True),
])
def test_key_globs_match_whole_keys_with_prefixes_and_slashes(patterns: str, key: str,
                                                               expected: bool) -> None:
    assert parse_key_patterns(patterns, COPY_LABELS).matches(key) is expected


@pytest.mark.parametrize("bad", ["", " , ", "!", "a b", "team=x", "[", "x/[]", "x/[z-a]",
                                 "é", "a,(b)"])
def test_invalid_key_globs_name_the_annotation_and_the_entry(bad: str) -> None:
    with pytest.raises(InvalidSpec, match=COPY_ANNOTATIONS):
        parse_key_patterns(bad, COPY_ANNOTATIONS)


@given(st.from_regex(r"([a-z0-9]([a-z0-9.-]{0,10}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,20}"
                     r"[A-Za-z0-9])?", fullmatch=True))
def test_a_key_matches_itself_and_star_matches_every_key(key: str) -> None:
    assert parse_key_patterns(key, COPY_LABELS).matches(key)
    assert parse_key_patterns("*", COPY_LABELS).matches(key)
    assert not parse_key_patterns(f"*,!{key}", COPY_LABELS).matches(key)


def test_an_empty_drop_flag_drops_nothing_and_a_bad_one_names_the_flag() -> None:
    rules = ReplicaRules.from_flags("", "")
    assert not rules.drop_labels.matches("app.kubernetes.io/instance")
    with pytest.raises(InvalidSpec, match="--drop-annotations"):
        ReplicaRules.from_flags("x", "a b")


GITOPS_LABELS = {
    "app.kubernetes.io/instance": "argo-app",          # Argo CD's default tracking label
    "app.kubernetes.io/managed-by": "Helm",
    "kustomize.toolkit.fluxcd.io/name": "infra",
    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    "helm.toolkit.fluxcd.io/name": "release",
    "argocd.argoproj.io/instance": "x",
}
GITOPS_ANNOTATIONS = {
    "argocd.argoproj.io/tracking-id": "app:/ConfigMap:ns/cfg",
    "meta.helm.sh/release-name": "r", "meta.helm.sh/release-namespace": "ns",
    "helm.sh/resource-policy": "keep",
    "kubectl.kubernetes.io/last-applied-configuration": "{}",
    "kustomize.toolkit.fluxcd.io/checksum": "abc",
}


def compiled(labels: dict[str, str], annotations: dict[str, str],
             rules: ReplicaRules | None = None) -> Source:
    source = compile_source("src/cfg", labels, {REPLICATE_TO: "*", **annotations},
                            {"data": {"k": "v"}},
                            rules or ReplicaRules.from_flags(DEFAULT_DROP, DEFAULT_DROP), CONFIGMAP)
    assert source.invalid is None, source.invalid
    return source


def test_by_default_replicas_carry_no_gitops_tracking_metadata_and_everything_else() -> None:
    source = compiled({**GITOPS_LABELS, "team": "a"}, {**GITOPS_ANNOTATIONS, "owner": "me"})
    assert source.labels == {"team": "a", REPLICA_LABEL: "true", MANAGED_BY: "configmirror"}
    assert set(source.annotations) == {"owner", REPLICA_OF, "configmirror.io/content-hash"}


def test_copy_labels_and_copy_annotations_choose_and_the_drop_list_still_applies() -> None:
    source = compiled({"team": "a", "tier": "web", "app.kubernetes.io/instance": "x", "z": "1"},
                      {COPY_LABELS: "team,tier,app.kubernetes.io/*",
                       COPY_ANNOTATIONS: "*,!internal.example.com/*",
                       "internal.example.com/note": "n", "public.example.com/note": "p"})
    assert set(source.labels) == {"team", "tier", REPLICA_LABEL, MANAGED_BY}
    assert set(source.annotations) == {"public.example.com/note", REPLICA_OF,
                                       "configmirror.io/content-hash"}


def test_changing_what_is_copied_changes_the_content_hash() -> None:
    everything = compiled({"team": "a", "tier": "web"}, {})
    fewer = compiled({"team": "a", "tier": "web"}, {COPY_LABELS: "team"})
    assert everything.content_hash != fewer.content_hash


def test_the_drop_flags_replace_the_defaults() -> None:
    source = compiled({"app.kubernetes.io/instance": "x", "secret-team": "s"},
                      {"meta.helm.sh/release-name": "r"},
                      ReplicaRules.from_flags("secret-*", ""))
    assert "app.kubernetes.io/instance" in source.labels and "secret-team" not in source.labels
    assert "meta.helm.sh/release-name" in source.annotations


def test_a_bad_copy_pattern_is_an_invalid_spec() -> None:
    source = compile_source("src/cfg", {}, {REPLICATE_TO: "*", COPY_LABELS: "team=x"},
                            {"data": {}}, DEFAULT_RULES, CONFIGMAP)
    assert source.invalid is not None and COPY_LABELS in source.invalid
    assert source.spec is None
