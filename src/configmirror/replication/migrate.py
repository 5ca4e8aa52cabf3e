"""`configmirror migrate`: kubernetes-reflector's or kubernetes-replicator's annotations as
configmirror's (pure: objects and namespaces in, annotations and the faults out).

Both tools name namespaces with regular expressions; configmirror names them with globs
(spec.py). An expression becomes a glob only where the glob means exactly what the tool makes
of it: literal names, `.` (`?`), `.*` (`*`) and `.+` (`?*`), with the anchors the tool adds or
honours. kubernetes-reflector keeps an entry when its first match spans the whole name
(MirroringPropertiesExtensions.cs, PatternListMatch); kubernetes-replicator puts `^` and `$`
around an entry that lacks them (replicate/common/common.go, BuildStrictRegex). For that
subset both are a whole-name match. Any other expression becomes the names it matches today,
with a warning that a later namespace would not get the replica.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from configmirror.replication.adoption import RF, RF_AUTO_REFLECTS, RF_REFLECTS, RP, RP_FROM
from configmirror.replication.selector import SelectorError, parse_selector
from configmirror.replication.spec import (
    COPY_ANNOTATIONS,
    KUBERNETES_REPLICATOR,
    PULL,
    PULL_ALLOWED,
    PULL_ALLOWED_MATCHING,
    REFLECTOR,
    REPLICATE_TO,
    REPLICATE_TO_MATCHING,
    InvalidSpec,
    Patterns,
    parse_key_patterns,
    parse_patterns,
)

REPLICATOR = KUBERNETES_REPLICATOR
TOOLS = (REFLECTOR, REPLICATOR)

# kubernetes-reflector: src/ES.Kubernetes.Reflector/Mirroring/Core/Annotations.cs (the
# prefix and the mirrors' marks are adoption's)
RF_ALLOWED = RF + "reflection-allowed"
RF_ALLOWED_NAMESPACES = RF + "reflection-allowed-namespaces"
RF_ALLOWED_SELECTOR = RF + "reflection-allowed-namespaces-selector"
RF_AUTO = RF + "reflection-auto-enabled"
RF_AUTO_NAMESPACES = RF + "reflection-auto-namespaces"
RF_AUTO_SELECTOR = RF + "reflection-auto-namespaces-selector"
# kubernetes-replicator: replicate/common/consts.go
RP_TO = RP + "replicate-to"
RP_TO_MATCHING = RP + "replicate-to-matching"
RP_ALLOWED = RP + "replication-allowed"
RP_ALLOWED_NAMESPACES = RP + "replication-allowed-namespaces"
PREFIXES = {REFLECTOR: RF, REPLICATOR: RP}


@dataclass(frozen=True)
class Found:
    """An object as the other tool reads it: kind, where, and its annotations."""

    kind: str  # "ConfigMap" or "Secret"
    namespace: str
    name: str
    annotations: Mapping[str, str]

    @property
    def ref(self) -> str:
        prefix = "secret/" if self.kind == "Secret" else ""
        return f"{prefix}{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Change:
    """The configmirror annotations one object gets, and what a human must look at."""

    kind: str  # ConfigMap, Secret or Namespace
    namespace: str | None
    name: str
    annotations: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        if self.kind == "Namespace":
            return f"namespace {self.name}"
        return f"{self.kind.lower()} {self.namespace}/{self.name}"


@dataclass
class Migration:
    tool: str
    changes: list[Change]
    secret_names: list[str]
    secret_namespaces: list[str]

    @property
    def exact(self) -> bool:
        return not any(c.warnings for c in self.changes)

    def text(self) -> str:
        lines: list[str] = []
        for change in self.changes:
            lines.append(f"{change.title}:")
            lines += [f"  {k}: {v}" for k, v in change.annotations.items()]
            lines += [f"  warning: {w}" for w in change.warnings]
            lines += [f"  note: {n}" for n in change.notes]
        if self.secret_names:
            lines.append(self._secrets_line())
        needing = sum(1 for c in self.changes if c.warnings)
        lines.append(f"{len(self.changes)} object(s) from {self.tool}: "
                     + (f"{needing} need a human (the warnings above)" if needing
                        else "every one converts exactly"))
        return "\n".join(lines) + "\n"

    def yaml(self) -> str:
        """A multi-document YAML of partial objects (apiVersion, kind, name, namespace,
        annotations): `kubectl apply --server-side -f` or `kubectl apply -f` accept it."""
        docs: list[str] = []
        if self.secret_names:
            docs.append(f"# {self._secrets_line()}\n")
        for change in self.changes:
            head = [f"# {change.title}"] + [f"# warning: {w}" for w in change.warnings] + [
                f"# note: {n}" for n in change.notes]
            if not change.annotations:
                docs.append("\n".join([*head, "# (nothing to apply)"]) + "\n")
                continue
            body = [*head, "apiVersion: v1", f"kind: {change.kind}", "metadata:",
                    f"  name: {_quote(change.name)}"]
            if change.namespace is not None:
                body.append(f"  namespace: {_quote(change.namespace)}")
            body.append("  annotations:")
            body += [f"    {_quote(k)}: {_quote(v)}" for k, v in change.annotations.items()]
            docs.append("\n".join(body) + "\n")
        return "---\n".join(docs) if docs else "# nothing to migrate\n"

    def _secrets_line(self) -> str:
        return (f"Secrets: configmirror reads only the Secrets it is told of: run it with "
                f"--secret-names={','.join(self.secret_names)} --secret-source-namespaces="
                f"{','.join(self.secret_namespaces)}")


def _quote(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is YAML's)."""
    return json.dumps(text)


