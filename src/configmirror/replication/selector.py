"""Kubernetes label selectors (the string form of `kubectl get -l`), parsed and matched.

Grammar, as apimachinery's labels.Parse accepts it (comma means AND):

    key                   the label exists
    !key                  the label does not exist
    key=value key==value  the label equals value (value may be empty)
    key!=value            the label is absent or differs
    key in (a,b)          the label is one of a, b
    key notin (a,b)       the label is absent or none of a, b
    key>1  key<1          the label is an integer greater / less than the number

Keys are qualified names (an optional DNS-subdomain prefix and `/`, then up to 63 characters),
values are label values (up to 63 characters). Errors name the offending token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY_NAME = re.compile(_NAME)
_PREFIX = re.compile(_DNS_SUBDOMAIN)
_VALUE = re.compile(f"({_NAME})?")
_SPECIAL = "=!(),<> \t\n"


class SelectorError(ValueError):
    """A selector that does not parse; the message names the offending token."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # exists, !exists, =, !=, in, notin, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "exists":
            return value is not None
        if self.operator == "!exists":
            return value is None
        if self.operator in ("=", "in"):
            return value is not None and value in self.values
        if self.operator in ("!=", "notin"):
            return value is None or value not in self.values
        if value is None:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.operator == "gt" else number < bound


@dataclass(frozen=True)
class Selector:
    """All requirements must hold (an empty selector matches everything)."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def _tokens(text: str) -> list[tuple[str, int]]:
    """Split into (token, position): identifiers, and = == != ! ( ) , < >."""
    tokens: list[tuple[str, int]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith(("==", "!="), i):
            tokens.append((text[i:i + 2], i))
            i += 2
        elif ch in "=!(),<>":
            tokens.append((ch, i))
            i += 1
        else:
            start = i
            while i < len(text) and text[i] not in _SPECIAL:
                i += 1
            tokens.append((text[start:i], start))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0

    def fail(self, message: str) -> SelectorError:
        if self.pos < len(self.tokens):
            token, at = self.tokens[self.pos]
            where = f"at '{token}' (position {at + 1})"
        else:
            where = "at the end"
        return SelectorError(f"invalid label selector {self.text!r}: {message} {where}")

    def peek(self) -> str | None:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise self.fail("unexpected end")
        self.pos += 1
        return token

    def parse(self) -> Selector:
        requirements = []
        while True:
            requirements.append(self.requirement())
            token = self.peek()
            if token is None:
                return Selector(tuple(requirements))
            if token != ",":
                raise self.fail("expected ',' between requirements")
            self.take()

    def requirement(self) -> Requirement:
        if self.peek() == "!":
            self.take()
            return Requirement(self.key(), "!exists")
        key = self.key()
        op = self.peek()
        if op is None or op == ",":
            return Requirement(key, "exists")
        self.take()
        if op in ("=", "=="):
            return Requirement(key, "=", (self.value(),))
        if op == "!=":
            return Requirement(key, "!=", (self.value(),))
        if op in ("in", "notin"):
            return Requirement(key, op, self.value_set())
        if op in (">", "<"):
            number = self.take()
            if not re.fullmatch(r"-?[0-9]+", number):
                self.pos -= 1
                raise self.fail(f"'{op}' needs an integer")
            return Requirement(key, "gt" if op == ">" else "lt", (number,))
        self.pos -= 1
        raise self.fail("expected one of = == != in notin > < or ','")

    def key(self) -> str:
        token = self.peek()
        if token is None or token in "=!(),<>" or token in ("==", "!="):
            raise self.fail("expected a label key")
        self.take()
        prefix, _, name = token.rpartition("/")
        valid = (_KEY_NAME.fullmatch(name) is not None and len(name) <= 63 and
                 (not token.count("/") or (_PREFIX.fullmatch(prefix) is not None
                                           and len(prefix) <= 253 and token.count("/") == 1)))
        if not valid:
            self.pos -= 1
            raise self.fail("invalid label key")
        return token

    def value(self) -> str:
        token = self.peek()
        if token is None or token in (",", ")"):
            return ""  # `key=` means the empty value
        if token in "=!(<>" or token in ("==", "!="):
            raise self.fail("expected a label value")
        self.take()
        if len(token) > 63 or _VALUE.fullmatch(token) is None:
            self.pos -= 1
            raise self.fail("invalid label value")
        return token

    def value_set(self) -> tuple[str, ...]:
        if self.peek() != "(":
            raise self.fail("expected '('")
        self.take()
        values = []
        while True:
            values.append(self.value())
            token = self.peek()
            if token == ")":
                self.take()
                break
            if token != ",":
                raise self.fail("expected ',' or ')' in the value set")
            self.take()
        if values == [""]:
            self.pos -= 1
            raise self.fail("the value set must not be empty")
        return tuple(values)


def parse_selector(text: str) -> Selector:
    """Parse a label selector; raises SelectorError naming the offending token."""
    if not text.strip():
        raise SelectorError("invalid label selector: it is empty")
    return _Parser(text).parse()
