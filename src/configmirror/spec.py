"""The spec language: where a source wants replicas, and the operator's own limits.

A source names target namespaces with globs (`configmirror.io/replicate-to`) and/or a label
selector (`configmirror.io/replicate-to-matching`); the targets are the union. The operator's
flags (`--source-namespaces`, `--exclude-namespaces`) bound both. Everything here is pure and
parses once: a value that does not parse raises InvalidSpec naming the annotation and fault.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from configmirror.selector import Selector, SelectorError, parse_selector

PREFIX = "configmirror.io/"
REPLICATE_TO = PREFIX + "replicate-to"
REPLICATE_TO_MATCHING = PREFIX + "replicate-to-matching"
IGNORE_LABEL = PREFIX + "ignore"


class InvalidSpec(ValueError):
    """A source's annotations do not parse; the message names the annotation and the fault."""


class NamespaceLike(Protocol):
    """What targeting needs to know about a namespace."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def terminating(self) -> bool: ...


@dataclass(frozen=True)
class NamePatterns:
    """Comma-separated globs matched against whole names; `!` entries exclude."""

    includes: tuple[re.Pattern[str], ...]
    excludes: tuple[re.Pattern[str], ...]

    def matches(self, name: str) -> bool:
        return (any(p.fullmatch(name) for p in self.includes)
                and not any(p.fullmatch(name) for p in self.excludes))


_GLOB = re.compile(r"(?:[a-z0-9*?-]|\[!?\]?(?:[a-z0-9-]|[a-z0-9]-[a-z0-9])*\])+")


def parse_patterns(text: str, what: str = REPLICATE_TO) -> NamePatterns:
    """Parse `ns-a, team-*, !team-legacy`; raises InvalidSpec naming the bad entry."""
    includes: list[re.Pattern[str]] = []
    excludes: list[re.Pattern[str]] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        exclude = entry.startswith("!")
        glob = entry[1:].strip() if exclude else entry
        if not glob or not _GLOB.fullmatch(glob) or not _brackets_valid(glob):
            raise InvalidSpec(f"{what}: invalid namespace pattern {entry!r} (use names, "
                              f"*, ?, [a-z] and a leading ! to exclude)")
        compiled = re.compile(fnmatch.translate(glob))
        (excludes if exclude else includes).append(compiled)
    if not includes and not excludes:
        raise InvalidSpec(f"{what}: no namespace patterns in {text!r}")
    return NamePatterns(tuple(includes), tuple(excludes))


def _brackets_valid(glob: str) -> bool:
    for body in re.findall(r"\[!?([^\]]*)\]", glob):
        if not body:
            return False
        for lo, hi in re.findall(r"(.)-(.)", body):
            if lo > hi:
                return False
    return True


@dataclass(frozen=True)
class Spec:
    """Where a source wants replicas: names/globs, a namespace selector, or both (union)."""

    patterns: NamePatterns | None
    selector: Selector | None

    def wants(self, namespace: NamespaceLike) -> bool:
        return bool((self.patterns is not None and self.patterns.matches(namespace.name))
                    or (self.selector is not None and self.selector.matches(namespace.labels)))


def parse_spec(replicate_to: str | None, replicate_to_matching: str | None) -> Spec:
    """The targets of a source from its two annotations (either may be absent)."""
    patterns = selector = None
    if replicate_to is not None:
        patterns = parse_patterns(replicate_to)
    if replicate_to_matching is not None:
        try:
            selector = parse_selector(replicate_to_matching)
        except SelectorError as err:
            raise InvalidSpec(f"{REPLICATE_TO_MATCHING}: {err}") from None
    return Spec(patterns, selector)


@dataclass(frozen=True)
class Scope:
    """The operator's own limits: which namespaces may hold sources and which never get copies."""

    source_namespaces: NamePatterns
    excluded_namespaces: NamePatterns

    @classmethod
    def from_flags(cls, source_namespaces: str, exclude_namespaces: str) -> Scope:
        """From --source-namespaces and --exclude-namespaces; raises InvalidSpec naming the flag."""
        return cls(parse_patterns(source_namespaces, "--source-namespaces"),
                   parse_patterns(exclude_namespaces, "--exclude-namespaces")
                   if exclude_namespaces.strip() else NamePatterns((), ()))

    def honours(self, source_namespace: str) -> bool:
        """Whether a source in this namespace is acted on at all."""
        return self.source_namespaces.matches(source_namespace)

    def may_target(self, source_namespace: str, namespace: NamespaceLike) -> bool:
        """Whether any source in `source_namespace` may place a replica in `namespace`."""
        return (namespace.name != source_namespace
                and namespace.labels.get(IGNORE_LABEL) != "true"
                and not self.excluded_namespaces.matches(namespace.name)
                and not namespace.terminating)
