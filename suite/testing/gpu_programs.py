"""The programs the GPU check (gpu_check.py) runs inside the interpreter it checks, one per step that needs one:

    python -m suite.testing.gpu_programs NAME ARGS...

    standin               --rehearse: which of this interpreter's distributions stand in for the GPU image's
    rehearsal-scenarios   --rehearse: CPU copies of the GPU scenarios (one step of gpt-tiny per cell)
    harness               suite's step against the bare loop (bare_loop.py), same cell, same process

The check itself runs under a bare `python3` before suite's requirements are installed; these run where torch
(and, for the harness, suite) are importable.  Imports beyond the standard library stay inside each function.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def standin(image: str, refused: str) -> int:
    """Run by --torch-python: the image's distributions (comma-separated) closed under their requirements
    (markers evaluated, no extras), each as the top-level paths its RECORD installs (packages, modules,
    .dist-info, .libs); the `refused` ones (the image lacks them) are left out and who required them recorded.
    Prints JSON: dists, dropped, site, base_python, python."""
    import importlib.metadata as md
    import sysconfig

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    refused_names = {canonicalize_name(n) for n in refused.split(",")}
    todo, done, seen, dropped = [(n, "", None) for n in image.split(",")], set(), {}, {}
    while todo:
        name, extra, wanted_by = todo.pop()
        if canonicalize_name(name) in refused_names:  # the image lacks it: what here requires it is recorded
            dropped.setdefault(canonicalize_name(name), []).append(wanted_by)
            continue
        key = canonicalize_name(name).replace("-", "_")
        if (key, extra) in done:
            continue
        done.add((key, extra))
        dist = md.distribution(name)
        if key not in seen:
            tops = set()
            for f in dist.files or []:
                parts = Path(str(f)).parts
                if parts and parts[0] != ".." and not parts[0].endswith(".pth") and parts[0] != "__pycache__":
                    tops.add(str(Path(str(dist.locate_file(parts[0]))).resolve()))
            seen[key] = sorted(tops)
        for r in dist.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                if req.marker is not None and extra and req.marker.evaluate({"extra": ""}):
                    continue  # an unconditional requirement: followed with extra ""
                by = f"{dist.metadata['Name']} {dist.version}"
                todo += [(req.name, e, by) for e in sorted(req.extras)] + [(req.name, "", by)]
    print(json.dumps({"dists": seen, "dropped": dropped, "site": sysconfig.get_paths()["purelib"],
                      "base_python": sys._base_executable, "python": sys.version.split()[0]}))
    return 0


def rehearsal_scenarios(*pairs: str) -> int:
    """SRC DST ...: each scenario's CPU copy for --rehearse: one step of gpt-tiny per cell, no gates (one step
    cannot converge), same axes."""
    import yaml

    for src, dst in zip(pairs[0::2], pairs[1::2]):
        d = yaml.safe_load(Path(src).read_text())
        d.pop("convergence", None)
        d.update(name=d["name"] + "-rehearse", device="cpu", model="gpt-tiny", seq_len=64, micro_batch_size=2,
                 global_batch_size=2, steps=1, warmup_steps=0, timeout_s=300)
        Path(dst).write_text(yaml.safe_dump(d, sort_keys=False))
    return 0


def harness(scenario: str, out_json: str, steps: str, warmup: str, rounds: str) -> int:
    """In the checked environment: suite's worker (run_worker, in this process, world of one) against the bare
    loop (suite/testing/bare_loop.py) on the scenario's checkpointing-none cell, alternating; writes OUT_JSON."""
    import statistics
    import tempfile

    import torch

    from suite.scenario import load_cells
    from suite.testing.bare_loop import bare_step_times
    from suite.worker.main import run_worker

    out, steps_n, warmup_n, rounds_n = Path(out_json), int(steps), int(warmup), int(rounds)
    cell = next(c for c in load_cells(scenario)[1] if c.activation_checkpointing == "none" and not c.compile)
    cell = cell.model_copy(update={"measure_peaks": False, "trace_memory": False, "steps": steps_n,
                                   "warmup_steps": warmup_n})
    device = torch.device("cuda" if cell.device != "cpu" and torch.cuda.is_available() else "cpu")
    suite_t, bare_t = [], []
    for i in range(rounds_n):
        times, bare_losses = bare_step_times(cell, device)
        bare_t.append(statistics.median(times[warmup_n:]))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        with tempfile.TemporaryDirectory() as tmp:
            record = run_worker(cell, Path(tmp) / f"run{i}")
        if record.status != "ok":
            raise SystemExit(f"suite's worker: {record.status}: {record.error}")
        suite_t.append(statistics.median(record.step_times_s))
        suite_losses = record.losses
    match = all(abs(a - b) <= 2e-2 * abs(b) for a, b in zip(suite_losses, bare_losses))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    result = {"device": name, "torch": torch.__version__, "cell_id": cell.id, "steps": steps_n,
              "warmup": warmup_n, "rounds": rounds_n, "suite_ms": min(suite_t) * 1e3, "bare_ms": min(bare_t) * 1e3,
              "ratio": min(suite_t) / min(bare_t), "suite_rounds_ms": [t * 1e3 for t in suite_t],
              "bare_rounds_ms": [t * 1e3 for t in bare_t], "losses_match": match,
              "suite_losses": suite_losses, "bare_losses": bare_losses}
    out.write_text(json.dumps(result, indent=1))
    print(f"harness: suite {result['suite_ms']:.2f} ms, bare {result['bare_ms']:.2f} ms, ratio {result['ratio']:.3f}")
    return 0


