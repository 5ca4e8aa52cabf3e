"""`configmirror migrate`'s conversion: the other tools' namespace expressions as globs, and
their annotations as ours.

The semantics are read from the tools' own source (github:emberstack/kubernetes-reflector at
d110601, github:mittwald/kubernetes-replicator at f535dd9):
- kubernetes-reflector, src/ES.Kubernetes.Reflector/Mirroring/Core/MirroringPropertiesExtensions.cs
  lines 156-163 (PatternListMatch): a comma list, blank entries skipped, each trimmed and
  matched with Regex.Match; kept when the first match is as long as the name. An empty list
  is every namespace (line 158, and MatchNamespace at lines 141-154, OR with the selector).
- kubernetes-replicator, replicate/common/common.go lines 31-40 (BuildStrictRegex): `^` and
  `$` added textually when missing; replicate/common/strings.go lines 65-77: split on `,`
  (an empty entry stays, as `^$`), each compiled and searched with MatchString.
"""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from configmirror.replication.migrate import (
    REFLECTOR,
    REPLICATOR,
    Found,
    Namespace,
    entry_glob,
    entry_matches,
    glob_meet,
    migrate,
    regex_to_glob,
)
from configmirror.replication.spec import (
    COPY_ANNOTATIONS,
    PULL,
    PULL_ALLOWED,
    PULL_ALLOWED_MATCHING,
    REPLICATE_TO,
    REPLICATE_TO_MATCHING,
    parse_patterns,
)

RF = "reflector.v1.k8s.emberstack.com/"
RP = "replicator.v1.mittwald.de/"


@pytest.mark.parametrize(("expression", "glob"), [
    ("team-a", "team-a"),
    ("team-.*", "team-*"),
    ("^team-.*$", "team-*"),
    (".*-prod", "*-prod"),
    (".+-prod", "?*-prod"),
    ("ns-.", "ns-?"),
    ("a\\-b", "a-b"),
])
def test_an_expression_a_glob_can_say_becomes_that_glob(expression: str, glob: str) -> None:
    assert regex_to_glob(expression) == glob


@pytest.mark.parametrize("expression", [
    "team-[0-9]+",    # a quantified class: one or more digits, which no glob says
    "dev|prod",       # alternation
    "(dev)",          # groups
    "team-\\d",       # classes by escape
    "teams?",         # optional
    "Team-.*",        # upper case: no namespace has it
    "a\\.b",          # a dot: no namespace has it
    "team-.*?",       # lazy: .NET's first match is `team-`, so only `team-` itself is whole
    "",
    "^$",
])
def test_an_expression_no_glob_can_say_is_refused(expression: str) -> None:
    assert regex_to_glob(expression) is None


def test_replicator_anchors_alternatives_apart_so_they_are_no_whole_name_match() -> None:
    """BuildStrictRegex makes `a|b` into `^a|b$`: names that start with a or end with b."""
    assert entry_matches(REPLICATOR, "a|b", "axx")
    assert entry_matches(REPLICATOR, "a|b", "xxb")
    assert entry_glob(REPLICATOR, "a|b") is None


def test_reflector_keeps_an_entry_only_when_its_first_match_is_the_whole_name() -> None:
    """Regex.Match is leftmost-first: for `dev|dev-app` the match in `dev-app` is `dev`."""
    assert not entry_matches(REFLECTOR, "dev|dev-app", "dev-app")
    assert entry_matches(REFLECTOR, "dev-app|dev", "dev-app")


NAME = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
TOKENS = st.sampled_from(["a", "b", "-", "0", ".", ".*", ".+", "\\-", "a", "b"])
# Beyond what converts: the converter must refuse these or still be exact.
WIDER = st.sampled_from(["a", "b", "-", ".", ".*", ".+", "|", "?", "[0-9]", "+", "(", ")",
                         "*", "\\d", "$", "^"])


def _same(tool: str, expression: str, names: list[str]) -> None:
    glob = entry_glob(tool, expression)
    if glob is None:
        return
    patterns = parse_patterns(glob)
    for name in names:
        assert patterns.matches(name) == entry_matches(tool, expression, name), (
            tool, expression, glob, name)


