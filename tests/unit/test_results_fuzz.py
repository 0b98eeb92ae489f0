"""Fuzzing the results reader: mutated copies of real run folders and pack archives, through every command that
reads results, give exit 0 (at most a one-line warning) or a short exit 2 / 3 error, within 10 s and 500 MB:
never exit 70, a traceback, a hang, another exit code, a leak of a file outside the run, or a training launch.

The mutator, the runner (one child process running the commands in-process) and the check are
suite/testing/results_fuzz/; scripts/fuzz-results uses them too, with a seeded `random.Random` for thousands of
cases.  Here hypothesis draws the choices, so a failure shrinks to a few edits; then explicit regression cases
for the hostile inputs met so far, one command each; then the fuzzer's own checks (it sees each kind of failure,
its clean baselines pass, its mutator reaches many edits, `run --resume` never launches anything).
"""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.testing import results_fuzz as rf


# ---------------------------------------------------------------- the runner, shared by the module

@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("results-fuzz")


@pytest.fixture(scope="module")
def runner(scratch):
    """One child for the module, its imports paid (and the first source's commands run) before any clock."""
    r = rf.Runner(scratch=scratch / "runner")
    (scratch / "runner").mkdir()
    r.start()
    try:
        warm = rf.warm(r, scratch / "warm", rf.SOURCES[:1])
        assert all(o.kind in ("ok", "verdict") for o in warm), _explain(warm)
        yield r
    finally:
        r.close()


def _explain(outcomes, case: rf.Case | None = None) -> str:
    lines = [case.describe()] if case is not None else []
    for o in outcomes:
        if o.failed or case is None:
            tail = "\n".join(x[:300] for x in o.stderr.strip().splitlines()[-5:])
            lines.append(f"{o.command} [{o.kind}] exit {o.code}, {o.seconds:.2f} s, {o.megabytes:.0f} MB: "
                         f"{o.detail}\n  $ suite {' '.join(map(str, o.args))[:300]}\n{tail}")
    return "\n".join(lines)


def _failed(outcomes):
    return [o for o in outcomes if o.failed]


# ---------------------------------------------------------------- the property

_COUNTER = [0]
# Shrinking reruns the commands of every candidate (about 0.3 s each); hypothesis would spend up to 5 minutes.
# After SHRINK_BUDGET_S since the first failure, a candidate that is not a failure already seen passes at once
# (so shrinking ends with the smallest failure found by then), while a seen one runs again (hypothesis's final
# replay of each failure is real, not flaky).
SHRINK_BUDGET_S = 45.0
_FIRST_FAILURE: list[float] = []
_FAILURES_SEEN: set[str] = set()


# The same examples on every machine (derandomize: CI meets what a developer met), and at most PROPERTY_BUDGET_S
# of them: examples drawn after that pass at once (the campaign, scripts/fuzz-results, runs thousands).
PROPERTY_BUDGET_S = 150.0
_STARTED: list[float] = []


