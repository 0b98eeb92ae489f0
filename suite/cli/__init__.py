"""The `suite` command line: argument parsing and dispatch only; the work lives in the modules it calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from suite import __version__
from suite.cli.crash import CrashGroup, crash
from suite.cli.help import PlainFlags, SuiteTyper

# A crash (an exception no command handled) exits 70 with its traceback, never 1: suite/cli/crash.py.
# Flags read plainly in --help (`--force`, not `--force <bool>`): suite/cli/help.py.


class SuiteGroup(PlainFlags, CrashGroup):
    """The `suite` group: a crash exits 70 (crash.py); `--help` shows flags without a type (help.py)."""


app = SuiteTyper(cls=SuiteGroup, add_completion=False, no_args_is_help=True,
                 help="Reproducible benchmarks for distributed PyTorch training.")


TRUST_HELP = ("A module (and those below it) a scenario's `family: python` factory may come from, besides the "
              "scenario's project (adds to SUITE_TRUST; repeatable; docs/own-model.md).")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _environment(_version: bool = typer.Option(False, "--version", is_eager=True,
                                               callback=_print_version, expose_value=False,
                                               help="Print suite's version and exit.")) -> None:
    """Reproducible benchmarks for distributed PyTorch training."""
    from suite.cli.environment import problems

    found = problems()
    for problem in found:
        _error(problem)
    if found:
        raise typer.Exit(2)


def _trust(modules: list[str]) -> None:
    from suite.cli.environment import trust

    try:
        trust(modules)
    except ValueError as exc:
        _error(exc)
        raise typer.Exit(2)


def _error(exc: BaseException | str) -> None:
    from suite.console import print_error

    print_error(exc)


def _load(path: Path):
    """Load and expand a scenario, or print its problems and exit 2 (warnings are printed and do not fail)."""
    from rich.markup import escape  # problems quote the user's text: `[x]` in it is not rich markup

    from suite.scenario import expand
    from suite.console import err_console
    from suite.scenario import load_scenario, ScenarioError

    try:
        scenario, source = load_scenario(str(path))
        for warning in source.warnings:
            err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)
        return scenario, expand(scenario, source)
    except ScenarioError as exc:
        for problem in exc.problems:
            err_console.print(f"[red]error:[/red] {escape(problem)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)


@app.command()
def validate(files: List[Path] = typer.Argument(..., help="Scenario YAML files."),
             trust: List[str] = typer.Option([], "--trust", help=TRUST_HELP)) -> None:
    """Check scenario files; exit 0 when all are valid, 2 with file:line errors otherwise."""
    from suite.console import console

    _trust(trust)
    failed = False
    for f in files:
        try:
            _, cells = _load(f)
        except typer.Exit:
            failed = True
            continue
        console.print(f"{f}: ok ({len(cells)} cells)", highlight=False, markup=False, soft_wrap=True)
    if failed:
        raise typer.Exit(2)


@app.command()
def plan(file: Path = typer.Argument(..., help="Scenario YAML file."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON objects instead of a table."),
         trace: bool = typer.Option(True, "--trace/--no-trace", help="Trace each cell's per-rank peak on fake "
                                    "tensors (the real code; needs torch, no GPU) and answer `fits` from it; "
                                    "--no-trace: arithmetic only (the as-implemented model)."),
         only: Optional[List[str]] = typer.Option(None, "--only", help="Plan only these cells (ids or unique "
                                                  "id prefixes; comma-separated or repeated)."),
         cache: bool = typer.Option(True, "--cache/--no-cache", help="Read and keep traces in the disk cache "
                                    "($SUITE_CACHE_DIR, default ~/.cache/suite)."),
         max_mbs: bool = typer.Option(False, "--max-micro-batch", help="The largest micro-batch whose traced "
                                      "peak fits gpu_memory_gb (less --headroom)."),
         headroom: Optional[float] = typer.Option(None, "--headroom", help="Fraction of gpu_memory_gb "
                                                  "--max-micro-batch keeps free (default 0.1)."),
         trust: List[str] = typer.Option([], "--trust", help=TRUST_HELP)) -> None:
    """Predict per-rank memory (textbook, as implemented, traced), FLOPs per token and communication per cell."""
    from suite.cli.plan import PlanRequestError, run_plan

    _trust(trust)
    scenario, cells = _load(file)
    try:
        run_plan(scenario, cells, as_json=as_json, trace=trace, max_micro_batch=max_mbs, headroom=headroom,
                 only=only, disk_cache=cache)
    except PlanRequestError as exc:
        _error(exc)
        raise typer.Exit(2)


@app.command()
def schema() -> None:
    """Print the JSON Schema of scenario files (for editor completion)."""
    from suite.scenario import Scenario

    typer.echo(json.dumps(Scenario.model_json_schema(), indent=1))


@app.command()
def strategies(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the registered strategies: family, what they shard, what they communicate, twin (the registry)."""
    from suite.console import console, table
    from suite.cli import strategy_table as listing

    if as_json:
        typer.echo(json.dumps(listing.as_json(), indent=1))
        return
    body = listing.rows()
    console.print(table(f"{len(body)} strategies (suite/strategies/registry.py)", listing.COLUMNS, body))


