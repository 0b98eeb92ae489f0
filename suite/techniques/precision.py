"""Mixed precision: fp32 | bf16-mixed | fp16-mixed.

Mixed precision computes matmuls in 16 bits while the optimizer updates fp32 weights, so small updates are
not rounded away.  Two mechanisms, depending on the strategy:

- autocast (ddp, zero1): parameters stay fp32; inside `torch.autocast`, matmul-like ops cast their inputs to
  the 16-bit dtype on the fly, numerically sensitive ones (softmax, norms, losses) run in fp32.  Gradients
  come out fp32, so the all-reduce moves 4 bytes per parameter.
- FSDP2 MixedPrecisionPolicy (zero2, zero3): parameters are all-gathered and cast to 16 bits once per block;
  the fp32 shards are the master copy; gradients are reduced in fp32 (reduce_dtype) for accuracy.

fp16 has a narrow exponent range: small gradients underflow to zero.  A GradScaler multiplies the loss by a
large factor before backward, divides the gradients by it before the step, and skips steps whose gradients
overflowed (lowering the factor).  With sharded gradients every rank only sees its shard, so the overflow
check must be agreed across ranks: FSDP uses the ShardedGradScaler, which all-reduces it.  bf16 has fp32's
exponent range and needs no scaler.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

_DTYPES = {"fp32": None, "bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}


def compute_dtype(precision: str) -> torch.dtype | None:
    """The 16-bit compute dtype of a mixed precision, None for fp32."""
    if precision not in _DTYPES:
        raise ValueError(f"precision {precision!r} is unknown; expected one of {', '.join(_DTYPES)}")
    return _DTYPES[precision]


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """The context the forward pass runs in for autocast-based strategies (a no-op for fp32)."""
    dtype = compute_dtype(precision)
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def fsdp_mp_policy(precision: str):
    """FSDP2's MixedPrecisionPolicy: compute in 16 bits, reduce gradients in fp32; the default for fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = compute_dtype(precision)
    if dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def grad_scaler(precision: str, device: torch.device, sharded: bool) -> torch.amp.GradScaler:
    """The loop's GradScaler: enabled for fp16 only; the sharded one when gradients are sharded across ranks.

    fp32 and bf16 get a disabled scaler rather than None so the step has one code path: a disabled scaler's
    scale() returns the loss unchanged, step() is optimizer.step() and update() does nothing."""
    enabled = precision == "fp16-mixed"
    if sharded:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device=device.type, enabled=enabled)
    return torch.amp.GradScaler(device.type, enabled=enabled)
