"""Which torch suite runs on: the pinned one, or another that suite's APIs were reviewed against.

suite pins torch 2.14.1 (pyproject.toml: the tests run on it).  A lent GPU machine brings its own image, with
torch 2.11.0+cu130, and nothing can be installed there (docs/gpu-check.md).  Every torch API suite calls was
compared between the v2.11.0 and the 2.14.1 sources (`DIFFERENCES` below, with the files and what follows);
none needs a code path of its own, so 2.11 and 2.14 share one code.  Older than 2.11 was not reviewed:
`require_torch` refuses it with a message naming the version.  Results always carry the torch version
(manifest.json), and `torch_note` is the sentence a report prints when a result came from another torch than
the pinned one.

`python -m suite.compat [--import-all] [--json FILE]` prints the versions of what suite imports, the note,
and with --import-all imports every suite module (what the GPU check's offline install is judged by).
No torch import at module level: the report side may use this module.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import pkgutil
import platform
import sys
from pathlib import Path

PINNED_TORCH = "2.14.1"  # = pyproject.toml's pin (tests/unit/test_gpu_rehearse.py checks)
OLDEST_TORCH = (2, 11)  # the oldest release whose sources suite's calls were reviewed against

# Modules that need an optional extra (ray, docker, report) and are not used by a torchrun run.
OPTIONAL_IMPORTS = {"ray": "suite[ray]", "docker": "suite[docker]", "matplotlib": "suite[report]"}

# (API suite calls, where suite calls it, what differs from 2.11.0 to 2.14.1, what suite does about it)
DIFFERENCES: tuple[tuple[str, str, str, str], ...] = (
    ("torch.distributed._tools.mem_tracker.MemTracker / fsdp2_mem_tracker.FSDPMemTracker "
     "__torch_dispatch__", "suite/worker/measure.py track_peaks",
     "2.14 remembers the fake mode active at __enter__ and skips ops dispatched under another one (DTensor "
     "sharding propagation runs in a nested FakeTensorMode); 2.11 tracks those ops too",
     "same code; measured here on both: traced peaks (ddp / zero2 / zero3 x none / selective x fp32 / bf16, "
     "2 fake ranks) and real 2-rank gloo zero3 tracker peaks are byte-identical on 2.11.0 and 2.14.1; DDP "
     "cells hold no DTensors at all; results name their torch, so a difference would show"),
    ("torch.distributed.tensor._sharding_prop (DTensor meta propagation)", "every DTensor op (FSDP2, TP)",
     "2.14 serialises its FakeTensorMode entry behind a lock and disables proxy tracing; 2.11 enters "
     "`detect_fake_mode() or FakeTensorMode()` directly", "none needed (suite is single-threaded per rank)"),
    ("torch.distributed._tools.mod_tracker.ModTracker._maybe_set_engine_callback / parents / _has_callback",
     "suite/worker/measure.py _schedule_mod_tracker (pipeline steps under MemTracker)",
     "read in 2.14.1 only (2026-12-05): not yet compared with the v2.11.0 sources",
     "private API: a pipeline trace would fail with a TraceError naming the cell; the GPU check imports it"),
    ("torch._C._clear_DTensor_sharding_propagator_cache, ShardingPropagator.propagate_op_sharding.cache_clear",
     "suite/plan/trace.py _forget_sharding_plans (between fake worlds)",
     "read in 2.14.1 only (2026-12-05): not yet compared with the v2.11.0 sources",
     "looked up with getattr: where absent, nothing is cleared (only a second fake world in one process needs it)"),
    ("torch.distributed.tensor.experimental._context_parallel._attention._templated_ring_attention / "
     "_templated_ring_attention_backward, DTensor._op_dispatcher._custom_op_handlers, DTensorSpec, TensorMeta",
     "suite/techniques/context_parallel.py (the ring rule for the CPU attention kernel)",
     "read in 2.14.1 only (2026-12-05); the module was torch.distributed.tensor.experimental._attention "
     "before the package split (suite imports either)",
     "private API, used on CPU only: a CUDA run goes through PyTorch's own context_parallel rules"),
    ("torch.testing._internal.distributed.fake_pg.FakeStore", "suite/plan/trace.py fake_world",
     "a Python dist.Store subclass in 2.11, the C++ store re-exported in 2.14", "same import, same use"),
    ("torch.utils.checkpoint.checkpoint(preserve_rng_state=...)",
     "suite/techniques/checkpointing.py via checkpoint_wrapper",
     "a keyword parameter in 2.14, read from **kwargs in 2.11 (kwargs.pop('preserve_rng_state', True)); "
     "2.14 adds respect_saved_tensors_hooks", "same call works on both; the new parameter is not used"),
    ("torch.distributed.fsdp.fully_shard", "suite/strategies/fsdp.py",
     "2.14 adds dp_mesh_dims (DataParallelMeshDims) and a ShardPlacementFnResult type; FSDPModule gains "
     "set_reduce_scatter_max_input_buffers / _unused_params, set_separate_reduce_scatter_group, "
     "set_symm_mem_for_comm", "suite passes mesh, reshard_after_forward, mp_policy, offload_policy only and "
     "calls set_requires_gradient_sync: identical in both"),
    ("torch.nn.parallel.DistributedDataParallel", "suite/strategies/ddp.py, zero1.py",
     "broadcast_buffers defaults to True in 2.11, None in 2.14 (with a new forward_sync_buffers); 2.14 adds "
     "batched_grad_copy", "suite passes neither; its models hold no buffers that DDP broadcasts"),
    ("MixedPrecisionPolicy, CPUOffloadPolicy, init_device_mesh, create_selective_checkpoint_contexts, "
     "CheckpointPolicy, checkpoint_wrapper, torch.optim.AdamW(fused=), ZeroRedundancyOptimizer, "
     "ShardedGradScaler, parallelize_module / ColwiseParallel / RowwiseParallel, "
     "distributed.checkpoint.state_dict (StateDictOptions, get/set_model_state_dict, "
     "get_optimizer_state_dict), FakeTensorMode(allow_non_fake_inputs=), unset_fake_temporarily, "
     "TorchDispatchMode, torch.distributed.run.main, ChildFailedError",
     "suite/strategies, techniques, plan, worker, launch",
     "same signatures in both (annotations aside)", "none needed"),
)


def _parse(version: str) -> tuple[int, int, int]:
    """'2.11.0+cu130' -> (2, 11, 0); missing or non-numeric parts count as 0."""
    parts = (version.split("+", 1)[0].split(".") + ["0", "0", "0"])[:3]
    out = []
    for p in parts:
        digits = "".join(c for c in p if c.isdigit()) or "0"  # '0a0' -> 0, 'dev' -> 0
        out.append(int(digits) if p[:1].isdigit() else 0)
    return tuple(out)  # type: ignore[return-value]


def is_pinned(version: str) -> bool:
    return version.split("+", 1)[0] == PINNED_TORCH


def torch_note(version: str) -> str:
    """'' for the pinned torch; otherwise the sentence a report shows beside results from `version`."""
    if is_pinned(version):
        return ""
    return (f"torch {version} is not the pinned {PINNED_TORCH}: suite's torch calls were reviewed against "
            f"2.11.0 (suite/compat.py DIFFERENCES) and rehearsed on the CPU, not run by the test suite")


def require_torch(version: str | None = None) -> str:
    """The torch version, or RuntimeError naming it when it is older than the oldest reviewed release."""
    if version is None:
        import torch

        version = torch.__version__
    if _parse(version)[:2] < OLDEST_TORCH:
        raise RuntimeError(f"torch {version} is older than {OLDEST_TORCH[0]}.{OLDEST_TORCH[1]}, the oldest release "
                           f"suite's torch calls were checked against (pinned: {PINNED_TORCH}); install torch "
                           f">= {OLDEST_TORCH[0]}.{OLDEST_TORCH[1]}")
    return version


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    """Versions of Python and of what suite imports, with where torch and pydantic came from."""
    import torch

    out = {"python": platform.python_version(), "executable": sys.executable,
           "torch": torch.__version__, "torch_cuda": torch.version.cuda, "torch_file": torch.__file__,
           "torch_pinned": PINNED_TORCH, "torch_note": torch_note(torch.__version__)}
    for name in ("torchvision", "pydantic", "pydantic-core", "typing-extensions", "PyYAML", "typer", "rich",
                 "psutil", "numpy"):
        out[name] = _dist_version(name)
    import pydantic

    out["pydantic_file"] = pydantic.__file__
    return out


def import_all() -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Import every suite module: (imported, optional ones skipped for a missing extra, failures)."""
    import suite

    done, optional, failed = [], {}, {}
    for info in pkgutil.walk_packages(suite.__path__, "suite."):
        try:
            importlib.import_module(info.name)
            done.append(info.name)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if top in OPTIONAL_IMPORTS:
                optional[info.name] = f"needs {top} ({OPTIONAL_IMPORTS[top]})"
            else:
                failed[info.name] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the others
            failed[info.name] = f"{type(exc).__name__}: {exc}"
    return done, optional, failed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    info = versions()
    require_torch(info["torch"])
    code = 0
    if "--import-all" in args:
        done, optional, failed = import_all()
        info.update(imported=len(done), optional_skipped=optional, import_failures=failed)
        code = 1 if failed else 0
    for key, value in info.items():
        print(f"{key}: {value}")
    if "--json" in args:
        Path(args[args.index("--json") + 1]).write_text(json.dumps(info, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
