"""`suite plan FILE [--no-trace] [--only ID...] [--max-micro-batch]`: the planner's table (or JSON), and the
traces behind it.

By default every distinct cell shape is traced on fake tensors (plan/trace.py: torch needed, no GPU; an 8B
model in seconds, plan/depth.py) and `fits` answers from the traced peak; traces are kept on disk
(plan/trace_cache.py), so planning the same shapes again reads them.  Progress goes to stderr: one line per
trace with its time and an ETA, and a closing line with how many traces ran, came from the disk cache or were
shared.  --no-trace (or no torch installed) is pure arithmetic: the textbook and the as-implemented models,
and `fits` from the latter, labelled.  A cell that cannot be traced says why in its row; its `fits` falls back
to the as-implemented model, and the row says so.
"""

from __future__ import annotations

import json
import time

from suite.console import console, err_console, nbytes, si, table

COLUMNS = ["cell", "model", "seq", "strategy", "ckpt", "precision", "gpus", "mbs", "gbs", "params",
           "textbook", "as implemented", "traced peak", "fits", "FLOPs/token", "comm/step"]


class Tracer:
    """The plan's traces: a TraceCache (memory, then disk) whose misses print a progress line on stderr with
    the trace's time and an ETA for the traces still to run, and a closing line with how each was answered."""

    def __init__(self, cells, disk: bool = True):
        from suite.plan.trace import trace_key
        from suite.plan.trace_cache import TraceCache

        self.cache = TraceCache(disk=disk)
        self.todo = len({trace_key(c) for c in cells if not self.cache.has(c)})  # disk read once per shape
        self.times: list[float] = []

    def get(self, cell):
        if self.cache.has(cell):
            return self.cache.get(cell)
        n = len(self.times) + 1
        left = self.todo - len(self.times)
        of = f"{n}/{self.todo}" if left > 0 else f"{n} (micro-batch search)"
        eta = f", about {_duration(left * sum(self.times) / len(self.times))} left" if self.times and left > 0 else ""
        err_console.print(f"tracing {of}{eta}: cell {cell.id} ({cell.strategy}, {cell.activation_checkpointing}, "
                          f"{cell.precision}, {cell.gpus} ranks, micro-batch {cell.micro_batch_size}) ...",
                          highlight=False, markup=False)
        t0 = time.perf_counter()
        try:
            return self.cache.get(cell)
        finally:
            self.times.append(time.perf_counter() - t0)
            err_console.print(f"  {self.times[-1]:.1f} s", highlight=False, markup=False)

    def summary(self) -> str:
        """Where the traces came from: run now, read from the disk cache, shared between cells of this plan."""
        c = self.cache.counts
        parts = [f"{c['traced']} traced ({_duration(sum(self.times))})", f"{c['disk']} from the disk cache",
                 f"{c['memory']} shared within this plan"]
        if c["unreadable"]:
            parts.append(f"{c['unreadable']} unreadable cache file(s) ignored")
        where = f" ({self.cache.folder})" if self.cache.folder else ""
        note = f"; {self.cache.note}" if self.cache.note else ""
        return f"traces: {', '.join(parts)}{where}{note}"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class PlanRequestError(ValueError):
    """A `suite plan` request that cannot be answered (the CLI prints it and exits 2)."""


def select(cells, only: list[str] | None):
    """The cells named by --only (ids or unique id prefixes, comma-separated or repeated); all without it."""
    if not only:
        return cells
    wanted = [w.strip() for item in only for w in item.split(",") if w.strip()]
    if not wanted:
        return cells
    chosen, seen = [], set()
    for w in wanted:
        found = [c for c in cells if c.id == w] or [c for c in cells if c.id.startswith(w)]
        if not found:
            raise PlanRequestError(f"--only {w}: no cell of the scenario's {len(cells)} has this id (suite plan "
                                   "lists them)")
        if len(found) > 1:
            raise PlanRequestError(f"--only {w}: the prefix of {len(found)} cell ids "
                                   f"({', '.join(c.id for c in found[:4])}{', ...' if len(found) > 4 else ''})")
        if found[0].id not in seen:
            seen.add(found[0].id)
            chosen.append(found[0])
    return chosen


def torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def check_request(cells, *, trace: bool, max_micro_batch: bool, headroom: float | None) -> float:
    """Refuse a bad combination of options before any trace runs; returns the headroom to use."""
    if max_micro_batch and not trace:
        raise PlanRequestError("--max-micro-batch searches over traces: drop --no-trace")
    if headroom is not None and not max_micro_batch:
        raise PlanRequestError("--headroom applies to --max-micro-batch only")
    headroom = 0.1 if headroom is None else headroom
    if not 0 <= headroom < 1:
        raise PlanRequestError(f"--headroom {headroom:g} must be at least 0 and below 1 (a fraction of gpu_memory_gb)")
    unsized = [c.id for c in cells if c.gpu_memory_gb is None]
    if max_micro_batch and unsized:
        raise PlanRequestError(f"--max-micro-batch needs the device's size: set gpu_memory_gb in the scenario "
                               f"({len(unsized)} of {len(cells)} cells have none)")
    return headroom


def run_plan(scenario, cells, *, as_json: bool, trace: bool, max_micro_batch: bool,
             headroom: float | None, only: list[str] | None = None, disk_cache: bool = True) -> None:
    from suite.plan.rows import plan_rows

    cells = select(cells, only)
    headroom = check_request(cells, trace=trace, max_micro_batch=max_micro_batch, headroom=headroom)
    untraced = None
    if trace and not torch_available():
        if max_micro_batch:
            raise PlanRequestError("--max-micro-batch searches over traces, which need torch: pip install torch")
        trace, untraced = False, "not traced: torch is not installed (pip install torch); fits uses the " \
                                 "as-implemented model"
    tracer = Tracer(cells, disk_cache) if trace else None
    rows = plan_rows(cells, tracer.get if tracer else None)
    if max_micro_batch:
        from suite.plan.search import max_micro_batch as search

        for cell, row in zip(cells, rows):
            row["max_micro_batch"] = search(cell, tracer.get, headroom).model_dump()
    if tracer:
        err_console.print(tracer.summary(), highlight=False, markup=False, soft_wrap=True)
    if untraced:
        err_console.print(untraced, highlight=False, markup=False, soft_wrap=True)
    if as_json:
        # allow_nan=False: strict JSON; the validators' bounds keep every number finite, so this never raises
        print(json.dumps(rows, indent=1, allow_nan=False))
        return
    body = [_row(r) for r in rows]
    cols = COLUMNS + (["max mbs"] if max_micro_batch else [])
    # columns only some scenarios need: hsdp's shard group, a seed axis (cells that differ by the seed alone),
    # offload's host bytes (inserted right to left, so each index is still the one of COLUMNS)
    extra = (("FLOPs/token", "recompute", lambda r: si(r["recompute_flops_per_token"]),
              lambda vs: vs != {si(0)}),
             ("as implemented", "host", lambda r: nbytes(r["host_bytes"]),
              lambda vs: vs != {nbytes(0)}),
             ("gbs", "seed", lambda r: r["settings"]["seed"], lambda vs: len(vs) > 1),
             ("fits", "bubble", lambda r: f"{r['pipeline']['bubble_fraction']:.0%}" if r["pipeline"] else "-",
              lambda vs: vs != {"-"}),
             ("gpus", "cp", lambda r: r["settings"].get("context_parallel", 1), lambda vs: vs != {1}),
             ("gpus", "pp", lambda r: r["settings"].get("pipeline_parallel", 1), lambda vs: vs != {1}),
             ("pp", "sched", lambda r: _dash(r["settings"].get("pipeline_schedule")), lambda vs: vs != {"-"}),
             ("gpus", "tp", lambda r: r["settings"].get("tensor_parallel", 1), lambda vs: vs != {1}),
             # sequence and loss parallelism need tensor_parallel > 1 (validated): the tp column is there
             ("tp", "lp", lambda r: "yes" if r["settings"].get("loss_parallel") else "-", lambda vs: vs != {"-"}),
             ("tp", "sp", lambda r: "yes" if r["settings"].get("sequence_parallel") else "-", lambda vs: vs != {"-"}),
             ("gpus", "shard", lambda r: _dash(r["settings"].get("shard_size")), lambda vs: vs != {"-"}))
    for after, col, value, shown in extra:
        if shown({value(r) for r in rows}):
            at = cols.index(after) + 1
            cols = [*cols[:at], col, *cols[at:]]
            body = [[*line[:at], value(r), *line[at:]] for line, r in zip(body, rows)]
    if max_micro_batch:
        for line, r in zip(body, rows):
            line.append(_answer(r["max_micro_batch"]))
    console.print(table(f"{scenario.name}: {len(cells)} cells (per rank)", cols, body))
    for note in _notes(rows, headroom if max_micro_batch else None):
        console.print(note, highlight=False, markup=False, soft_wrap=True)


def _dash(value) -> object:
    return "-" if value is None else value


