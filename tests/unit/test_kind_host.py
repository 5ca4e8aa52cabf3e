"""What the kind harness prepares on the host before Podman starts a node (no container)."""

from __future__ import annotations

from pathlib import Path

import pytest

from configmirror_testing.kind import KindError, host_modules


def test_a_missing_modules_folder_is_created_empty(tmp_path: Path) -> None:
    modules = tmp_path / "lib" / "modules"
    host_modules(modules)
    assert modules.is_dir() and not any(modules.iterdir())


def test_an_existing_modules_folder_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "6.1.0").mkdir()
    host_modules(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["6.1.0"]


def test_a_modules_folder_that_cannot_be_made_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "lib").write_text("a file, not a folder")
    with pytest.raises(KindError, match=r"kind mounts .*/lib/modules into its nodes.*create it"):
        host_modules(tmp_path / "lib" / "modules")