@given(st.lists(TOKENS, min_size=1, max_size=6).map("".join),
       st.booleans(), st.booleans(), st.lists(NAME, min_size=1, max_size=30))
def test_a_converted_glob_matches_exactly_the_names_the_expression_selects(
        body: str, start: bool, end: bool, names: list[str]) -> None:
    expression = ("^" if start else "") + body + ("$" if end else "")
    assert entry_glob(REFLECTOR, expression) is not None
    for tool in (REFLECTOR, REPLICATOR):
        _same(tool, expression, [*names, body.replace(".*", "x").replace(".+", "y")
                                 .replace(".", "z").replace("\\-", "-")])


@given(st.lists(WIDER, min_size=1, max_size=7).map("".join),
       st.lists(NAME, min_size=1, max_size=30))
def test_any_expression_is_refused_or_converted_exactly(expression: str,
                                                        names: list[str]) -> None:
    try:
        re.compile(expression)
    except re.error:
        return
    for tool in (REFLECTOR, REPLICATOR):
        _same(tool, expression, names)


NAMESPACES = [Namespace(n) for n in ("platform", "team-a", "team-b", "prod", "dev-1",
                                     "kube-system")]


def cm(namespace: str, name: str, **annotations: str) -> Found:
    return Found("ConfigMap", namespace, name, annotations)


def test_reflector_auto_reflection_with_a_glob_like_list_converts_exactly() -> None:
    """MirroringPropertiesExtensions.cs lines 116-118: auto needs the allowed list AND the
    auto list (an absent one is every namespace, line 147)."""
    result = migrate(REFLECTOR, [cm("platform", "ca", **{
        RF + "reflection-allowed": "True ", RF + "reflection-auto-enabled": "true",
        RF + "reflection-auto-namespaces": "team-.*, prod"})], NAMESPACES)
    [change] = result.changes
    assert change.annotations[REPLICATE_TO] == "team-*, prod"
    assert change.annotations[PULL_ALLOWED] == "*"
    assert change.annotations[COPY_ANNOTATIONS] == f"*, !{RF}*"
    assert result.exact


def test_reflector_intersection_of_literal_names_and_a_glob_is_the_names_it_keeps() -> None:
    result = migrate(REFLECTOR, [cm("platform", "ca", **{
        RF + "reflection-allowed": "true", RF + "reflection-allowed-namespaces": "team-a,prod",
        RF + "reflection-auto-enabled": "true", RF + "reflection-auto-namespaces": "team-.*"})],
        NAMESPACES)
    [change] = result.changes
    assert change.annotations[REPLICATE_TO] == "team-a"
    assert change.annotations[PULL_ALLOWED] == "team-a, prod"
    assert result.exact


def test_reflector_intersection_of_a_glob_and_a_wider_list_is_the_narrower_glob() -> None:
    result = migrate(REFLECTOR, [cm("platform", "ca", **{
        RF + "reflection-allowed": "true", RF + "reflection-allowed-namespaces": "team-.*,prod",
        RF + "reflection-auto-enabled": "true", RF + "reflection-auto-namespaces": "team-.*"})],
        NAMESPACES)
    [change] = result.changes
    assert change.annotations[REPLICATE_TO] == "team-*"
    assert result.exact


def test_reflector_intersection_of_overlapping_globs_is_todays_names_with_a_warning() -> None:
    result = migrate(REFLECTOR, [cm("platform", "ca", **{
        RF + "reflection-allowed": "true", RF + "reflection-allowed-namespaces": "team-.*",
        RF + "reflection-auto-enabled": "true", RF + "reflection-auto-namespaces": ".*-b"})],
        NAMESPACES)
    [change] = result.changes
    assert change.annotations[REPLICATE_TO] == "team-b"
    assert "created later" in change.warnings[0] and not result.exact


@given(st.sampled_from(["a*", "*b", "a?", "ab", "a*b", "*", "?*", "a-*", "?b", "b"]),
       st.sampled_from(["a*", "*b", "a?", "ab", "a*b", "*", "?*", "a-*", "?b", "b"]),
       st.lists(st.from_regex(r"[ab-]{1,5}", fullmatch=True), min_size=1, max_size=30))
