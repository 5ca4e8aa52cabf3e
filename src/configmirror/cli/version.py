"""`version`: configmirror's version, and with -o json or yaml its Python's and client's."""

from __future__ import annotations

import argparse
import platform

import kubernetes

from configmirror import __version__
from configmirror.cli.arguments import add_command, add_flag
from configmirror.cli.flags import Parser
from configmirror.cli.output import FORMATS, dump


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """`version` and its -o."""
    version = add_command(commands, "version", "print the version", "printed",
                          errors="error: bad flags", conventions=False)
    add_flag(version, "--output", "text", "output format", choices=FORMATS, short="-o",
             env=False)


def command(args: argparse.Namespace) -> int:
    """Print the version."""
    if args.output == "text":
        print(f"configmirror {__version__}")
    else:
        print(dump({"version": __version__, "python": platform.python_version(),
                    "kubernetes_client": kubernetes.__version__}, args.output), end="")
    return 0
