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


CHILDREN = {"standin": standin, "rehearsal-scenarios": rehearsal_scenarios, "harness": harness}


if __name__ == "__main__":
    sys.exit(CHILDREN[sys.argv[1]](*sys.argv[2:]))