def test_aglob_meet_matches_exactly_what_both_globs_match(a: str, b: str,
                                                           names: list[str]) -> None:
    both = glob_meet(a, b)
    if both is None:
        return
    left, right = parse_patterns(a), parse_patterns(b)
    met = parse_patterns(", ".join(both)) if both else None
    for name in names:
        assert (met is not None and met.matches(name)) == (
            left.matches(name) and right.matches(name)), (a, b, both, name)


def test_an_expression_no_glob_says_lists_todays_namespaces_and_warns() -> None:
    result = migrate(REFLECTOR, [cm("platform", "ca", **{
        RF + "reflection-allowed": "true", RF + "reflection-auto-enabled": "true",
        RF + "reflection-auto-namespaces": "team-[ab]|dev-\\d"})], NAMESPACES)
    [change] = result.changes
    assert change.annotations[REPLICATE_TO] == "dev-1, team-a, team-b"
    [warning] = change.warnings
    assert "team-[ab]|dev-\\d" in warning and "created later" in warning
    assert not result.exact


def test_a_target_in_an_excluded_namespace_needs_a_human() -> None:
    result = migrate(REFLECTOR, [cm("platform", "ca", **{
        RF + "reflection-allowed": "true", RF + "reflection-auto-enabled": "true"})],
        NAMESPACES)
    [change] = result.changes
    assert change.annotations[REPLICATE_TO] == "*"
    assert any("kube-system" in w for w in change.warnings)


def test_reflector_selectors_become_matching_annotations() -> None:
    result = migrate(REFLECTOR, [cm("platform", "ca", **{
        RF + "reflection-allowed": "true",
        RF + "reflection-allowed-namespaces-selector": "env=prod",
        RF + "reflection-auto-enabled": "true"})], NAMESPACES)
    [change] = result.changes
    assert change.annotations[REPLICATE_TO_MATCHING] == "env=prod"
    assert change.annotations[PULL_ALLOWED_MATCHING] == "env=prod"
    assert REPLICATE_TO not in change.annotations and result.exact


def test_reflector_without_reflection_allowed_mirrors_nothing_so_nothing_converts() -> None:
    result = migrate(REFLECTOR, [cm("platform", "ca", **{
        RF + "reflection-auto-enabled": "true"})], NAMESPACES)
    [change] = result.changes
    assert change.annotations == {} and "reflection-allowed is not true" in change.notes[0]
    assert result.exact and "(nothing to apply)" in result.yaml()


def test_a_manual_reflection_becomes_a_pull_and_auto_reflections_are_skipped() -> None:
    """ResourceMirror.cs lines 316-368: a mirror with `reflects` and no `auto-reflects`
    is filled from its source when the source allows its namespace."""
    result = migrate(REFLECTOR, [
        cm("platform", "ca", **{RF + "reflection-allowed": "true",
                                RF + "reflection-allowed-namespaces": "team-.*"}),
        cm("team-a", "ca", **{RF + "reflects": "platform/ca"}),
        cm("team-b", "ca", **{RF + "reflects": "platform/ca", RF + "auto-reflects": "True"}),
        Found("Secret", "team-b", "tls", {RF + "reflects": " platform/tls "}),
    ], NAMESPACES)
    by_title = {c.title: c for c in result.changes}
    assert by_title["configmap platform/ca"].annotations[PULL_ALLOWED] == "team-*"
    assert REPLICATE_TO not in by_title["configmap platform/ca"].annotations
    assert by_title["namespace team-a"].annotations == {PULL: "platform/ca"}
    assert by_title["namespace team-b"].annotations == {PULL: "secret/platform/tls"}
    assert result.exact