# -- expressions ---------------------------------------------------------------------------

_TOKEN = re.compile(r"\.\*|\.\+|\.|\\-|[a-z0-9-]")


def regex_to_glob(expression: str) -> str | None:
    """The glob that matches exactly the namespace names `expression` matches as a whole
    (anchors at either end allowed), or None when no glob does."""
    body = expression
    body = body.removeprefix("^")
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    if not body:
        return None
    out: list[str] = []
    at = 0
    while at < len(body):
        m = _TOKEN.match(body, at)
        if m is None:
            return None
        token = m.group()
        out.append({".*": "*", ".+": "?*", ".": "?", "\\-": "-"}.get(token, token))
        at = m.end()
    glob = "".join(out)
    return glob


def strict(tool: str, entry: str) -> str:
    """The expression as the tool matches it: kubernetes-replicator anchors both ends
    (BuildStrictRegex, textually); kubernetes-reflector wants the first match to be whole."""
    entry = entry.strip()
    if tool == REPLICATOR:
        entry = ("" if entry.startswith("^") else "^") + entry
        entry += "" if entry.endswith("$") else "$"
    return entry


def entry_glob(tool: str, entry: str) -> str | None:
    """The glob of one list entry, or None. For kubernetes-replicator the anchors it adds must
    hold the whole expression (`a|b` becomes `^a|b$`, which is no whole-name match)."""
    text = strict(tool, entry)
    if tool == REPLICATOR and not (text.startswith("^") and text.endswith("$")):
        return None
    return regex_to_glob(text)


def entry_matches(tool: str, entry: str, name: str) -> bool:
    """Whether the tool's entry selects namespace `name` (Python's `re`, close to .NET's and
    RE2's syntax for what namespace lists use); raises re.error when it does not compile."""
    text = strict(tool, entry)
    if tool == REPLICATOR:
        return re.search(text, name) is not None
    m = re.search(text, name)
    return m is not None and m.start() == 0 and m.end() == len(name)


def _entries(tool: str, text: str) -> list[str]:
    if tool == REFLECTOR:  # Split(",", RemoveEmptyEntries), blank ones skipped, trimmed
        return [e.strip() for e in text.split(",") if e.strip()]
    return text.split(",")  # strings.Split: an empty entry is `^$`, which matches nothing


@dataclass
class _Set:
    """A namespace set the tool selects: every namespace, or name expressions or a selector."""

    everything: bool = False
    entries: list[str] = field(default_factory=list)
    selector: str = ""
    annotation: str = ""  # where the entries come from, for warnings


