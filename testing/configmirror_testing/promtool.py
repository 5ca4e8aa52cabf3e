"""promtool for the alert tests, built once from Go modules by hack/promtool/build.sh.

Found like helm (configmirror_testing.tools: CONFIGMIRROR_PROMTOOL_DIR, else the build
script's cache). Its folder also holds promql-selectors, which reads PromQL with Prometheus'
own parser and names the series each expression selects, so a test never guesses at PromQL
itself.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 120.0


class PromtoolError(RuntimeError):
    """A promtool (or promql-selectors) command failed; the message holds its own words."""


@dataclass(frozen=True)
class Matcher:
    """One label matcher of a selector: `name type "value"` (type: =, !=, =~, !~)."""

    name: str
    type: str
    value: str


@dataclass(frozen=True)
class Selector:
    """A series selector in an expression: a metric name and its label matchers."""

    name: str
    matchers: tuple[Matcher, ...]


class Promtool:
    """Runs promtool and promql-selectors from one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, *args: str, check: bool = True, cwd: Path | None = None
                 ) -> subprocess.CompletedProcess[str]:
        """`promtool args...`; raises PromtoolError on a non-zero exit when `check`."""
        return self._run([str(self.folder / "promtool"), *args], check=check, cwd=cwd)

    def version(self) -> str:
        return self("--version").stdout.splitlines()[0]

    def selectors(self, exprs: list[str]) -> list[tuple[Selector, ...]]:
        """The series selectors of each expression, in order; PromtoolError naming the
        expression if one does not parse."""
        done = self._run([str(self.folder / "promql-selectors")], input=json.dumps(exprs))
        return [tuple(Selector(s["name"], tuple(Matcher(**m) for m in s["matchers"]))
                      for s in parsed["selectors"])
                for parsed in json.loads(done.stdout)]

    @staticmethod
    def _run(cmd: list[str], check: bool = True, cwd: Path | None = None,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(cmd, capture_output=True, text=True, input=input, cwd=cwd,
                              timeout=TIMEOUT, check=False)
        if check and done.returncode != 0:
            raise PromtoolError(f"{' '.join(cmd)} failed ({done.returncode}): "
                                f"{(done.stderr or done.stdout).strip()}")
        return done
