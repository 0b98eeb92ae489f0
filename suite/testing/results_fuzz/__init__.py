"""The results-reader fuzzer: mutated copies of real run folders and pack archives, fed to every reading command.

Every command that reads stored results - `results ls/show`, `report`, `compare`, `publish`, `export`,
`results pack/unpack` and `run --resume` - must answer a damaged or hostile run folder (or archive) the same
way: exit 0 (at most a one-line warning on stderr), or exit 2 / 3 with a short `error:` (no traceback), within
LIMIT_S seconds and LIMIT_MB megabytes.  Never exit 70 (a crash: suite/cli/crash.py), never a hang, never any
other exit code.  Two verdicts are also fine: `compare` exits 1 for a regression, and `run --resume` exits 1
when a cell it relaunched failed - here only because the fuzzer refuses every launch (see "No training").

One mutator, two sources of choices, as in scenario_fuzz.py: `mutate(choose, where)` builds one case under the
folder `where` from calls `choose(n) -> 0..n-1`.  tests/unit/test_results_fuzz.py passes hypothesis draws (so a
failure shrinks to a few edits), scripts/fuzz-results a seeded `random.Random` for thousands of cases; both run
the case's commands with a `Runner` and classify each answer with `classify`.

A case.  A real run folder (results/baselines/smoke/*, tests/fixtures/slow-night, tests/fixtures/ray-cost) is
copied to where/results/<scenario>/<run> and changed by 1-3 edits, or it is packed and the archive changed:
- JSON records (cells, manifest.json, resume-NN.json, PACK.json): a value replaced by a hostile one (nesting
  100,000 deep, 5,000-digit integers, +-1e308, NaN / Infinity, wrong types, huge strings, `../` paths), a key
  deleted or added, schema_version changed, the whole document replaced; measured fields are picked often;
- bytes: emptied, truncated, a byte flipped, non-UTF-8 inserted, re-encoded (UTF-16), a BOM, NULs;
- scenario.yaml: YAML bombs and recursive aliases, garbage, a 5 MB line, a python tag, hostile values;
- runlog.jsonl: garbage, huge and non-UTF-8 lines;
- a file (or cells/, work/) replaced by a symlink to /dev/zero (or /dev/null, /dev/urandom, /proc/self/environ),
  to a passwd file outside the run folder (a decoy: see SECRET), to a file of the run, itself or nowhere; a
  FIFO; a folder; a 200 MB sparse file; removed; junk files and folders beside the records (duplicate, foreign,
  many or oddly named cells, a nested run); cells/ a link out of the run; the run folder renamed oddly;
- archives: rebuilt with a member changed as above and SHA256SUMS recomputed (so the change reaches the
  reader), or stale; members added (symlink, hard link, device, FIFO, `..`, absolute, duplicate, a long or
  non-UTF-8 name, a lying size, 60 MB of zeros, a file below a link out); the gzip stream truncated, flipped,
  garbage, concatenated, with trailing garbage, or not gzip at all.
Besides the exit code and the output, each command is checked for a leak (an output holding the decoy's bytes),
a write through a link (the decoy changed) and an escape (a file named ESCAPE_MARK outside the case's folders).
Links out of the run point at decoys in the case's own folder, never at the system's files: `run --resume`
writes, and the fuzzer may run as root.  (The regression tests' "etc-passwd" edits link the real /etc/passwd,
for pack only, which never writes into the run folder.)
`EDITS` names every edit; `case_from(where, names)` builds a case from named edits (the regression tests).

Running commands fast.  A fresh `suite` costs a second of imports, so a `Runner` keeps one child process
(`python -m suite.testing.results_fuzz serve`) that imports suite once and runs each command in-process through
`suite.cli.main()` - the console entry point, so exit codes and crash handling are the real ones - with fd 1
and 2 redirected to files.  The child runs each command under an interval timer of LIMIT_S (the alarm raises
out of a blocking open() of a FIFO or a long computation), with RLIMIT_AS at AS_LIMIT (room for the imports;
a runaway allocation then fails instead of taking the machine), and measures its peak RSS growth (VmHWM,
reset through /proc/self/clear_refs).  The parent waits HARD_S at most for an answer; a child that does not
answer (a hang the alarm could not break) or dies is killed and replaced, and the command is a failure.
`run_subprocess` runs a command as a fresh process instead (spot checks: `--subprocess` in the script).

No training.  `run --resume` of an intact copy has nothing to do; of a damaged one it may relaunch cells.  The
child replaces the runner's launcher (`suite.runner.cell.launch`, and `suite.launch.launch`) with one that
refuses at once without starting a process, and its torch probe (`torch_info`, a subprocess importing torch)
with fixed facts, as tests/unit/stand_in_launcher.py does; SUITE_WORKER_MODULE names a module that does not
exist and every launcher module in suite.launch.LAUNCHERS is pointed at a missing one, should a launch slip
through anyway.  A resume's exit 1 counts as a verdict only when the refusing launcher was called.  Any child
process left behind by a command is killed (by pid) and is a failure ("stray").

The package, one idea a file, each importing only those above it:

    values.py     the bounds a command is held to (LIMIT_S, LIMIT_MB, AS_LIMIT, HARD_S), the sources (SOURCES), the
                  hostile values edits insert (HOSTILE_JSON, the fields picked often, bad bytes, YAML values)
    case.py       `Case`, the edit context `_Ctx` and its guard against writing through links, the passwd decoy
                  (SECRET) and the bounded readers every edit shares
    documents.py  one record's content edited: a JSON document (`_edit_json`) or raw bytes (`_byte_edit`)
    edits.py      the edits of a run folder: records, links, FIFOs, removals, junk, renames (FOLDER_EDITS)
    archives.py   the run packed, its members changed or added, the gzip stream damaged (ARCHIVE_EDITS)
    mutator.py    `mutate` (a case from `choose`), the named `EDITS` and `case_from` (the regression tests)
    commands.py   the reading commands of a case, in order (`commands`, COMMAND_NAMES)
    child.py      inside the child: `serve`, `disarm`, the alarm and the memory and stray checks, FAULTS
    runner.py     the parent side: `Runner`, `run_subprocess` and their `Reply`
    verdict.py    `classify` an answer, `check` a case (leaks, writes through links, escapes), `cleanup`, `warm`
    __main__.py   `python -m suite.testing.results_fuzz serve | cli ARGS...`: the child's two entries
"""

