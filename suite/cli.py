"""The `suite` command line: argument parsing and dispatch only; the work lives in the modules it calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from suite import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Reproducible benchmarks for distributed PyTorch training.")


def _load(path: Path):
    """Load and expand a scenario, or print its problems and exit 2."""
    from rich.markup import escape  # problems quote the user's text: `[x]` in it is not rich markup

    from suite.cells import load_cells
    from suite.console import err_console
    from suite.scenario import ScenarioError

    try:
        return load_cells(str(path))
    except ScenarioError as exc:
        for problem in exc.problems:
            err_console.print(f"[red]error:[/red] {escape(problem)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)


@app.command()
def validate(files: List[Path] = typer.Argument(..., help="Scenario YAML files.")) -> None:
    """Check scenario files; exit 0 when all are valid, 2 with file:line errors otherwise."""
    from suite.console import console

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
         as_json: bool = typer.Option(False, "--json", help="Print JSON objects instead of a table.")) -> None:
    """Predict per-rank memory, FLOPs per token and communication for every cell."""
    from suite.console import console, nbytes, si, table
    from suite.plan.rows import plan_rows

    scenario, cells = _load(file)
    rows = plan_rows(cells)
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    cols = ["cell", "model", "seq", "strategy", "ckpt", "precision", "gpus", "mbs", "gbs", "params",
            "params mem", "grads", "optim", "master", "activations (textbook)", "total", "fits",
            "FLOPs/token", "comm/step"]
    body = []
    for r in rows:
        s, m = r["settings"], r["memory_bytes"]
        body.append([r["cell"], s["model"], s["seq_len"], s["strategy"], s["activation_checkpointing"],
                     s["precision"], s["gpus"], s["micro_batch_size"], s["global_batch_size"],
                     si(r["num_parameters"]), nbytes(m["parameters"]), nbytes(m["gradients"]),
                     nbytes(m["optimizer_states"]), nbytes(m["master_weights"]), nbytes(m["activations"]),
                     nbytes(m["total"]), r["fits"], si(r["flops_per_token"]), si(r["comm_bytes_per_step"], "B")])
    console.print(table(f"{scenario.name}: {len(cells)} cells (per rank)", cols, body))


@app.command()
def schema() -> None:
    """Print the JSON Schema of scenario files (for editor completion)."""
    from suite.scenario import Scenario

    typer.echo(json.dumps(Scenario.model_json_schema(), indent=1))


@app.command()
def version() -> None:
    """Print suite's version."""
    typer.echo(__version__)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
