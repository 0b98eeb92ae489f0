"""A fixture factory for report/compare tests: real Cells, synthetic measurements, stored in the runner's layout.

Cells come from suite.cells.expand (so ids, axes and the planner's prediction are the real ones); the measured
side (step times, losses, memory) is generated from a seeded RNG with the knobs a test needs to plant a change:
a slower step time, more noise, more memory, another status.  write_run() stores them exactly as `suite run`
does: <root>/<scenario>/<NNNN>_<sha7>_<utc>/{manifest.json, scenario.yaml, cells/<cell_id>-r<repeat>.json}.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from suite.cells import Cell, expand
from suite.plan import predict
from suite.results.schema import CellResult, Gate, Manifest, MemoryComparison, Mfu, Overhead, StepStats, Throughput
from suite.scenario import Scenario

BASE_SCENARIO: dict[str, Any] = {
    "name": "fixture", "model": "gpt-tiny", "seq_len": 64, "strategy": "ddp", "precision": "fp32", "gpus": 2,
    "micro_batch_size": 4, "global_batch_size": 16, "steps": 30, "warmup_steps": 5, "device": "cpu",
    "optimizer": {"name": "adamw", "lr": 3.0e-3, "weight_decay": 0.0},
}


def make_cells(**overrides: Any) -> list[Cell]:
    """The cells of BASE_SCENARIO with some keys overridden (lists sweep an axis), e.g. strategy=[ddp, zero3]."""
    return expand(Scenario.model_validate({**BASE_SCENARIO, **overrides}))


def _quantile(values: list[float], q: float) -> float:
    data = sorted(values)
    pos = (len(data) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def make_result(cell: Cell, *, repeat: int = 0, status: str = "ok", step_time_s: float = 0.1, noise: float = 0.02,
                n_steps: int = 25, seed: int = 0, memory_scale: float = 1.05, loss_start: float = 4.0,
                loss_end: float = 2.5, gates: list[Gate] | None = None, peak_flops: float | None = None,
                memory: str = "cuda") -> CellResult:
    """One stored CellResult of `cell` with seeded synthetic measurements.

    step times ~ step_time_s * (1 + noise * N(0, 1)); measured memory = the prediction x memory_scale (activations
    at 60% of the textbook value, as fused kernels give); memory="cuda" measures a CUDA peak, "states" only the
    counted tensor bytes (a CPU run), "none" nothing.  Statuses other than ok/gate-failed carry no measurements.
    """
    rng = random.Random(f"{cell.id}-{repeat}-{seed}")
    pred = predict(cell)
    ran = status in ("ok", "gate-failed")
    base: dict[str, Any] = dict(
        cell_id=cell.id, repeat=repeat, axes=cell.axes(), cell=cell.model_dump(mode="json"), status=status,
        started_at="2025-01-01T00:00:00Z", finished_at="2025-01-01T00:01:00Z", launcher=cell.launcher,
        prediction=pred.model_dump(mode="json"), gates=gates or [],
    )
    if not ran:
        steps_done = 7 if status == "diverged" else 0
        losses = [loss_start - 0.01 * i for i in range(steps_done)]
        return CellResult(**base, error=f"planted {status}", losses=losses)
    times = [max(1e-6, step_time_s * (1 + noise * rng.gauss(0, 1))) for _ in range(n_steps)]
    total_steps = n_steps + cell.warmup_steps
    # the same curve for every strategy, up to float noise (as fp32 runs on CPU agree to ~1e-6)
    losses = [loss_end + (loss_start - loss_end) * math.exp(-4 * i / total_steps) + rng.gauss(0, 1e-6)
              for i in range(total_steps)]
    tokens_per_step = cell.global_batch_size * cell.seq_len
    med, mean = _quantile(times, 0.5), sum(times) / n_steps
    tps = tokens_per_step / mean  # the runner's definition: per step / mean step time
    pm = pred.memory_bytes.model_dump()
    # the runner's keys (suite/runner/aggregate.py): counted tensor bytes, tracker peaks, CUDA allocator peaks
    measured: dict[str, float | None] = dict.fromkeys(
        ("parameters", "gradients", "optimizer_states", "activations", "unsharded_parameters", "total_tracker",
         "total_cuda", "reserved_cuda"))
    if memory in ("cuda", "states"):
        states = [pm[k] * memory_scale for k in ("parameters", "gradients", "optimizer_states")]
        measured.update(parameters=states[0], gradients=states[1], optimizer_states=states[2])
    if memory == "cuda":
        measured["activations"] = pm["activations"] * 0.6 * memory_scale
        measured["total_cuda"] = sum(states) + pm["master_weights"] * memory_scale + measured["activations"]
        measured["reserved_cuda"] = measured["total_cuda"] * 1.2
    ratio = {k: (measured[k] / pm[k] if measured.get(k) is not None and pm.get(k) else None)
             for k in ("parameters", "gradients", "optimizer_states", "activations")}
    ratio["total_cuda"] = measured["total_cuda"] / pm["total"] if measured["total_cuda"] is not None else None
    flops = pred.flops_per_token
    return CellResult(
        **base, losses=losses, final_loss=losses[-1], step_times_s=times,
        step_time=StepStats(n=n_steps, median=med, p10=_quantile(times, 0.1), p90=_quantile(times, 0.9),
                            mean=mean),
        throughput=Throughput(tokens_per_s=tps, tokens_per_s_per_device=tps / cell.gpus,
                              samples_per_s=cell.global_batch_size / mean),
        mfu=Mfu(value=None if peak_flops is None else tps / cell.gpus * flops / peak_flops,
                formula="6N + 12 L h s per token", flops_per_token=flops, peak_flops=peak_flops,
                peak_source=None if peak_flops is None else "datasheet", precision=cell.precision),
        memory=MemoryComparison(measured=measured, predicted=pm, ratio=ratio),
        overhead_s=Overhead(launch=1.0, setup=2.0, train=sum(times), teardown=0.5, wall=sum(times) + 3.5),
    )


def make_manifest(scenario: str = "fixture", run_no: int = 1, *, created_at: str | None = None,
                  devices: list[str] | None = None, **overrides: Any) -> Manifest:
    created = created_at or f"2025-01-{run_no:02d}T00:00:00Z"
    stamp = created.replace("-", "").replace(":", "")
    fields: dict[str, Any] = dict(
        run_id=f"{run_no:04d}_abc1234_{stamp}", scenario=scenario, created_at=created,
        command=["suite", "run", f"scenarios/{scenario}.yaml"], suite_version="0.1.0", git_commit="abc1234" + "0" * 33,
        git_dirty=False, python="3.11.2", torch="2.14.1", cuda=None, nccl=None, driver=None,
        devices=devices if devices is not None else [], device_count=len(devices or []), cpu_model="AMD EPYC",
        hostname="fixture-host", seed=0, env={"OMP_NUM_THREADS": "1"},
    )
    fields.update(overrides)
    return Manifest(**fields)


def write_run(root: Path, manifest: Manifest, results: list[CellResult], scenario_yaml: str = "name: fixture\n") -> Path:
    """Store a run folder in the runner's layout; returns its path."""
    run = Path(root) / manifest.scenario / manifest.run_id
    (run / "cells").mkdir(parents=True)
    (run / "manifest.json").write_text(manifest.model_dump_json(indent=1))
    (run / "scenario.yaml").write_text(scenario_yaml)
    for r in results:
        (run / "cells" / f"{r.cell_id}-r{r.repeat}.json").write_text(r.model_dump_json(indent=1))
    return run
