"""The `configmirror` command: `run`, `plan`, `status`, `wait`, `migrate`, `cluster`,
`version` (also as `kubectl configmirror ...`: the `kubectl-configmirror` entry point is the
same program), each in its own module here; this one assembles their parsers and runs the one
asked for.

Flags follow the Go tools (`flags`): booleans as `--flag`, `--flag=true|false`, `--no-flag`;
durations as `90s`, `10m`, `1h30m`; every flag but those choosing what to show (`-n`,
`--target-namespace`) also an environment variable (`--max-retries` is
CONFIGMIRROR_MAX_RETRIES), the command line winning. A source is named as
in the pull annotation, `[KIND/]NS/NAME`, or as kubectl names it, `-n NS
[KIND/]NAME` (`reference`), checked before any connection. As in kubectl, the flags every
read command takes (-n, -o, --kubeconfig, --context) may come before the command too. Mistakes
a user can make (bad flags, no kubeconfig, unreachable cluster) end in one line on stderr and
exit code 1, never a traceback; every command exits 0 on success, 1 on an error, 2 when what
it found needs attention (`arguments`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from configmirror import __version__
from configmirror.cli import cluster, migrate, plan, reference, run, status, version, wait
from configmirror.cli.arguments import CONVENTIONS, EXIT_ERROR
from configmirror.cli.flags import Parser, UsageError, resolve
from configmirror.cli.output import prog
from configmirror.cli.settings import given
from configmirror.client.kube import ConfigError

# The commands but `version`, which runs before logging is set up.
_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run.command, "plan": plan.command, "status": status.command,
    "wait": wait.command, "migrate": migrate.command, "cluster": cluster.command}
_NAMES = frozenset(_COMMANDS) | {"version"}
# A command of two words (`cluster list`): the global flags go after the second.
_ACTIONS = {"cluster": cluster.ACTIONS}
# The flags kubectl users put before the command (`kubectl configmirror -n NS status`), each
# taking a value; the command's own parser reads them wherever they were written.
_GLOBAL = ("-n", "--namespace", "-o", "--output", "--kubeconfig", "--context")
_GLOBAL_LONG = tuple(flag for flag in _GLOBAL if flag.startswith("--"))
_ABOUT = """Keeps ConfigMaps, named Secrets and the kinds an admin turns on replicated across
namespaces, as their annotations say. `COMMAND --help` shows a command's flags and exit
codes; every command exits 0 on success, 1 on an error, 2 when what it found needs
attention (plan: changes to make; wait: timed out; migrate: some need a human).
"""
_GLOBALS_HELP = """\
-n, -o, --kubeconfig and --context may also come before the command, as with kubectl:
`kubectl configmirror -n platform status`.
"""


def parser() -> argparse.ArgumentParser:
    """The parser of the whole command line: every command with its flags."""
    top = Parser(prog=prog(), description=_ABOUT, epilog=_GLOBALS_HELP + "\n" + CONVENTIONS,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"configmirror {__version__}")
    commands = top.add_subparsers(dest="command",
                                  metavar="{run,plan,status,wait,migrate,cluster,version}")
    commands.required = True
    for add in (run.add_parser, plan.add_parser, status.add_parser, wait.add_parser,
                migrate.add_parser, cluster.add_parser, version.add_parser):
        add(commands)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command `argv` (default: the process's arguments) names; its exit code."""
    try:
        args = parser().parse_args(command_first(sys.argv[1:] if argv is None else argv))
        policy_given = given(args)
        resolve(args)  # the environment variables of this command only
        if getattr(args, "source", None) is not None:  # its form, before any connection
            reference.parse(args.source, args.namespace)
        if args.command == "version":
            return version.command(args)
        _setup_logging(args.log_format, args.log_level, timestamps=args.command == "run")
        args.given = policy_given
        return _COMMANDS[args.command](args)
    except (UsageError, ConfigError) as err:
        print(f"{prog()}: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def command_first(argv: Sequence[str]) -> list[str]:
    """`argv` with the global flags written before the command moved after it, where the
    command's parser reads them (`-n NS status` is `status -n NS`)."""
    words = list(argv)
    moved: list[str] = []
    at = 0
    while at < len(words):
        word = words[at]
        if word in _NAMES:
            end = at + 1
            if end < len(words) and words[end] in _ACTIONS.get(word, ()):
                end += 1
            return [*words[:end], *moved, *words[end:]]
        if word == "--":
            break
        if word in _GLOBAL and at + 1 < len(words):
            moved += words[at:at + 2]
            del words[at:at + 2]
        elif word.partition("=")[0] in _GLOBAL_LONG or (
                word[:2] in ("-n", "-o") and len(word) > 2):  # --output=json, -ojson
            moved.append(words.pop(at))
        else:
            at += 1
    return list(argv)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name,
            "msg": record.getMessage()}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


class _CommandFormatter(logging.Formatter):
    """A read command's log line as its other messages read: `configmirror: warning: ...`."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{prog()}: {record.levelname.lower()}: {record.getMessage()}"


def _setup_logging(fmt: str, level: str, timestamps: bool) -> None:
    """Logs on stderr: JSON, or text, with timestamps for the operator (`run`) only."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)-7s %(name)s: %(message)s") if timestamps
        else _CommandFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # we log our own view of failures