def _row(r: dict) -> list:
    s, m, impl, tr = r["settings"], r["memory_bytes"] or {}, r["as_implemented"] or {}, r["traced"]
    host = r["host_bytes"]
    # offload: a CPU trace sees host and device as one pool; the device's share is the peak less the host bytes
    traced = (nbytes(tr["peak"] - host) + ("*" if host else "")) if tr else ("untraced" if r["trace_error"] else "")
    fits = "" if r["fits"] is None else f"{'yes' if r['fits'] else 'no'} ({r['fits_by']})"
    return [r["cell"], s["model"], s["seq_len"], s["strategy"], s["activation_checkpointing"], s["precision"],
            s["gpus"], s["micro_batch_size"], s["global_batch_size"], si(r["num_parameters"]), _total(m),
            _total(impl), traced, fits, si(r["flops_per_token"]), si(r["comm_bytes_per_step"], "B")]


def _total(breakdown: dict) -> str:
    return nbytes(breakdown["total"]) if breakdown else "traced only"


def _answer(a: dict) -> str:
    if a["error"]:
        return "untraced"
    if a["micro_batch_size"] is None:
        return f"none (1: {nbytes(a['next_peak'])} > {nbytes(a['limit'])})"
    nxt = f"; {a['next_micro_batch']}: {nbytes(a['next_peak'])} > {nbytes(a['limit'])}" if a["next_peak"] else ""
    model = " as implemented" if a.get("basis") == "as-implemented" else ""
    return f"{a['micro_batch_size']}{'+' if a['capped'] else ''} ({nbytes(a['peak'])}{model}{nxt})"


def _notes(rows: list[dict], headroom: float | None) -> list[str]:
    """What the columns mean, and every trace failure and trace note once."""
    notes = ["textbook: ZeRO paper + Korthikanti et al. (s x s attention scores stored); as implemented: what "
             "the code holds (fp32 parameters under autocast, fused attention); traced: peak of the real code "
             "on fake tensors (rank 0; with pipeline stages, the worst pipeline rank). fits uses the traced peak "
             "when there is one.",
             "units: memory in binary units (1 GiB = 2^30 bytes); gpu_memory_gb, which fits compares with, in "
             "10^9 bytes (an 80 GB GPU holds 74.5 GiB); FLOPs and bytes communicated in SI prefixes (10^3)."]
    if headroom is not None:
        notes.append(f"max mbs: largest micro-batch whose traced peak <= gpu_memory_gb x (1 - {headroom:g}), then "
                     "the next micro-batch's peak and the limit it misses; a trace counts allocated bytes, the "
                     "headroom covers what the CUDA caching allocator reserves beyond them, the CUDA context and "
                     "NCCL buffers (plan/search.py); + : search capped; pipeline- and context-parallel cells: "
                     "the search reads the as-implemented model's largest stage (\"as implemented\"; context "
                     "parallelism is not traced, a pipeline's trace is one per pipeline rank)")
    if any(r["recompute_flops_per_token"] for r in rows):
        notes.append("recompute: forward FLOPs per token the checkpointing policy reruns in backward (hardware "
                     "work: HFU counts it, MFU does not; plan/recompute.py)")
    if any(r["host_bytes"] for r in rows):
        notes.append("host: bytes an offloading strategy keeps in host memory (not in the device totals); *: the "
                     "traced peak less those bytes (a CPU trace sees host and device as one memory)")
    if any(r["pipeline"] for r in rows):
        notes.append("pp: pipeline stages; memory is the largest pipeline rank's (the first holds the embedding and "
                     "the most micro-batches in flight, the last the head and the loss); bubble: the share of a step "
                     "the ranks sit idle (plan/pipeline.py); --json gives every stage's bytes")
    for r in rows:
        if r["pipeline"]:
            pl = r["pipeline"]
            stages = ", ".join(nbytes(b) for b in pl["stage_as_implemented"])
            notes.append(f"cell {r['cell']}: {pl['stages']} stages ({pl['schedule']}, {pl['micro_batches']} "
                         f"micro-batches, in flight {pl['in_flight'][0]:g} on the first): as implemented per stage "
                         f"[{stages}]")
            traced = (r["traced"] or {}).get("stages") or []
            if traced:
                peaks = ", ".join(nbytes(st["peak"]) for st in traced)
                notes.append(f"cell {r['cell']}: traced per pipeline rank [{peaks}] (worst: rank "
                             f"{r['traced']['peak_stage']})")
    seen = set()
    for r in rows:
        items = [f"cell {r['cell']}: not traced: {r['trace_error']}"] if r["trace_error"] else []
        items += [f"model {r['settings']['model']}: {r['analytic']}"] if r.get("analytic") else []
        items += [f"traced: {n}" for n in (r["traced"] or {}).get("notes", [])]
        for item in items:
            if item not in seen:
                seen.add(item)
                notes.append(item)
    return notes
