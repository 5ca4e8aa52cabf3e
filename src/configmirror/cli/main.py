"""The `configmirror` command: `run`, `plan`, `status`, `wait`, `migrate`, `version` (also as
`kubectl configmirror ...`: the `kubectl-configmirror` entry point is the same program), each
in its own module here; this one assembles their parsers and runs the one asked for.

Flags follow the Go tools (`flags`): booleans as `--flag`, `--flag=true|false`, `--no-flag`;
durations as `90s`, `10m`, `1h30m`; every flag but those choosing what to show (`-n`,
`--target-namespace`) also an environment variable (`--max-retries` is
CONFIGMIRROR_MAX_RETRIES), the command line winning. A source is named as
in the pull annotation, `[KIND/]NS/NAME`, or as kubectl names it, `-n NS
[KIND/]NAME` (`reference`). Mistakes a user can make (bad flags, no kubeconfig, unreachable
cluster) end in one line on stderr and exit code 1 (`wait`: 3), never a traceback.
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
from configmirror.cli import migrate, plan, run, status, version, wait
from configmirror.cli.arguments import CONVENTIONS
from configmirror.cli.flags import Parser, UsageError, resolve
from configmirror.cli.output import prog
from configmirror.cli.settings import given
from configmirror.client.kube import ConfigError

# Each command's exit code for an error found once its flags are parsed, if not 1 (its
# parser's own errors carry it already).
_ERROR_EXIT = {"wait": wait.EXIT_WAIT_ERROR}
# The commands but `version`, which runs before logging is set up.
_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run.command, "plan": plan.command, "status": status.command,
    "wait": wait.command, "migrate": migrate.command}


def parser() -> argparse.ArgumentParser:
    """The parser of the whole command line: every command with its flags."""
    top = Parser(prog=prog(), description="Keeps ConfigMaps (and named Secrets) "
                 "replicated across namespaces. See README.md.", epilog=CONVENTIONS,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"configmirror {__version__}")
    commands = top.add_subparsers(dest="command",
                                  metavar="{run,plan,status,wait,migrate,version}")
    commands.required = True
    for add in (run.add_parser, plan.add_parser, status.add_parser, wait.add_parser,
                migrate.add_parser, version.add_parser):
        add(commands)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command `argv` (default: the process's arguments) names; its exit code."""
    command: str | None = None
    try:
        args = parser().parse_args(argv)
        command = args.command
        policy_given = given(args)
        resolve(args)  # the environment variables of this command only
        if args.command == "version":
            return version.command(args)
        _setup_logging(args.log_format, args.log_level)
        args.given = policy_given
        return _COMMANDS[args.command](args)
    except (UsageError, ConfigError) as err:
        print(f"{prog()}: {err}", file=sys.stderr)
        code = err.code if isinstance(err, UsageError) else None
        return code if code is not None else _ERROR_EXIT.get(command or "", 1)
    except KeyboardInterrupt:
        return 130


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name,
            "msg": record.getMessage()}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def _setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # we log our own view of failures