class _Converter:
    def __init__(self, tool: str, namespaces: list[Namespace], excluded: Patterns) -> None:
        self.tool = tool
        self.namespaces = namespaces
        self.excluded = excluded

    def selects(self, s: _Set, ns: Namespace, change: Change) -> bool:
        if s.everything:
            return True
        for entry in _entries(self.tool, ",".join(s.entries)):
            try:
                if entry_matches(self.tool, entry, ns.name):
                    return True
            except re.error as err:
                _once(change, f"{s.annotation}: cannot evaluate {entry!r} ({err}); the "
                              f"namespaces it selects are not listed")
        if s.selector:
            try:
                return parse_selector(s.selector).matches(ns.labels)
            except SelectorError:
                return False
        return False

    def today(self, sets: list[_Set], home: str, change: Change) -> list[str]:
        return sorted(ns.name for ns in self.namespaces if ns.name != home
                      and all(self.selects(s, ns, change) for s in sets))

    def globs(self, s: _Set) -> list[str] | None:
        out = []
        for entry in _entries(self.tool, ",".join(s.entries)):
            if not entry.strip():
                continue  # kubernetes-replicator's `^$`: it matches no namespace
            glob = entry_glob(self.tool, entry)
            if glob is None:
                return None
            out.append(glob)
        return out

    def convert(self, sets: list[_Set], home: str, names: str, matching: str,
                change: Change) -> None:
        """Set annotation `names` (globs) and `matching` (a selector) on `change` so they
        select the intersection of `sets`; else the names selected today, with a warning."""
        narrowing = [s for s in sets if not s.everything]
        exact: tuple[list[str], str] | None = None
        if not narrowing:
            exact = (["*"], "")
        elif len(narrowing) == 1:
            s = narrowing[0]
            globs = self.globs(s)
            if globs is not None and (not s.selector or _selector_ok(s.selector)):
                exact = (globs, s.selector)
        else:
            exact = self._intersection(narrowing, home)
        if exact is not None:
            globs, selector = exact
            if globs:
                change.annotations[names] = ", ".join(globs)
            if selector:
                change.annotations[matching] = selector
            if not globs and not selector:
                change.notes.append("it selects no namespace")
            return
        listed = self.today(sets, home, change)
        said = [f"{s.annotation}={','.join(s.entries)}" for s in narrowing if s.entries]
        said += [f"the selector {s.selector!r}" for s in narrowing if s.selector]
        change.warnings.append(
            f"no glob means the same as {' and '.join(said)}: listed the {len(listed)} "
            f"namespace(s) it selects today; a namespace created later would not get the "
            f"replica" + ("" if listed else f", so {names} is left out"))
        if listed:
            change.annotations[names] = ", ".join(listed)

    def _intersection(self, narrowing: list[_Set], home: str) -> tuple[list[str], str] | None:
        """Lists that must all match, without selectors: the globs of each pair where one
        contains the other (a literal name is checked against the other glob); None when a
        pair overlaps otherwise, which no glob list says."""
        if any(s.selector for s in narrowing):
            return None
        lists = [self.globs(s) for s in narrowing]
        if any(g is None for g in lists):
            return None
        kept: list[str] = lists[0] or []
        for other in lists[1:]:
            pairs = []
            for a in kept:
                for b in other or []:
                    both = glob_meet(a, b)
                    if both is None:
                        return None
                    pairs += both
            kept = list(dict.fromkeys(pairs))
        return [g for g in kept if g != home], ""


def glob_meet(a: str, b: str) -> list[str] | None:
    """The names both globs match, as a glob list ([] for none), or None when unknown."""
    if _glob_within(a, b):
        return [a]
    if _glob_within(b, a):
        return [b]
    if not set(a) & set("*?") or not set(b) & set("*?"):
        return []  # a literal name the other glob does not match
    return None


def _glob_within(g: str, h: str) -> bool:
    """Whether every name glob `g` matches also matches glob `h` (sound, not complete: `*` in
    `h` takes any part of `g`, `?` one character or `?` of it, a letter only that letter)."""
    pattern = "".join(".*" if c == "*" else "[^*]" if c == "?" else re.escape(c) for c in h)
    return re.fullmatch(pattern, g) is not None


def _selector_ok(text: str) -> bool:
    try:
        parse_selector(text)
    except SelectorError:
        return False
    return True


def _once(change: Change, warning: str) -> None:
    if warning not in change.warnings:
        change.warnings.append(warning)


def _true(tool: str, value: str | None) -> bool:
    """The tool's boolean: .NET's Boolean.Parse after Trim (ES.FX TryGetAnnotationValue), or
    Go's strconv.ParseBool."""
    if value is None:
        return False
    if tool == REFLECTOR:
        return value.strip().lower() == "true"
    return value in ("1", "t", "T", "TRUE", "true", "True")