def test_replicator_push_pull_and_consent() -> None:
    """generic-replicator.go lines 100-145 (IsReplicationPermitted) and 288-330."""
    namespaces = [*NAMESPACES, Namespace("team-c", annotations={PULL: "other/x"})]
    result = migrate(REPLICATOR, [
        cm("platform", "ca", **{RP + "replicate-to": "team-.*,prod",
                                RP + "replicate-to-matching": "env in (prod,stage)"}),
        cm("platform", "shared", **{RP + "replication-allowed": "true",
                                    RP + "replication-allowed-namespaces": "team-c"}),
        cm("team-c", "shared", **{RP + "replicate-from": "platform/shared"}),
    ], namespaces)
    by_title = {c.title: c for c in result.changes}
    ca = by_title["configmap platform/ca"].annotations
    assert ca[REPLICATE_TO] == "team-*, prod"
    assert ca[REPLICATE_TO_MATCHING] == "env in (prod,stage)"
    assert by_title["configmap platform/shared"].annotations[PULL_ALLOWED] == "team-c"
    assert by_title["namespace team-c"].annotations == {PULL: "other/x, platform/shared"}
    assert result.exact


def test_replicator_consent_needs_the_namespace_list() -> None:
    result = migrate(REPLICATOR, [cm("platform", "shared", **{
        RP + "replication-allowed": "true"})], NAMESPACES)
    [change] = result.changes
    assert change.annotations == {} and "--allow-all" in change.notes[0]


def test_a_pull_under_another_name_needs_a_human() -> None:
    result = migrate(REPLICATOR, [cm("team-a", "mine", **{
        RP + "replicate-from": "platform/shared"})], NAMESPACES)
    [change] = result.changes
    assert change.annotations == {PULL: "platform/shared"}
    assert "mine" in change.warnings[0] and not result.exact


def test_secret_sources_are_named_for_secret_names() -> None:
    result = migrate(REPLICATOR, [
        Found("Secret", "platform", "tls", {RP + "replicate-to": "prod"}),
        Found("Secret", "infra", "registry", {RP + "replicate-to": "prod"})], NAMESPACES)
    assert result.secret_names == ["registry", "tls"]
    assert result.secret_namespaces == ["infra", "platform"]
    assert "--secret-names=registry,tls" in result.text()


def test_yaml_is_partial_objects_with_the_annotations() -> None:
    result = migrate(REPLICATOR, [
        cm("platform", "ca", **{RP + "replicate-to": "team-.*"}),
        cm("team-a", "ca", **{RP + "replicate-from": "platform/ca"})], NAMESPACES)
    docs = [d for d in yaml.safe_load_all(result.yaml()) if d]
    assert docs == [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "ca", "namespace": "platform", "annotations": {
                REPLICATE_TO: "team-*", COPY_ANNOTATIONS: f"*, !{RP}*"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": "team-a", "annotations": {PULL: "platform/ca"}}}]


def test_a_copy_annotations_that_does_not_parse_needs_a_human_and_stops_nothing_else() -> None:
    result = migrate(REPLICATOR, [
        cm("platform", "ca", **{RP + "replicate-to": "prod", COPY_ANNOTATIONS: "[z-a]"}),
        cm("platform", "ok", **{RP + "replicate-to": "prod"})], NAMESPACES)
    bad, good = result.changes
    assert COPY_ANNOTATIONS not in bad.annotations and bad.annotations[REPLICATE_TO] == "prod"
    assert COPY_ANNOTATIONS in bad.warnings[0]
    assert good.annotations[COPY_ANNOTATIONS] == f"*, !{RP}*" and not good.warnings


def test_an_existing_copy_annotations_is_extended_not_replaced() -> None:
    result = migrate(REPLICATOR, [cm("platform", "ca", **{
        RP + "replicate-to": "prod", COPY_ANNOTATIONS: "team/*"})], NAMESPACES)
    [change] = result.changes
    assert change.annotations[COPY_ANNOTATIONS] == f"team/*, !{RP}*" and result.exact


def test_replicator_empty_entries_match_nothing_and_an_empty_selector_everything() -> None:
    """strings.go lines 65-77 keep an empty entry (`^$`, no namespace); labels.Parse("") in
    generic-replicator.go line 315 is the selector of every namespace."""
    result = migrate(REPLICATOR, [
        cm("platform", "a", **{RP + "replicate-to": "prod,"}),
        cm("platform", "b", **{RP + "replicate-to-matching": ""})], NAMESPACES)
    a, b = result.changes
    assert a.annotations[REPLICATE_TO] == "prod" and not a.warnings
    assert b.annotations[REPLICATE_TO] == "*"
