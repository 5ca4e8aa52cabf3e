"""How a command names a source: `[KIND/]NS/NAME` as in the pull annotation, or with -n NS
`[KIND/]NAME` as kubectl takes it; and how the commands print a kind so it can be pasted
back."""

from __future__ import annotations

import argparse
import re
import sys
from typing import overload

from configmirror.cli.flags import UsageError
from configmirror.cli.output import prog
from configmirror.operator.caches import ClusterInformers
from configmirror.operator.settings import Settings
from configmirror.vocabulary import CONFIGMAP, CUSTOM_SYNTAX, OPTIONAL, SECRET, SHORT_NAMES, Kind

DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# kubectl's names (case does not matter), each to the kind's name in --kinds.
_KINDS = {"configmap": "configmap", "configmaps": "configmap", "cm": "configmap",
          "secret": "secret", "secrets": "secret",
          **{name: kind.flag for kind in OPTIONAL.values()
             for name in (kind.flag, kind.plural, *SHORT_NAMES.get(kind.flag, ()))}}
HELP = ("[KIND/]NS/NAME as in the configmirror.io/pull annotation, or with -n NS, "
        "[KIND/]NAME as kubectl takes it; KIND is configmap (cm, configmaps; the "
        "default), secret (secrets), or a kind --kinds turns on (networkpolicy, "
        "netpol, ...; a custom resource as KIND.GROUP or PLURAL.GROUP, "
        "widget.example.com)")

# A source a command names: its kind (a custom resource's as the command names it, until
# discovery resolves it: `known`) and its key NS/NAME.
Named = tuple[Kind | str, str]


def source(args: argparse.Namespace, settings: Settings) -> Named | None:
    """The source the command names, or None when it names none."""
    return None if args.source is None else named_in(args, settings)


@overload
def known(named: Named, cache: ClusterInformers) -> tuple[Kind, str]: ...
@overload
def known(named: None, cache: ClusterInformers) -> None: ...


def known(named: Named | None, cache: ClusterInformers) -> tuple[Kind, str] | None:
    """A named source with its kind resolved among those the cache holds: a custom resource
    by KIND.GROUP or PLURAL.GROUP."""
    if named is None:
        return None
    word, key = named
    if isinstance(word, Kind):
        return word, key
    for kind in cache.kinds:
        if kind.custom and word in (kind.flag, f"{kind.plural}.{kind.resource.group}"):
            return kind, key
    custom = sorted(str(k.resource.api_version + "/" + k.name) for k in cache.kinds
                    if k.custom)
    raise UsageError(f"{word!r}: the operator's --kinds names no such custom resource (it "
                     f"names {', '.join(custom)})")


def named_in(args: argparse.Namespace, settings: Settings) -> Named:
    """The source the command's argument names (with -n, and the deprecated --kind)."""
    said, key = parse(args.source, args.namespace)
    if args.kind is not None:  # the deprecated --kind
        if said is not None and said != args.kind:
            raise UsageError(f"{args.source!r} is a {said}, --kind says {args.kind}")
        print(f"{prog()}: warning: --kind is deprecated: write {args.kind}/{key}",
              file=sys.stderr)
        said = args.kind
    return _kind_of(said or "configmap", settings), key


def parse(text: str, namespace: str | None) -> tuple[str | None, str]:
    """A source as `[KIND/]NS/NAME` (the pull annotation's form) or, with -n NS,
    `[KIND/]NAME` (kubectl's): its kind, as named in `_KINDS` (None: not said), and its
    key NS/NAME."""
    parts = text.split("/")
    kind: str | None = None
    if namespace is None and len(parts) in (2, 3):
        if len(parts) == 3:
            kind = parts.pop(0)
        space, name = parts
    elif namespace is not None and len(parts) in (1, 2, 3):
        if len(parts) > 1:
            kind = parts.pop(0)
        if len(parts) == 2 and parts[0] != namespace:
            raise UsageError(f"{text!r} is in namespace {parts[0]}, -n says {namespace}")
        space, name = namespace, parts[-1]
    else:
        raise UsageError(f"{text!r} is not [KIND/]NAMESPACE/NAME" if namespace is None
                         else f"{text!r} is not [KIND/]NAME (with -n {namespace})")
    custom = kind is not None and "." in kind and bool(DNS_NAME.fullmatch(kind.lower()))
    if kind is not None and kind.lower() not in _KINDS and not custom:
        raise UsageError(f"{text!r}: {kind!r} is not a kind (configmap, cm, configmaps, "
                         f"secret, secrets, {', '.join(OPTIONAL)}, or kubectl's names of "
                         f"those; a custom resource as KIND.GROUP or PLURAL.GROUP)")
    if not _DNS_LABEL.fullmatch(space):
        raise UsageError(f"{text!r}: {space!r} is not a namespace name")
    if not DNS_NAME.fullmatch(name) or len(name) > 253:
        raise UsageError(f"{text!r}: {name!r} is not an object name")
    word = None if kind is None else _KINDS.get(kind.lower(), kind.lower())
    return word, f"{space}/{name}"


def _kind_of(kind: str, settings: Settings) -> Kind | str:
    """The kind a command's reference names; a custom resource's name as said (`known`
    resolves it once discovery has)."""
    if kind == "secret":
        if not settings.secrets:
            raise UsageError("a secret source needs the operator's --secret-names and "
                             "--secret-source-namespaces (only those Secrets are ever read)")
        return SECRET
    if kind in OPTIONAL:
        if kind not in settings.kind_names:
            raise UsageError(f"a {kind} source needs the operator's --kinds to name {kind} "
                             f"(it is off, and never read, otherwise)")
        return OPTIONAL[kind]
    if kind != "configmap":
        if not any("/" in name for name in settings.kind_names):
            raise UsageError(f"a {kind} source needs the operator's --kinds to name {kind} "
                             f"(as {CUSTOM_SYNTAX}; it is off, and never read, otherwise)")
        return kind
    return CONFIGMAP


def kind_words(cache: ClusterInformers) -> dict[str, str]:
    """How the commands name each kind the cache holds, by its name: `networkpolicy`,
    `widget.example.com` (what `plan` and `status` print, so it can be pasted back)."""
    return {kind.name: kind.flag for kind in cache.kinds}