def migrate(tool: str, objects: Iterable[Found], namespaces: Iterable[Namespace],
            exclude_namespaces: str = "kube-system,kube-public,kube-node-lease") -> Migration:
    """What configmirror annotations the sources, and the namespaces that pull, get."""
    if tool not in TOOLS:
        raise ValueError(f"--from: {tool!r} is not {' or '.join(TOOLS)}")
    spaces = sorted(namespaces, key=lambda n: n.name)
    by_name = {n.name: n for n in spaces}
    convert = _Converter(tool, spaces, parse_patterns(exclude_namespaces,
                                                      "--exclude-namespaces", empty_ok=True))
    found = sorted(objects, key=lambda o: (o.kind, o.namespace, o.name))
    sources: dict[tuple[str, str, str], Change] = {}
    pulls: dict[str, list[str]] = {}
    pull_faults: dict[str, list[str]] = {}
    prefix = PREFIXES[tool]
    for obj in found:
        a = obj.annotations
        change = Change(obj.kind, obj.namespace, obj.name)
        pushes, consents = (_reflector(obj, change) if tool == REFLECTOR
                            else _replicator(obj, change))
        if pushes is None and consents is None:
            pulled = _pull_of(tool, obj)
            if pulled is not None:
                entry, fault = pulled
                if fault:
                    pull_faults.setdefault(obj.namespace, []).append(fault)
                if entry:
                    pulls.setdefault(obj.namespace, []).append(entry)
            elif change.notes:  # a source the tool ignores: say why nothing converts
                sources[(obj.kind, obj.namespace, obj.name)] = change
            continue
        if pushes is not None:
            convert.convert(pushes, obj.namespace, REPLICATE_TO, REPLICATE_TO_MATCHING, change)
            excluded = [n for n in convert.today(pushes, obj.namespace, change)
                        if convert.excluded.matches(n)]
            if excluded:
                change.warnings.append(
                    f"{tool} copies it into {', '.join(excluded)} today; configmirror never "
                    f"does while --exclude-namespaces names them")
        if consents is not None:
            convert.convert(consents, obj.namespace, PULL_ALLOWED, PULL_ALLOWED_MATCHING,
                            change)
        if change.annotations:
            # Replicas copy the source's annotations: the old tool's would make each replica a
            # source of that tool while it still runs.
            copied = f"{a.get(COPY_ANNOTATIONS, '*')}, !{prefix}*"
            try:
                parse_key_patterns(copied, COPY_ANNOTATIONS)
                change.annotations[COPY_ANNOTATIONS] = copied
            except InvalidSpec as err:
                change.warnings.append(f"{err}: fix it, and add !{prefix}* to it")
        for key, value in change.annotations.items():
            if key in a and a[key] != value and key != COPY_ANNOTATIONS:  # that one extends
                change.warnings.append(f"it has {key}={a[key]!r} already; this replaces it")
        sources[(obj.kind, obj.namespace, obj.name)] = change
    changes = list(sources.values())
    for ns_name in sorted(set(pulls) | set(pull_faults)):
        ns = by_name.get(ns_name, Namespace(ns_name))
        change = Change("Namespace", None, ns_name)
        change.warnings += pull_faults.get(ns_name, [])
        entries = sorted(set(pulls.get(ns_name, [])))
        if entries:
            have = [e.strip() for e in ns.annotations.get(PULL, "").split(",") if e.strip()]
            change.annotations[PULL] = ", ".join(dict.fromkeys([*have, *entries]))
            change.notes.append(
                f"its {len(entries)} mirror(s) made by hand stay the namespace's own objects: "
                f"configmirror reports each as a TargetConflict until it is deleted "
                f"(docs/migration.md says when)")
        changes.append(change)
    secrets = sorted({c.name for c in changes if c.kind == "Secret" and c.annotations})
    secret_homes = sorted({c.namespace or "" for c in changes
                           if c.kind == "Secret" and c.annotations})
    for change in changes:
        if change.kind == "Secret" and change.annotations:
            change.notes.append("a Secret: configmirror needs its name in --secret-names")
    return Migration(tool, changes, secrets, secret_homes)


