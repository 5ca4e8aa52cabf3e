"""The CLI's parser in process, for unit tests of its flags and references."""

from __future__ import annotations

import argparse

from configmirror.cli import flags
from configmirror.cli import main as cli


def parsed(*argv: str) -> argparse.Namespace:
    """`configmirror ARGV` as the command sees it: parsed, then resolved from the environment."""
    return flags.resolve(cli.parser().parse_args(argv))