@app.command()
def presets(as_json: bool = typer.Option(False, "--json", help="Machine-readable output (exact parameter "
                                         "counts, every field of each shape).")) -> None:
    """List the model presets a scenario's `model:` may name: family, parameters, layers, widths, vocabulary."""
    from suite.console import console, table
    from suite.cli import preset_table as listing

    if as_json:
        typer.echo(json.dumps(listing.as_json(), indent=1))
        return
    body = listing.rows()
    console.print(table(f"{len(body)} model presets (suite/models/presets.py; parameters as `suite plan` counts "
                        "them)", listing.COLUMNS, body))


@app.command()
def version() -> None:
    """Print suite's version."""
    typer.echo(__version__)


@app.command()
def comm(ops: Optional[str] = typer.Option(None, "--ops", help="Comma list of all_reduce, all_gather, "
                                           "reduce_scatter, broadcast, reduce, all_to_all (default: the first four)."),
         sizes: Optional[str] = typer.Option(None, "--sizes", help="Sizes S (NCCL-tests meaning): `1KiB..1GiB` "
                                             "(doubling) or `4MiB,64MiB` (default: 1KiB..1GiB cuda, 1KiB..64MiB "
                                             "cpu)."),
         gpus: Optional[int] = typer.Option(None, "--gpus", help="Ranks (default: every GPU; 2 on CPU)."),
         iters: int = typer.Option(20, "--iters", help="Timed iterations per op and size."),
         warmup: int = typer.Option(5, "--warmup", help="Untimed iterations before them."),
         results: Path = typer.Option(Path("results"), "--results", help="Results root; runs go to <root>/comm/."),
         device: str = typer.Option("auto", "--device", help="auto | cuda (NCCL) | cpu (gloo)."),
         timeout: float = typer.Option(1800, "--timeout", help="Seconds before the ranks are stopped.")) -> None:
    """Measure collective time, algbw and busbw (NCCL-tests conventions) and check the results."""
    import sys

    from suite.comm.launch import CommError
    from suite.comm.run import run_comm
    from suite.comm.sizes import CommArgError
    from suite.comm.table import comm_table
    from suite.console import console, err_console

    try:
        run_dir, run = run_comm(ops=ops, sizes=sizes, gpus=gpus, iters=iters, warmup=warmup, results=results,
                                device=device, timeout_s=timeout, command=["suite", *sys.argv[1:]])
    except CommArgError as exc:
        _error(exc)
        raise typer.Exit(2)
    except CommError as exc:
        _error(exc)
        raise typer.Exit(130 if exc.interrupted else 1)
    except OSError as exc:  # store.WriteError names the path and what to do (a full or read-only results folder)
        _error(exc)
        raise typer.Exit(3)  # suite.console.EXIT_ENVIRONMENT
    console.print(comm_table(run, f"collectives on {run.results[0].world_size} x {run.results[0].device_name} "
                                  f"({run.args.backend}); {run.args.iters} iters after {run.args.warmup} warm-up"))
    console.print(f"stored: {run_dir}", highlight=False, markup=False, soft_wrap=True)
    if not all(r.correct for r in run.results):
        err_console.print("[red]error:[/red] some results were numerically wrong (column 'correct')")
        raise typer.Exit(1)