def _reflector(obj: Found, change: Change) -> tuple[list[_Set] | None, list[_Set] | None]:
    """(where it pushes, who may pull it) for kubernetes-reflector, None where it does not.

    MirroringPropertiesExtensions.cs: CanBeReflectedToNamespace is reflection-allowed and
    (allowed-namespaces or allowed-namespaces-selector, both empty: every namespace);
    CanBeAutoReflectedToNamespace is that and auto-enabled and the same of auto-namespaces."""
    a = obj.annotations
    if RF_REFLECTS in a:  # a mirror, never a source (MirroringProperties.IsReflection)
        return None, None
    if not _true(REFLECTOR, a.get(RF_ALLOWED)):
        if any(k in a for k in (RF_ALLOWED_NAMESPACES, RF_AUTO, RF_AUTO_NAMESPACES)):
            change.notes.append(f"{RF_ALLOWED} is not true: {REFLECTOR} mirrors it nowhere, "
                                f"so nothing is converted")
        return None, None
    allowed = _reflector_set(a, RF_ALLOWED_NAMESPACES, RF_ALLOWED_SELECTOR)
    pushes = None
    if _true(REFLECTOR, a.get(RF_AUTO)):
        pushes = [allowed, _reflector_set(a, RF_AUTO_NAMESPACES, RF_AUTO_SELECTOR)]
    return pushes, [allowed]


def _reflector_set(a: Mapping[str, str], names: str, selector: str) -> _Set:
    text = a.get(names, "").strip()
    sel = a.get(selector, "").strip()
    if not text and not sel:
        return _Set(everything=True)
    return _Set(entries=[text] if text else [], selector=sel, annotation=names)


def _replicator(obj: Found, change: Change) -> tuple[list[_Set] | None, list[_Set] | None]:
    """(where it pushes, who may pull it) for kubernetes-replicator.

    generic-replicator.go: replicate-from wins over everything (ResourceAdded); replicate-to
    entries are whole-name expressions, replicate-to-matching a label selector, the targets
    their union; replicate-from needs replication-allowed (strconv.ParseBool) and
    replication-allowed-namespaces (absent: nobody) on the source (IsReplicationPermitted)."""
    a = obj.annotations
    if RP_FROM in a:
        return None, None
    pushes = None
    if RP_TO in a or RP_TO_MATCHING in a:
        pushes = [_Set(entries=[a[RP_TO]] if RP_TO in a else [],
                       selector=a.get(RP_TO_MATCHING, "").strip(), annotation=RP_TO)]
        if RP_TO not in a:
            pushes[0].annotation = RP_TO_MATCHING
        if RP_TO_MATCHING in a and not a[RP_TO_MATCHING].strip():
            pushes = [_Set(everything=True)]  # labels.Parse("") selects every namespace
    consents = None
    if _true(REPLICATOR, a.get(RP_ALLOWED)):
        if RP_ALLOWED_NAMESPACES in a:
            consents = [_Set(entries=[a[RP_ALLOWED_NAMESPACES]],
                             annotation=RP_ALLOWED_NAMESPACES)]
        else:
            change.notes.append(f"{RP_ALLOWED_NAMESPACES} is absent: {REPLICATOR} lets no "
                                f"namespace pull it (unless it runs with --allow-all)")
    return pushes, consents


def _pull_of(tool: str, obj: Found) -> tuple[str, str] | None:
    """(the pull entry, a fault) of a mirror the namespace made by hand, or None."""
    a = obj.annotations
    if tool == REFLECTOR:
        if RF_REFLECTS not in a or _true(REFLECTOR, a.get(RF_AUTO_REFLECTS)):
            return None  # an auto-reflection is the source's push, not a pull
        text = a[RF_REFLECTS]
    else:
        if RP_FROM not in a:
            return None
        text = a[RP_FROM]
    parts = [p.strip() for p in text.split("/")]
    what = f"{obj.ref} ({RF_REFLECTS if tool == REFLECTOR else RP_FROM}={text!r})"
    if len(parts) != 2 or not all(parts):
        return "", f"{what}: not NAMESPACE/NAME, so nothing to pull"
    namespace, name = parts
    kind = "secret/" if obj.kind == "Secret" else ""
    fault = ""
    if name != obj.name:
        fault = (f"{what}: configmirror's replica is named {name}, as its source, not "
                 f"{obj.name}: point what reads {obj.name} at {name}")
    return f"{kind}{namespace}/{name}", fault