@settings(max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_results_are_read_or_refused_cleanly_by_every_command(runner, scratch, data):
    _COUNTER[0] += 1
    _STARTED[:] = _STARTED or [time.monotonic()]
    if not _FIRST_FAILURE and time.monotonic() - _STARTED[0] > PROPERTY_BUDGET_S:
        return
    where = scratch / "cases" / str(_COUNTER[0])
    try:
        case = rf.mutate(lambda n: data.draw(st.integers(0, n - 1)) if n > 1 else 0, where)
        names = [c.name for c in rf.commands(case)]
        # a few of the case's commands (all of them for thousands of cases: scripts/fuzz-results)
        only = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        only += ["pack"] * ("unpack-packed" in only) + ["unpack"] * ("ls-unpacked" in only)
        key = f"{case.describe()} | {sorted(only)}"
        if _FIRST_FAILURE and time.monotonic() - _FIRST_FAILURE[0] > SHRINK_BUDGET_S and key not in _FAILURES_SEEN:
            return
        outcomes = rf.check(case, runner.run, only)
        if _failed(outcomes):
            _FIRST_FAILURE[:] = _FIRST_FAILURE or [time.monotonic()]
            _FAILURES_SEEN.add(key)
        assert not _failed(outcomes), _explain(outcomes, case)
    finally:
        rf.cleanup(where)


# ---------------------------------------------------------------- regression cases (the list)

REGRESSIONS = [
    ("fifo-manifest", ["ls"]), ("fifo-manifest", ["show"]), ("fifo-manifest", ["report"]),
    ("fifo-manifest", ["resume"]),
    ("devzero-manifest", ["ls"]), ("devzero-manifest", ["report"]), ("devzero-manifest", ["publish"]),
    ("devzero-manifest", ["resume"]),
    ("devzero-scenario", ["resume"]), ("devzero-scenario", ["report"]), ("devzero-scenario", ["publish"]),
    ("fifo-runlog", ["resume"]), ("fifo-runlog", ["pack"]),
    ("fifo-cell", ["resume"]), ("fifo-cell", ["report"]),
    ("sparse-cell", ["report"]), ("sparse-cell", ["resume"]),
    ("deep-cell", ["report"]), ("deep-cell", ["compare"]), ("deep-cell", ["publish"]), ("deep-cell", ["export"]),
    ("deep-cell", ["resume"]),
    ("deep-manifest", ["ls"]), ("deep-manifest", ["report"]), ("deep-manifest", ["publish"]),
    ("deep-manifest", ["resume"]),
    ("bigint-cell", ["report"]), ("bigint-cell", ["compare"]), ("bigint-cell", ["publish"]),
    ("bigint-cell", ["export"]), ("bigint-steptime", ["compare"]),
    ("1e308-steptime", ["compare"]), ("1e308-steptime", ["publish"]),
    ("1e308-median", ["compare"]), ("1e308-median", ["publish"]),
    ("nan-tokens", ["compare"]), ("nan-tokens", ["export"]), ("inf-tokens", ["compare"]), ("inf-tokens", ["export"]),
    ("nan-steptimes", ["compare"]), ("nan-steptimes", ["export"]),
    ("gpus-two", ["report"]),
    ("nonutf8-scenario", ["report"]), ("nonutf8-scenario", ["compare"]), ("nonutf8-scenario", ["export"]),
    ("passwd-cell", ["pack", "unpack-packed"]), ("passwd-scenario", ["pack", "unpack-packed"]),
    ("passwd-cell", ["publish"]), ("passwd-scenario", ["publish"]), ("passwd-scenario", ["report-files"]),
    ("etc-passwd-cell", ["pack", "unpack-packed"]), ("etc-passwd-scenario", ["pack", "unpack-packed"]),
    ("deep-pack-json", ["unpack"]), ("deep-pack-json", ["publish"]), ("deep-pack-json", ["report"]),
    ("bigint-pack-json", ["unpack"]), ("bigint-pack-json", ["publish"]), ("bigint-pack-json", ["report"]),
    # found by scripts/fuzz-results
    ("nan-manifest-extra", ["publish"]), ("nan-manifest-extra", ["report-files"]), ("nan-manifest-extra", ["export"]),
    ("huge-cpu-model", ["compare"]), ("huge-cpu-model", ["report"]), ("huge-cpu-model", ["publish"]),
    ("cell-links-to-another-cell", ["resume"]), ("cell-links-to-another-cell", ["report"]),
    ("nonutf8-cell-name", ["pack", "unpack-packed"]), ("nonutf8-cell-name", ["report"]),
    ("long-member-name", ["unpack"]), ("long-member-name", ["report"]),
    ("long-sums-line", ["unpack"]), ("long-sums-line", ["publish"]),
    ("only-nulls", ["resume"]), ("repeats-2**53", ["resume"]), ("-1e308-final-loss", ["publish"]),
]


@pytest.mark.parametrize("edit, only", REGRESSIONS, ids=[f"{e}-{'+'.join(o)}" for e, o in REGRESSIONS])
def test_hostile_input(runner, tmp_path, edit, only):
    case = rf.case_from(tmp_path / "case", [edit])
    outcomes = rf.check(case, runner.run, only)
    assert {o.command for o in outcomes} >= {only[0]}, _explain(outcomes)
    assert not _failed(outcomes), _explain(outcomes, case)


def test_swapped_compare_of_hostile_numbers(runner, tmp_path):
    """compare both ways: the damaged run as the baseline too."""
    for edit in ("1e308-steptime", "nan-tokens", "bigint-cell"):
        case = rf.case_from(tmp_path / edit, [edit])
        case.swap = True
        outcomes = rf.check(case, runner.run, ["compare"])
        assert not _failed(outcomes), _explain(outcomes, case)


def test_pack_never_takes_what_a_link_points_at(runner, tmp_path):
    """A cell or scenario.yaml linked to /etc/passwd: pack refuses, or packs without the file's bytes."""
    for edit in ("etc-passwd-cell", "etc-passwd-scenario"):
        case = rf.case_from(tmp_path / edit, [edit])
        (pack,) = rf.check(case, runner.run, ["pack"])
        assert pack.kind == "error" or (pack.kind == "ok" and not rf._leaks(case)), _explain([pack], case)


# ---------------------------------------------------------------- --out that cannot be written: exit 3

def _out_cases(case: rf.Case) -> dict[str, list[str]]:
    blocker = case.where / "out" / "blocker"
    blocker.write_text("a file in the way")
    run = str(case.run)
    return {
        "report-out-is-a-file": ["report", run, "--format", "html", "--out", str(blocker)],
        "report-out-below-a-file": ["report", run, "--format", "csv", "--out", str(blocker / "sub")],
        "report-out-read-only-fs": ["report", run, "--format", "json", "--out", "/proc/self/suite-fuzz-report"],
        "export-out-below-a-file": ["export", run, "--out", str(blocker / "x.json")],
        "export-out-is-a-folder": ["export", run, "--out", str(case.where / "out")],
        "export-out-read-only-fs": ["export", run, "--out", "/proc/self/suite-fuzz-export.json"],
        "publish-out-is-a-file": ["publish", run, "--out", str(blocker)],
        "compare-out-below-a-file": ["compare", str(case.clean), run, "--format", "md", "--out",
                                     str(blocker / "x.md")],
    }


OUT_CASES = ["report-out-is-a-file", "report-out-below-a-file", "report-out-read-only-fs", "export-out-below-a-file",
             "export-out-is-a-folder", "export-out-read-only-fs", "publish-out-is-a-file", "compare-out-below-a-file"]


@pytest.mark.parametrize("name", OUT_CASES)
def test_an_output_that_cannot_be_written_is_exit_3(runner, tmp_path, name):
    case = rf.case_from(tmp_path / "case", [])
    args = _out_cases(case)[name]
    reply = runner.run(args, case.where, tmp_path / "o", tmp_path / "e")
    lines = reply.stderr.strip().splitlines()
    errors = [x for x in lines if x.startswith("error:")]
    # compare prints its table to stderr when --out takes the report: the error is the one last line after it
    assert reply.code == 3 and rf.TRACEBACK not in reply.stderr and len(errors) == 1 and lines[-1] == errors[0] \
        and len(errors[0]) < 1000, f"{name}: exit {reply.code}\n{reply.stderr[-1500:]}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders (the /proc cases stand in)")
