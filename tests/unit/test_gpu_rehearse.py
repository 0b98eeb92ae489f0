"""The GPU check's offline install, rehearsed here (scripts/gpu-check --rehearse, docs/gpu-check.md), and the
torch-version facts of suite/compat.py.

The slow test runs the rehearsal's install-and-import part: a fresh venv with only what the GPU image has
(links to this machine's torch and the image's other packages, no pydantic), the carried wheels installed with
--no-index --no-deps --target, PIP_NO_INDEX=1, then every suite module imported from the source tree.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from suite import compat

ROOT = Path(__file__).resolve().parents[2]


def test_pinned_torch_is_pyprojects_pin():
    pin = re.search(r'"torch==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert compat.PINNED_TORCH == pin


def test_torch_note_names_the_other_version_and_only_then():
    assert compat.torch_note(f"{compat.PINNED_TORCH}+cu130") == ""
    note = compat.torch_note("2.11.0+cu130")
    assert "2.11.0+cu130" in note and compat.PINNED_TORCH in note


def test_require_torch_refuses_an_unreviewed_release_by_name():
    assert compat.require_torch("2.11.0+cu130") == "2.11.0+cu130"
    assert compat.require_torch("2.15.0a0+git1234") == "2.15.0a0+git1234"
    with pytest.raises(RuntimeError, match=r"torch 2\.10\.1 is older than 2\.11"):
        compat.require_torch("2.10.1")


def _wheels_ready() -> bool:
    return all((ROOT / "wheels" / d / "PINS").exists() for d in ("gpu", "host"))


@pytest.mark.slow
@pytest.mark.long  # 30 s; it guards the GPU check, which runs only in a session lent a GPU (rehearsed there first)
def test_rehearsal_installs_offline_and_imports_everything(tmp_path):
    if not _wheels_ready():  # fetching needs the package index (a few seconds); offline, say so and skip
        proc = subprocess.run([str(ROOT / "scripts/gpu-wheels")], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0 or not _wheels_ready():
            pytest.skip(f"scripts/gpu-wheels could not fetch the wheels: {proc.stderr[-500:]}")
    out = tmp_path / "out"
    env = {**os.environ, "PIP_NO_INDEX": "1"}
    proc = subprocess.run([str(ROOT / "scripts/gpu-check"), "--rehearse", "--steps", "install,import",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "gpu-check --rehearse: passed" in proc.stdout
    versions = (out / "versions.txt").read_text()
    assert "import_failures: {}" in versions
    info = dict(line.split(": ", 1) for line in versions.splitlines() if ": " in line)
    assert "suite-gpu-check-" in info["pydantic_file"] and "/site/" in info["pydantic_file"]  # the carried wheel
    assert "/image/" in info["torch_file"]  # the stand-in's torch, through the fresh venv's .pth
    assert info["torch_note"] == ("" if compat.is_pinned(info["torch"]) else info["torch_note"])
    log = (out / "gpu-check.log").read_text()
    assert "no site packages" in log and "stand in for the GPU image" in log
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.log", "report.md", "versions.txt"]


def test_report_marks_results_from_another_torch():
    """A GPU result from the lent machine's torch 2.11 says so in every report's run table."""
    from suite.report.tables import run_table
    from suite.results.reader import load_run

    run = load_run(sorted((ROOT / "results" / "baselines" / "smoke").iterdir())[0])
    assert run_table([run])[1][0][4] == run.manifest.torch  # the pinned torch: as it is
    other = type(run)(run.path, run.manifest.model_copy(update={"torch": "2.11.0+cu130"}), run.results)
    assert run_table([other])[1][0][4] == f"2.11.0+cu130 (not the pinned {compat.PINNED_TORCH})"
