"""A factory of stored results for report/compare tests and benchmarks (scripts/report-speed): real Cells, synthetic measurements, the runner's own aggregation.

Cells come from suite.scenario.expand.expand (so ids, axes and the planner's prediction are the real ones).  Only what a
worker measures is synthetic: rank 0's record (step times, losses, gradient norms, tensor bytes, CUDA peaks,
setup times), generated from a seeded RNG with the knobs a test needs to plant a change (a slower step, more
noise, more memory, another status).  Everything derived from it (step statistics, throughput, MFU, memory
ratios, overhead) is computed by the runner's own code: the record is written to a work folder and read back
by suite.runner.cell.build_result, exactly as `suite run` does after a launch, so a change to the runner's
aggregation shows in every report and compare test instead of being re-implemented here.  write_run() stores
the results in the runner's layout: <root>/<scenario>/<NNNN>_<sha7>_<utc>/{manifest.json, scenario.yaml,
cells/<cell_id>-r<repeat>.json}.  Recorded real runs live in tests/fixtures/ (each with the command that remakes it).
"""

from __future__ import annotations

import json
import math
import random
import tempfile
from pathlib import Path
from typing import Any

from suite.launch import LaunchResult
from suite.plan import predict
from suite.results.schema import CellResult, CudaMemory, Gate, Manifest, RankRecord, SetupTimes, TensorBytes
from suite.runner.cell import build_result
from suite.scenario import Cell, expand, Scenario

BASE_SCENARIO: dict[str, Any] = {
    "name": "fixture", "model": "gpt-tiny", "seq_len": 64, "strategy": "ddp", "precision": "fp32", "gpus": 2,
    "micro_batch_size": 4, "global_batch_size": 16, "steps": 30, "warmup_steps": 5, "device": "cpu",
    "optimizer": {"name": "adamw", "lr": 3.0e-3, "weight_decay": 0.0},
}
T0 = 1735689600.0  # 2025-01-01T00:00:00Z: every synthetic launch starts then, so stored results are reproducible
SETUP = SetupTimes(process_group=0.5, model_build=0.8, strategy=0.2, data=0.5, total=2.0)
LAUNCH_S, TEARDOWN_S = 1.0, 0.5  # seconds before the worker's setup and after its last step


def make_cells(**overrides: Any) -> list[Cell]:
    """The cells of BASE_SCENARIO with some keys overridden (lists sweep an axis), e.g. strategy=[ddp, zero3]."""
    return expand(Scenario.model_validate({**BASE_SCENARIO, **overrides}))


def make_record(cell: Cell, *, step_time_s: float = 0.1, noise: float = 0.02, n_steps: int = 25, seed: Any = 0,
                memory_scale: float = 1.05, loss_start: float = 4.0, loss_end: float = 2.5,
                memory: str = "cuda") -> RankRecord:
    """Rank 0's record of one launch of `cell`, as a worker writes it (rank0.json), with seeded measurements.

    Measured step times ~ step_time_s * (1 + noise * N(0, 1)), after `cell.warmup_steps` warm-up steps 3x as
    long (the runner must leave those out).  Tensor bytes = the prediction x memory_scale; memory="cuda" adds
    CUDA allocator peaks (states + activations at 60% of the textbook value, as fused kernels give; reserved
    1.2x), "states" only the counted tensor bytes (a CPU run), "none" neither.
    """
    rng = random.Random(seed)
    pm = predict(cell).memory_bytes.model_dump()
    warm = [3 * step_time_s] * cell.warmup_steps
    times = [max(1e-6, step_time_s * (1 + noise * rng.gauss(0, 1))) for _ in range(n_steps)]
    total_steps = n_steps + cell.warmup_steps
    # the same curves for every strategy, up to float noise (as fp32 runs on CPU agree to ~1e-6)
    losses = [loss_end + (loss_start - loss_end) * math.exp(-4 * i / total_steps) + rng.gauss(0, 1e-6)
              for i in range(total_steps)]
    grad_norms = [0.5 + 2.0 * math.exp(-3 * i / total_steps) + rng.gauss(0, 1e-6) for i in range(total_steps)]
    tensor_bytes = cuda = None
    if memory in ("cuda", "states"):
        tensor_bytes = TensorBytes(**{k: int(pm[k] * memory_scale)
                                      for k in ("parameters", "gradients", "optimizer_states", "master_weights")})
    if memory == "cuda":
        allocated = int(sum(tensor_bytes.model_dump().values()) + pm["activations"] * 0.6 * memory_scale)
        cuda = CudaMemory(max_memory_allocated=allocated, max_memory_reserved=int(allocated * 1.2),
                          num_alloc_retries=0, num_ooms=0)
    return RankRecord(
        cell_id=cell.id, rank=0, world_size=cell.gpus, local_rank=0, hostname="fixture-host",
        device="cuda:0" if memory == "cuda" else "cpu", device_name="Fixture GPU" if memory == "cuda" else "AMD EPYC",
        status="ok", losses=losses, step_times_s=warm + times, grad_norms=grad_norms,
        warmup_steps=cell.warmup_steps, tokens_per_step=cell.global_batch_size * cell.seq_len,
        samples_per_step=cell.global_batch_size, tensor_bytes=tensor_bytes, cuda_memory=cuda, setup_s=SETUP,
        train_s=sum(warm) + sum(times), teardown_s=TEARDOWN_S)