@pytest.mark.parametrize("command", ["report", "export"])
def test_an_output_in_a_read_only_folder_is_exit_3(runner, tmp_path, command):
    case = rf.case_from(tmp_path / "case", [])
    locked = case.where / "out" / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    target = locked / ("report" if command == "report" else "x.json")
    args = [command, str(case.run), *(["--format", "html"] if command == "report" else []), "--out", str(target)]
    try:
        reply = runner.run(args, case.where, tmp_path / "o", tmp_path / "e")
    finally:
        locked.chmod(0o755)
    assert reply.code == 3 and rf.classify(command, reply).kind == "error", reply.stderr[-1500:]


# ---------------------------------------------------------------- the fuzzer itself

@pytest.mark.parametrize("edit", ["scenario", "bytes"])
def test_an_edit_replaces_an_earlier_edits_fifo_instead_of_waiting_on_it(tmp_path, edit):
    """The CI hang of 2026-12-03: one edit made scenario.yaml a FIFO, a later edit of the same case opened it to
    write and waited for ever for a reader.  Edits replace what is not a plain file."""
    import stat
    import threading

    from suite.testing.results_fuzz.case import _Ctx
    from suite.testing.results_fuzz.edits import edit_scenario

    case = rf.case_from(tmp_path / "case", [])
    target = case.run / "scenario.yaml"
    target.unlink()
    os.mkfifo(target)
    ctx = _Ctx(case, lambda n: 0)
    edits = {"scenario": edit_scenario, "bytes": lambda c: c.safe(target).write_bytes(b"x") and "bytes"}
    done = threading.Thread(target=edits[edit], args=(ctx,), daemon=True)
    done.start()
    done.join(20)
    if done.is_alive():  # free the stuck writer so the test process can end, then fail
        os.close(os.open(target, os.O_RDONLY | os.O_NONBLOCK))
        pytest.fail("the edit waited on the FIFO an earlier edit left")
    assert stat.S_ISREG(os.lstat(target).st_mode)


