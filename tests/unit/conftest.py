"""Fixtures the unit tests of the command line share (helpers live in configmirror_testing)."""

from __future__ import annotations

import os

import pytest

from configmirror.cli import main as cli


@pytest.fixture
def cli_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CONFIGMIRROR_* variable of the caller's leaks in, and main sets up no logging."""
    for name in [n for n in os.environ if n.startswith("CONFIGMIRROR_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(cli, "_setup_logging", lambda fmt, level, timestamps: None)
