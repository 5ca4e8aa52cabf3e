"""Flags as the Kubernetes tools written in Go take them, on argparse.

- A boolean is `--flag`, `--flag=true|false` or `--no-flag`. As in Go's pflag, a value apart
  from its flag (`--flag false`) is not the flag's: it would be an argument.
- A duration is written in Go's syntax (`90s`, `10m`, `1h30m`, `1.5s`, `300ms`); a bare
  number is seconds.
- A flag may also be set by its environment variable (`--max-retries`:
  CONFIGMIRROR_MAX_RETRIES); the command line wins. Variables are read after parsing, and
  only those of the command being run: a bad one breaks that command only, in an error
  naming the variable, the flag and the value.
- `--help` says each default once.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from configmirror.operator.settings import parse_duration
from configmirror.replication.spec import ADOPT_TOOLS, InvalidSpec, parse_adopt

ENV_PREFIX = "CONFIGMIRROR_"
_FLAGS = "_flags"  # where a parsed namespace keeps the flags of the command it parsed


class UsageError(Exception):
    """A mistake on the command line or in the environment: one line on stderr, and the
    commands' error exit code."""


class _Unset:
    """The value of a flag the command line did not give (its variable or default then)."""

    def __repr__(self) -> str:
        return "unset"


UNSET: Any = _Unset()

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def boolean(text: str) -> bool:
    """true/false, 1/0, yes/no (on/off too), in any case; else ValueError."""
    word = text.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError("not a boolean (true or false)")


def integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("not an integer") from None


def number(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError("not a number")
    return value


def duration(text: str) -> float:
    """Seconds (settings.parse_duration)."""
    return parse_duration(text)


def adopt_from(text: str) -> str:
    """A tool whose mirrors sources take over (spec.ADOPT_TOOLS), or "" for none."""
    try:
        return parse_adopt(text)
    except InvalidSpec:
        raise ValueError(f"not {' or '.join(ADOPT_TOOLS)} ('' for none)") from None


@dataclass(frozen=True)
class Choice:
    """One of `options` (case does not matter); `aliases` maps other words onto them."""

    options: tuple[str, ...]
    aliases: tuple[tuple[str, str], ...] = ()

    def __call__(self, text: str) -> str:
        word = text.strip().lower()
        word = dict(self.aliases).get(word, word)
        if word not in self.options:
            raise ValueError(f"not one of {', '.join(self.words)}")
        return word

    @property
    def words(self) -> tuple[str, ...]:
        return self.options + tuple(alias for alias, _ in self.aliases)


Parse = Callable[[str], Any]


@dataclass(frozen=True)
class Flag:
    """A flag of one command: where argparse puts it, how its text reads, its variable."""

    option: str        # --max-retries
    dest: str          # max_retries
    default: Any
    parse: Parse
    env: str | None    # CONFIGMIRROR_MAX_RETRIES; None: the command line only

    def value(self, given: Any) -> Any:
        if given is not UNSET:
            return given
        raw = os.environ.get(self.env) if self.env else None
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as err:
            raise UsageError(f"{self.env}={raw!r} (for {self.option}) is {err}") from None


def env_name(option: str) -> str:
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


class Parser(argparse.ArgumentParser):
    """argparse with the conventions above. Errors raise UsageError."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # as in Go: a new flag never breaks an old
        super().__init__(*args, **kwargs)
        self.flags: list[Flag] = []
        self.set_defaults(**{_FLAGS: self.flags})

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def flag(self, option: str, default: Any, help: str, parse: Parse = str, *,
             short: str | None = None, env: bool = True, metavar: str | None = None,
             repeat: bool = False, hidden: bool = False) -> None:
        """Add `option`, its default (already of its type), and the help that says both.
        `repeat`: a list flag that may be given more than once, its values joined with
        commas (a kustomize component per item appends its own). `hidden`: taken, but left
        out of --help (whose epilog then says where it is described)."""
        variable = env_name(option) if env else None
        shown = _shown(default, parse)
        text = help + (f" (default: {shown})" if shown else "") + (
            f" [env {variable}]" if variable else "")
        names = [short, option] if short else [option]
        dest = option.lstrip("-").replace("-", "_")
        if parse is boolean:
            self.add_argument(*names, f"--no-{option[2:]}", action=_Boolean, dest=dest,
                              default=UNSET,
                              help=argparse.SUPPRESS if hidden else text.replace("%", "%%"))
        else:
            if metavar is None and isinstance(parse, Choice):
                metavar = "{" + ",".join(parse.words) + "}"
            action: type[argparse.Action] | str = _Joined if repeat else "store"
            self.add_argument(*names, action=action, dest=dest, type=_argument(parse),
                              default=UNSET, metavar=metavar,
                              help=argparse.SUPPRESS if hidden else text.replace("%", "%%"))
        self.flags.append(Flag(option, dest, default, parse, variable))

    def parse_known_args(  # type: ignore[override]
            self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # Each command's parser sees its own arguments here (argparse hands a subcommand's
        # rest to its parser's parse_known_args), so it rewrites its own booleans only.
        words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._booleans(words), namespace)

    def _booleans(self, words: list[str]) -> list[str]:
        """`--flag=true` as `--flag`, `--flag=false` as `--no-flag`."""
        booleans = {f.option for f in self.flags if f.parse is boolean}
        out: list[str] = []
        for at, word in enumerate(words):
            if word == "--":
                return out + words[at:]
            option, equals, text = word.partition("=")
            if equals and option in booleans:
                try:
                    out.append(option if boolean(text) else f"--no-{option[2:]}")
                except ValueError as err:
                    self.error(f"argument {option}: {text!r} is {err}")
            elif equals and option.startswith("--no-") and f"--{option[5:]}" in booleans:
                self.error(f"argument {option}: takes no value (write --{option[5:]}={text})")
            else:
                out.append(word)
        return out


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Every flag of the parsed command that the command line left out, from its variable
    or its default. Raises UsageError naming a bad variable."""
    for flag in getattr(args, _FLAGS, ()):
        setattr(args, flag.dest, flag.value(getattr(args, flag.dest)))
    return args


class _Joined(argparse.Action):
    """A repeated flag's values, joined with commas."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        before = getattr(namespace, self.dest, UNSET)
        setattr(namespace, self.dest, values if before is UNSET else f"{before},{values}")


class _Boolean(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, default: Any = None,
                 help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, not (option_string or "").startswith("--no-"))


def _argument(parse: Parse) -> Parse:
    """`parse` as an argparse type: its error names the text (argparse adds the flag)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{text!r} is {err}") from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _shown(default: Any, parse: Parse) -> str:
    """A default as --help says it; empty for none."""
    if default is None or default == "":
        return ""
    if isinstance(default, bool):
        return str(default).lower()
    if parse is duration:
        return _go_duration(float(default))
    return str(default)


def _go_duration(seconds: float) -> str:
    """As Go's time.Duration prints itself (`5m0s`, `1h30m0s`, `25s`), as Go tools' --help
    shows their defaults."""
    hours, rest = divmod(seconds, 3600)
    minutes, rest = divmod(rest, 60)
    if hours:
        return f"{hours:.0f}h{minutes:.0f}m{rest:g}s"
    return f"{minutes:.0f}m{rest:g}s" if minutes else f"{rest:g}s"