def test_an_edit_of_a_file_an_earlier_edit_made_a_folder_leaves_it(tmp_path):
    """The 5,000-case rerun's one fuzzer bug (case 2159): scenario.yaml had become a folder."""
    from suite.testing.results_fuzz.case import _Ctx
    from suite.testing.results_fuzz.edits import edit_runlog, edit_scenario

    case = rf.case_from(tmp_path / "case", [])
    for name, edit in (("scenario.yaml", edit_scenario), ("runlog.jsonl", edit_runlog)):
        target = case.run / name
        target.unlink(missing_ok=True)
        target.mkdir()
        assert edit(_Ctx(case, lambda n: 0)) == f"{name}: a folder (an earlier edit), left"
        assert target.is_dir()

def test_every_untouched_source_passes_every_command(runner, tmp_path):
    """The baselines the mutator starts from are read fine by every command (else every case would "fail")."""
    outcomes = rf.warm(runner, tmp_path, rf.SOURCES)
    assert all(o.kind in ("ok", "verdict") for o in outcomes), _explain([o for o in outcomes if o.kind != "ok"])


EXPECTED = {"raise": "crash", "hang": "timeout", "fifo": "timeout", "alloc": "memory", "exit1": "exit",
            "noisy": "unclean", "spawn": "stray", "die": "runner"}


@pytest.mark.parametrize("fault", rf.FAULTS)
def test_the_fuzzer_sees_each_kind_of_failure(runner, tmp_path, fault):
    """A fuzzer that sees nothing proves nothing: `suite report` made to fail each way is classified so, and the
    runner carries on afterwards."""
    case = rf.case_from(tmp_path / "case", [])
    # A short limit where the fault is a hang; elsewhere room to finish on a busy machine (allocating 800 MB took
    # 1.6 s in a full run, which a 1.5 s limit called a timeout).
    limit = 1.5 if EXPECTED[fault] == "timeout" else 15.0
    reply = runner.run(["report", str(case.run)], case.where, tmp_path / "o", tmp_path / "e", fault=fault, limit=limit)
    assert rf.classify("report", reply).kind == EXPECTED[fault], reply
    after = runner.run(["report", str(case.run)], case.where, tmp_path / "o", tmp_path / "e")
    assert rf.classify("report", after).kind == "ok", after


def test_the_fuzzer_runs_a_command_as_a_fresh_process_too(tmp_path):
    case = rf.case_from(tmp_path / "case", ["nan-tokens"])
    outcomes = rf.check(case, rf.run_subprocess, ["ls", "report", "resume"])
    assert [o.command for o in outcomes] == ["ls", "report", "resume"]
    assert [o.kind for o in outcomes] == ["ok", "error", "error"], _explain(outcomes)