@app.command(epilog="Exit codes: 0 every cell ok or infeasible; 1 a cell failed; 2 bad input (scenario file, "
             "option, damaged run folder), nothing run; 3 suite could not write its results (disk full, read-only, "
             "a file in the way); 70 a bug in suite (traceback on stderr); 128+N stopped by signal N.")
def run(target: Path = typer.Argument(..., help="Scenario YAML file (with --resume, a run folder also works)."),
        results: Path = typer.Option(Path("results"), "--results", help="Results root; runs go to <root>/<scenario>/."),
        only: List[str] = typer.Option([], "--only", help="Run only this cell id (or unique prefix); repeatable. "
                                       "References of a match gate are added."),
        resume: bool = typer.Option(False, "--resume", help="Continue the latest run folder of the scenario (or the "
                                    "run folder given instead of the file), skipping cells with a final result."),
        repeats: Optional[int] = typer.Option(None, "--repeats", min=1, help="Runs of each cell (default: the "
                                              "scenario's repeats); run in interleaved rounds."),
        shuffle: Optional[int] = typer.Option(None, "--shuffle", help="Seed: shuffle the cells within each "
                                              "round of repeats."),
        force: bool = typer.Option(False, "--force", help="Launch cells predicted infeasible too."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster for launcher: ray cells "
                                                  "(HOST:PORT; default $RAY_ADDRESS, else a private local cluster "
                                                  "suite starts and stops)."),
        schedule: Optional[str] = typer.Option(None, "--schedule", metavar="serial|pack|node",
                                               help="serial: one cell at a time (default; without a cluster, here); "
                                               "pack: every cell a Ray task as soon as a node has its CPUs/GPUs "
                                               "free, largest first; node: at most one cell per node (timing-"
                                               "grade).  On --ray-address, else a private cluster of --nodes "
                                               "loopback nodes.  Overrides the scenario's sweep:."),
        nodes: Optional[int] = typer.Option(None, "--nodes", min=1, max=64, help="Nodes of the private Ray "
                                            "cluster a sweep starts when no --ray-address is given."),
        cpus_per_node: Optional[float] = typer.Option(None, "--cpus-per-node", min=0.001, max=4096,
                                                      help="CPUs of each private sweep node (default: this "
                                                      "machine's cores / --nodes, at least what the largest cell "
                                                      "needs)."),
        image: List[str] = typer.Option([], "--image", help="Run each torchrun cell in a fresh container of this "
                                        "local image (Docker SDK); its digest goes into the manifest.  Twice (A/B): "
                                        "one run folder per image, launches alternated."),
        preflight: bool = typer.Option(False, "--preflight", help="First measure the all-reduce bus bandwidth on "
                                       "the run's world size and the machine's state (suite machine), and record "
                                       "them in the manifest (extra.preflight, extra.machine)."),
        require_quiet: Optional[str] = typer.Option(None, "--require-quiet", metavar="wait|warn|refuse",
                                                    help="Before each timed launch, look at the machine for 2 s; "
                                                    "while other processes keep it busy: wait (then refuse), warn, "
                                                    "or refuse (exit 3).  Overrides the scenario's quiet:."),
        quiet_wait: Optional[float] = typer.Option(None, "--quiet-wait", min=0, max=86400, metavar="SECONDS",
                                                   help="How long --require-quiet wait waits (default 300)."),
        trust: List[str] = typer.Option([], "--trust", help=TRUST_HELP)) -> None:
    """Run every cell of a scenario (torchrun or Ray) into a new, append-only run folder."""
    _trust(trust)
    import sys

    from suite.machine.policy import QuietPolicy

    if require_quiet is not None and require_quiet not in ("wait", "warn", "refuse"):
        _error(f"--require-quiet {require_quiet!r}: expected wait, warn or refuse")
        raise typer.Exit(2)
    if schedule is not None and schedule not in ("serial", "pack", "node"):
        _error(f"--schedule {schedule!r}: expected serial, pack or node")
        raise typer.Exit(2)
    if quiet_wait is not None and require_quiet is None:
        _error("--quiet-wait needs --require-quiet wait")
        raise typer.Exit(2)
    quiet = None if require_quiet is None else QuietPolicy(
        mode=require_quiet, **({} if quiet_wait is None else {"max_wait_s": quiet_wait}))

    from suite.comm.launch import CommError
    from suite.console import EXIT_ENVIRONMENT, EXIT_INPUT, console, err_console
    from suite.results import store
    from suite.runner.progress import print_outcomes
    from suite.runner.run import NotQuiet, RunError, RunOptions, run_ab, run_scenario
    from suite.scenario import ScenarioError

    file, resume_dir = (None, target) if resume and target.is_dir() else (target, None)
    opts = RunOptions(results=results, only=only, resume=resume, resume_dir=resume_dir, repeats=repeats,
                      shuffle=shuffle, force=force, image=image[0] if image else None, ray_address=ray_address,
                      preflight=preflight, quiet=quiet, command=["suite", *sys.argv[1:]], schedule=schedule,
                      nodes=nodes, cpus_per_node=cpus_per_node)
    try:
        outcomes = run_ab(file, opts, image, err_console) if len(image) > 1 else [run_scenario(file, opts,
                                                                                                 err_console)]
    except NotQuiet as exc:  # the machine, not the request: exit 3 like a disk that refuses
        _error(str(exc))
        raise typer.Exit(EXIT_ENVIRONMENT)
    except (ScenarioError, RunError) as exc:
        for problem in getattr(exc, "problems", None) or [str(exc)]:
            _error(problem)
        raise typer.Exit(EXIT_INPUT)
    except OSError as exc:  # store.WriteError names the path and what to do; any other is the OS refusing too
        hint = "" if isinstance(exc, store.WriteError) else "; the machine refused (disk, permissions): fix, rerun"
        _error(str(exc) + hint)
        raise typer.Exit(EXIT_ENVIRONMENT)
    except store.StoreError as exc:  # e.g. a record another suite run wrote first (two resumes of one folder)
        _error(exc)
        raise typer.Exit(EXIT_INPUT)
    except CommError as exc:  # --preflight's ranks failed, or Ctrl-C stopped them
        _error(f"--preflight: {exc}")
        raise typer.Exit(130 if exc.interrupted else 1)
    print_outcomes(outcomes, console, err_console)
    raise typer.Exit(max(o.exit_code for o in outcomes))