def layouts(out_json: str) -> int:
    """In the checked environment, on its device (CUDA when there is one): the code paths of sequence, loss,
    pipeline and context parallelism at world size 1 (one GPU), each against the plain model or op, and which
    attention kernel ran; writes OUT_JSON.  A probe that raises is recorded (its error), not fatal: on a CPU,
    PyTorch's context parallelism refuses the CPU's attention kernel, and the rehearsal records exactly that."""
    import os

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.utils._python_dispatch import TorchDispatchMode

    from suite.models.build import build_model
    from suite.models.llama import cross_entropy
    from suite.techniques.pipeline_parallel import build_pipeline, split_stage
    from suite.techniques.tensor_parallel import apply_tensor_parallel, loss_context
    from suite.testing.builders import make_cell

    class Ops(TorchDispatchMode):  # which attention ops ran
        def __init__(self):
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "attention" in func.name() and func.name() not in self.seen:
                self.seen.append(func.name())
            return func(*args, **(kwargs or {}))

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("SUITE_LAYOUTS_PORT", "29631"),
                      RANK="0", WORLD_SIZE="1")
    dist.init_process_group("cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(0)
    cell = make_cell(model="llama-tiny", gpus=1, micro_batch_size=1, global_batch_size=2)
    x = torch.randint(0, cell.model.vocab, (2, cell.seq_len), device=device)
    y = torch.randint(0, cell.model.vocab, (2, cell.seq_len), device=device)
    with torch.device(device):
        reference = build_model(cell.model, cell.seed)
    ref_loss = reference(x, y)
    ref_loss.backward()

    def model():
        with torch.device(device):
            return build_model(cell.model, cell.seed)

    def sequence_and_loss_parallel() -> dict:
        m = model()
        apply_tensor_parallel(m, init_device_mesh(device.type, (1,), mesh_dim_names=("tp",)), True, True)
        with loss_context(True)(), Ops() as ops:
            loss = m(x, y)
            loss.backward()
        loss = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        return {"loss": float(loss.detach()), "reference": float(ref_loss.detach()), "attention": ops.seen}

    def pipeline() -> dict:
        stage = split_stage(model(), 0, 1, copy_model=False)
        group = init_device_mesh(device.type, (1,), mesh_dim_names=("pp",)).get_group()
        pipe = build_pipeline([stage], [0], 1, "1f1b", 2, group, device, cross_entropy)
        loss = pipe.step([(x[:1], y[:1]), (x[1:], y[1:])]) / pipe.ranks
        return {"loss": float(loss), "reference": float(ref_loss.detach()), "busy_s": pipe.busy_s,
                "wall_s": pipe.wall_s}

    def context_parallel() -> dict:
        from torch.distributed.tensor.experimental import context_parallel as cp

        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        q, k, v = (torch.randn(1, 4, 64, 16, device=device, dtype=dtype) for _ in range(3))
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mesh = init_device_mesh(device.type, (1,), mesh_dim_names=("cp",))
        with cp(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]), Ops() as ops:
            got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        got = got.full_tensor() if hasattr(got, "full_tensor") else got
        return {"max_abs_diff": float((got.float() - want.float()).abs().max()), "attention": ops.seen}

    result: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "torch": torch.__version__}
    for name, probe in (("sequence_and_loss_parallel", sequence_and_loss_parallel), ("pipeline", pipeline),
                        ("context_parallel", context_parallel)):
        try:
            result[name] = {"ok": True, **probe()}
        except Exception as exc:  # a probe's failure is its finding (recorded); the others still run
            result[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:1500]}
        print(f"layouts: {name}: {result[name]}", flush=True)
    dist.destroy_process_group()
    Path(out_json).write_text(json.dumps(result, indent=1))
    return 0


CHILDREN = {"standin": standin, "rehearsal-scenarios": rehearsal_scenarios, "harness": harness, "layouts": layouts}


if __name__ == "__main__":
    sys.exit(CHILDREN[sys.argv[1]](*sys.argv[2:]))
