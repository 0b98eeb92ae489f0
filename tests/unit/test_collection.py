"""The test command collects every test folder: tests/dist is not skipped for its name.

pytest's default `norecursedirs` holds `dist`, so a plain `pytest` (what scripts/test and CI run) silently
left out all of tests/dist, the multi-rank tests, until pyproject.toml set its own list."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_test_folder_is_skipped_by_norecursedirs(pytestconfig):
    patterns = pytestconfig.getini("norecursedirs")
    assert pytestconfig.getini("testpaths") == ["tests"]
    folders = sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    assert {"unit", "e2e", "dist"} <= set(folders)
    skipped = [(f, pat) for f in folders for pat in patterns if fnmatch(f, pat)]
    assert skipped == [], f"test folders pytest would not collect: {skipped}"


def test_test_file_basenames_are_unique():
    """No __init__.py in the test folders (rootdir imports): two test files of one name cannot both load."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
