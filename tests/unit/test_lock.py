"""The lock (lock/*.txt, made by scripts/lock): every package pinned and hashed, consistent with pyproject.toml,
installed with --require-hashes by scripts/setup and the Dockerfile, and named in every manifest (lock_digest)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.compare.comparison import compare
from suite.results.env import LOCK_FOLDER, build_manifest, lock_pins, lock_state
from suite.results.reader import load_runs

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "lock"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
ENTRY = re.compile(r"^(?P<pin>\S+==\S+)(?P<rest>(?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})*)", re.M)


def entries(path: Path) -> dict[str, str]:
    """name -> the whole entry (pin and hash lines) of one lock file."""
    return {Requirement(m["pin"]).name.lower(): m.group(0) for m in ENTRY.finditer(path.read_text())}


def test_every_locked_package_is_pinned_and_hashed():
    files = sorted(LOCK.glob("*.txt"))
    assert {f.stem for f in files} == {"all", "base", "dev", *PYPROJECT["optional-dependencies"]}
    for f in files:
        lines = [ln for ln in f.read_text().splitlines() if ln and not ln.lstrip().startswith(("#", "--hash"))]
        assert lines, f
        for ln in lines:  # a requirement line: name==version, then a continuation to its hashes
            assert re.fullmatch(r"[A-Za-z0-9._-]+==[^\s]+ \\", ln), f"{f.name}: {ln!r} is not an exact, hashed pin"
        assert all("--hash=sha256:" in e for e in entries(f).values()), f.name


def test_the_lock_satisfies_pyproject_and_every_file_agrees_with_all():
    full = lock_pins((LOCK / "all.txt").read_text())
    wanted = {"base": PYPROJECT["dependencies"], **{e: PYPROJECT["dependencies"] + reqs for e, reqs in
                                                    PYPROJECT["optional-dependencies"].items()}}
    for name, reqs in wanted.items():
        pins = lock_pins((LOCK / f"{name}.txt").read_text())
        for text in reqs:
            req = Requirement(text)
            key = re.sub(r"[-_.]+", "-", req.name).lower()
            assert key in pins, f"lock/{name}.txt lacks {req} (run scripts/lock)"
            assert req.specifier.contains(pins[key], prereleases=True), f"lock/{name}.txt: {key}=={pins[key]} ∉ {req}"
        assert {k: full[k] for k in pins} == pins, f"lock/{name}.txt pins other versions than lock/all.txt"
    assert full["torch"] == "2.14.1" and full["torchvision"] == "0.29.1"


def test_setup_and_image_install_from_the_lock_with_hashes():
    setup = (ROOT / "scripts/setup").read_text()
    assert re.search(r'pip install -q --require-hashes -r "\$LOCK"', setup) and "LOCK=lock/dev.txt" in setup
    assert "--no-deps" in setup and "pip install -q -e" not in setup  # suite itself brings nothing unlocked
    docker = (ROOT / "Dockerfile").read_text()
    installs = [ln for ln in docker.splitlines() if "pip install" in ln and not ln.lstrip().startswith("#")]
    assert len(installs) == 3, installs  # base lock, extras' locks, suite itself (--no-deps)
    assert all("--require-hashes" in ln for ln in installs[:2]) and "--no-deps" in installs[2]
    assert "!lock/*.txt" in (ROOT / ".dockerignore").read_text()


def pip_install(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """`pip install --require-hashes` of a requirements file, resolved and hash-checked, installing nothing."""
    req = tmp_path / "req.txt"
    req.write_text(text)
    return subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                           "--no-cache-dir", "--require-hashes", "-r", str(req)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_an_unhashed_unlisted_or_altered_package_fails_the_install(tmp_path):
    lock = entries(LOCK / "all.txt")
    psutil = lock["psutil"]  # no dependencies: its locked entry alone installs
    ok = pip_install(tmp_path, psutil + "\n")
    assert ok.returncode == 0 and "Would install psutil" in ok.stdout, ok.stderr[-2000:]
    unhashed = pip_install(tmp_path, psutil + "\n" + lock["pyyaml"].split(" \\")[0] + "\n")
    assert unhashed.returncode != 0 and "Hashes are required in --require-hashes mode" in unhashed.stderr
    altered = pip_install(tmp_path, re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, psutil) + "\n")
    assert altered.returncode != 0 and "DO NOT MATCH THE HASHES" in altered.stderr
    # rich needs markdown-it-py and pygments (and mdurl): listed without them, the install fails
    unlisted = pip_install(tmp_path, lock["rich"] + "\n")
    assert unlisted.returncode != 0 and "In --require-hashes mode, all requirements must have their versions " \
        "pinned" in unlisted.stderr
    assert "markdown-it-py" in unlisted.stderr or "pygments" in unlisted.stderr


def test_the_manifest_names_the_lock_and_what_differs_from_it(tmp_path):
    assert lock_state(str(tmp_path)) == (None, [], [])  # not installed from a lock
    folder = tmp_path / LOCK_FOLDER
    folder.mkdir()
    import pydantic
    (folder / "base.txt").write_text(f"pydantic=={pydantic.VERSION} \\\n    --hash=sha256:{'1' * 64}\n"
                                     "psutil==0.0.1 \\\n    --hash=sha256:" + "2" * 64 + "\n"
                                     "no-such-dist==1.0 \\\n    --hash=sha256:" + "3" * 64 + "\n")
    digest, files, mismatches = lock_state(str(tmp_path))
    assert len(digest or "") == 16 and files == ["base.txt"]
    assert [m.split(":")[0] for m in mismatches] == ["no-such-dist", "psutil"]
    assert "locked 0.0.1, installed " in mismatches[1] and "installed none" in mismatches[0]
    (folder / "extra.txt").write_text("")
    assert lock_state(str(tmp_path))[0] != digest  # another set of lock files, another digest


def test_the_test_environment_is_exactly_its_lock():
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("not running in scripts/setup's .venv")
    digest, files, mismatches = lock_state()
    assert files == ["dev.txt"] and mismatches == []
    assert (Path(sys.prefix) / LOCK_FOLDER / "dev.txt").read_text() == (LOCK / "dev.txt").read_text()
    assert build_manifest("0001", "s", 0, ["suite"], torch_facts={"devices": []}).lock_digest == digest
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout


def test_a_different_lock_is_an_environment_difference(cli, tmp_path):
    results = [make_result(c) for c in make_cells()]
    base = write_run(tmp_path / "a", make_manifest(lock_digest="a" * 16), results)
    cur = write_run(tmp_path / "b", make_manifest(run_no=2, lock_digest="b" * 16), results)
    res = compare(load_runs([base]), load_runs([cur]))
    assert [(d.field, d.baseline, d.current) for d in res.env] == [("lock", "a" * 16, "b" * 16)]
    refused = cli("compare", base, cur, "--strict")
    assert refused.exit_code == 2 and "differ in lock" in refused.stderr
    assert cli("compare", base, cur, "--strict", "--ignore-env", "lock").exit_code == 0