def make_result(cell: Cell, *, repeat: int = 0, status: str = "ok", gates: list[Gate] | None = None,
                loss_start: float = 4.0, seed: int = 0, **measured: Any) -> CellResult:
    """One stored CellResult of `cell`: make_record's synthetic launch run through the runner's build_result.

    `status` is what the launch should come to, and the runner's own classification must agree:
    ok or gate-failed (a measured cell; the gates are judged elsewhere, so they are given), oom / diverged /
    failed (every rank's record says so; a diverged one got 7 steps in, the others none; the launcher exits 1),
    timeout / interrupted (the launcher was stopped before any rank wrote a record)."""
    base_seed = f"{cell.id}-{repeat}-{seed}"
    record = make_record(cell, seed=base_seed, loss_start=loss_start, **measured)
    returncode: int | None = 0
    if status in ("oom", "diverged", "failed"):
        done = 7 if status == "diverged" else 0
        record = record.model_copy(update={
            "status": status, "error": f"planted {status}", "losses": record.losses[:done],
            "step_times_s": record.step_times_s[:done], "grad_norms": record.grad_norms[:done],
            "train_s": sum(record.step_times_s[:done]), "tensor_bytes": None, "cuda_memory": None})
        returncode = 1
    with tempfile.TemporaryDirectory(prefix="suite-fixture-") as tmp:
        work = Path(tmp) / "work" / f"{cell.id}-r{repeat}"
        work.mkdir(parents=True)
        for rank in range(cell.gpus if status not in ("timeout", "interrupted") else 0):
            rank_record = record.model_copy(update={"rank": rank, "local_rank": rank})  # rank 0's is reported
            (work / f"rank{rank}.json").write_text(rank_record.model_dump_json(), encoding="utf-8")
        (work / "events.jsonl").write_text(json.dumps({"event": "setup_done", "t": T0 + LAUNCH_S + SETUP.total}) + "\n",
                                          encoding="utf-8")
        wall = LAUNCH_S + SETUP.total + record.train_s + TEARDOWN_S
        launch = LaunchResult(launcher=cell.launcher, returncode=returncode, started=T0, ended=T0 + wall,
                              timed_out=status == "timeout", interrupted=status == "interrupted",
                              error=f"planted {status}" if status in ("timeout", "interrupted") else None)
        result = build_result(cell, repeat, launch, work, Path(tmp), device=record.device, session="fixture")
    # the runner must classify the synthetic launch as intended; only then are the (given) gates applied
    want = "ok" if status == "gate-failed" else status
    assert result.status == want and (result.error is None) == (want == "ok"), (cell.id, status, result.error)
    return result.model_copy(update={"status": status, "gates": gates or []})


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