from suite.testing.results_fuzz.case import SECRET, Case
from suite.testing.results_fuzz.case import _cells  # noqa: F401  (the tests read a run's cells with it)
from suite.testing.results_fuzz.child import FAULTS, disarm
from suite.testing.results_fuzz.commands import COMMAND_NAMES, Command, commands
from suite.testing.results_fuzz.mutator import EDITS, case_from, mutate
from suite.testing.results_fuzz.runner import Reply, Runner, run_subprocess
from suite.testing.results_fuzz.values import (AS_LIMIT, ESCAPE_MARK, HARD_S, LIMIT_MB, LIMIT_S, MAX_WARNING_LINES,
                                               REPO, SOURCES, TRACEBACK)
from suite.testing.results_fuzz.verdict import FAILURES, Outcome, check, classify, cleanup, warm
from suite.testing.results_fuzz.verdict import _leaks  # noqa: F401  (the tests look for a leak with it)

__all__ = ["AS_LIMIT", "COMMAND_NAMES", "EDITS", "ESCAPE_MARK", "FAILURES", "FAULTS", "HARD_S", "LIMIT_MB", "LIMIT_S",
           "MAX_WARNING_LINES", "REPO", "SECRET", "SOURCES", "TRACEBACK", "Case", "Command", "Outcome", "Reply",
           "Runner", "case_from", "check", "classify", "cleanup", "commands", "disarm", "mutate", "run_subprocess",
           "warm"]
