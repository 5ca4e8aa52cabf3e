"""The reference pages under docs/reference/ are what hack/docs_reference.py makes of the code."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference",
                                                  REPO / "hack" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_reference_pages_are_what_the_generator_makes() -> None:
    stale = _generator().stale()
    assert not stale, (f"docs/reference/{', '.join(stale)} differ(s) from the code: "
                       "run `make docs-reference` and commit the result")


def test_every_event_reason_the_code_records_has_a_meaning() -> None:
    generator = _generator()
    found = generator.events_in_code()
    assert {"Replicated", "InvalidSpec", "TargetConflict", "PullNotAllowed"} <= set(found)
    assert set(found) <= set(generator.EVENT_MEANINGS)
    assert found["Replicated"] == "Normal" and found["TargetConflict"] == "Warning"