@app.command(epilog="Exit codes: 0 quiet; 1 busy (the reasons are printed).")
def machine(seconds: float = typer.Option(2.0, "--seconds", min=0.1, max=600, help="How long to sample."),
            as_json: bool = typer.Option(False, "--json", help="The state, the verdict and the thresholds as JSON."),
            competing_cpu: Optional[float] = typer.Option(None, "--competing-cpu", min=0, metavar="CPUS",
                                                          help="Busy above this many CPUs used by other processes "
                                                          "(default 0.5).")) -> None:
    """The node's state (load, what else uses the CPUs and GPUs, clocks, memory) and whether it is quiet
    enough to time on: what `suite run --require-quiet` checks before each launch."""
    from suite.cli.machine import machine as run_machine

    raise typer.Exit(run_machine(seconds, as_json, competing_cpu))


from suite.cli.results import results_app  # noqa: E402  (the `suite results ...` commands)

app.add_typer(results_app, name="results")


@app.command()
def report(results: List[Path] = typer.Argument(..., help="Run folders, scenario folders or results trees."),
           formats: List[str] = typer.Option(["md"], "--format", help="md | html | csv | json (repeatable)."),
           out: Optional[Path] = typer.Option(None, "--out", help="Folder for the files (needed for html)."),
           group_by: List[str] = typer.Option([], "--group-by", help="Axis to section the cell table by (repeatable).")
           ) -> None:
    """Render stored results as tables, pivots and plots (Markdown to stdout, or files in --out)."""
    from suite.cli.report import report as run_report

    raise typer.Exit(run_report(results, formats, out, group_by))