def test_resume_relaunches_refused_never_a_process(runner, tmp_path):
    """A cell result removed: `run --resume` relaunches that cell, and the fuzzer's launcher refuses it at once
    (no process, no training): exit 1, a verdict only because the refusing launcher was called."""
    case = rf.case_from(tmp_path / "case", [])
    rf._cells(case.run)[0].unlink()
    (resume,) = rf.check(case, runner.run, ["resume"])
    assert resume.kind == "verdict" and resume.code == 1 and "refused" in resume.detail, _explain([resume])
    assert resume.seconds < 5


def test_the_classification():
    reply = rf.Reply(0, 0.1, 1.0, "", "warning: the environments differ in: torch (a -> b)\n")
    assert rf.classify("compare", reply).kind == "ok"
    assert rf.classify("ls", rf.Reply(0, 0.1, 1.0, "", "warning: a\nwarning: b\n")).kind == "ok"  # one a run
    many = "".join(f"warning: {i}\n" for i in range(rf.MAX_WARNING_LINES + 1))
    assert rf.classify("compare", rf.Reply(0, 0.1, 1.0, "", many)).kind == "unclean"
    assert rf.classify("ls", rf.Reply(0, 0.1, 1.0, "", "warning: " + "x" * 5000)).kind == "unclean"
    assert rf.classify("report", rf.Reply(2, 0.1, 1.0, "", "error: x: damaged\n")).kind == "error"
    assert rf.classify("report", rf.Reply(2, 0.1, 1.0, "", "Usage: suite report\n")).kind == "unclean"
    assert rf.classify("report", rf.Reply(2, 0.1, 1.0, "", "error: " + "x" * 5000)).kind == "unclean"
    assert rf.classify("report", rf.Reply(3, 0.1, 1.0, "", "error: cannot write\n")).kind == "error"
    assert rf.classify("report", rf.Reply(1, 0.1, 1.0, "", "")).kind == "exit"
    assert rf.classify("compare", rf.Reply(1, 0.1, 1.0, "", "")).kind == "verdict"
    assert rf.classify("resume", rf.Reply(1, 0.1, 1.0, "", "")).kind == "exit"  # no refused launch: a real failure
    assert rf.classify("resume", rf.Reply(1, 0.1, 1.0, "", "", launches=2)).kind == "verdict"
    assert rf.classify("resume", rf.Reply(2, 0.1, 1.0, "", "error: exists\n", launches=1)).kind == "late"
    assert rf.classify("report", rf.Reply(2, 0.1, 1.0, "", "Traceback (most recent call last):\nerror: x\n")).kind \
        == "crash"
    assert rf.classify("report", rf.Reply(0, 11.0, 1.0, "", "")).kind == "timeout"
    assert rf.classify("report", rf.Reply(0, 0.1, 600.0, "", "")).kind == "memory"


def test_the_mutator_reaches_many_edits_of_both_kinds(tmp_path):
    kinds, edits = set(), set()
    for seed in range(150):
        case = rf.mutate(random.Random(f"t:{seed}").randrange, tmp_path / str(seed))
        kinds.add(case.kind)
        edits |= {re.sub(r"[\w./-]*-r\d+\.json|\d+", "N", e)[:30] for e in case.edits}
        rf.cleanup(tmp_path / str(seed))
    assert kinds == {"folder", "archive"}
    assert len(edits) > 80, sorted(edits)


def test_the_mutator_never_touches_anything_outside_its_case(tmp_path):
    """Links made by one edit are never written through by the next (the fuzzer runs as root in CI)."""
    before = {p: p.stat().st_mtime_ns for s in rf.SOURCES for p in s.rglob("*") if p.is_file()}
    for seed in range(120):
        where = tmp_path / str(seed)
        rf.mutate(random.Random(f"u:{seed}").randrange, where)
        rf.cleanup(where)
    after = {p: p.stat().st_mtime_ns for s in rf.SOURCES for p in s.rglob("*") if p.is_file()}
    assert before == after