@app.command()
def compare(baseline: Path = typer.Argument(..., help="Baseline results (run folder, scenario folder or tree)."),
            current: Path = typer.Argument(..., help="Current results, matched to the baseline by cell id."),
            threshold: List[str] = typer.Option([], "--threshold", help="METRIC=VALUE, e.g. tokens_per_s=5% "
                                                "(tokens_per_s, step_time, peak_memory, final_loss, eval_loss, accuracy; "
                                                "repeatable)."),
            alpha: float = typer.Option(0.05, "--alpha", help="Timing: 1 - the confidence that a change is past its "
                                        "threshold (docs/compare.md)."),
            history: int = typer.Option(10, "--history", min=1, help="Timing: use at most the N latest stored "
                                        "baseline runs of a cell (5+ are a noise model of their own)."),
            strict: bool = typer.Option(False, "--strict", help="Exit 2 when the environments differ; judge "
                                        "timings even where the machines' recorded states differ (else "
                                        "machine-differs, never a regression)."),
            ignore_env: List[str] = typer.Option([], "--ignore-env", help="An environment field --strict accepts "
                                                 "differing, e.g. image_digest (repeatable)."),
            fmt: str = typer.Option("term", "--format", help="term | md | junit."),
            out: Optional[Path] = typer.Option(None, "--out", help="File for the md or junit output.")) -> None:
    """Compare two sets of results cell by cell: exit 0 no regression, 1 regression, 2 usage error, 70 a bug."""
    from suite.cli.report import compare as run_compare

    raise typer.Exit(run_compare(baseline, current, threshold, alpha, strict, fmt, out, ignore_env, history))


@app.command(epilog="Exit codes: 0 published; 2 bad input (no runs, a damaged run folder, site or archive); 3 the "
             "site could not be written.  Regressions do not fail publishing: `suite compare` is the gate.")
def publish(results: List[Path] = typer.Argument(..., help="Run folders, scenario folders, results trees or "
                                                 "`suite results pack` archives."),
            out: Path = typer.Option(..., "--out", help="Site folder: created, or an earlier site to add runs to."),
            history: int = typer.Option(10, "--history", help="Each run is judged against at most the N runs "
                                        "of its machine before it (5+ are a noise model)."),
            base_url: Optional[str] = typer.Option(None, "--base-url", help="Where the site will be served "
                                                   "(absolute links in summary.md, e.g. for a CI job summary).")) -> None:
    """Build or update a static results site: index, a page per scenario, cell (trends) and run (manifest)."""
    from suite.publish.command import run as run_publish

    raise typer.Exit(run_publish(results, out, history, base_url))


@app.command()
def export(results: List[Path] = typer.Argument(..., help="Run folders, scenario folders or results trees."),
           fmt: str = typer.Option("pytest-benchmark", "--format", help="pytest-benchmark."),
           out: Path = typer.Option(..., "--out", help="JSON file to write.")) -> None:
    """Write step-time statistics in another tool's format (pytest-benchmark JSON)."""
    from suite.cli.report import export as run_export

    raise typer.Exit(run_export(results, fmt, out))


def main() -> None:
    try:
        app()
    except Exception as exc:  # outside any command's invoke (the top level's own arguments): as CrashGroup does
        raise SystemExit(crash(exc).exit_code) from None


if __name__ == "__main__":
    main()
