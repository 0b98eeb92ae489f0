"""Context parallelism: one sequence split over the c ranks of the `cp` mesh dimension, attention as a ring.

With a long sequence the activations, not the weights, fill the device: every block holds s x b x h of them.
Context parallelism (Liu et al.'s ring attention; torchtitan's `context_parallel`) gives each of c ranks s / c
of every sequence, so everything outside attention (projections, norms, MLP, loss) is already local.  Attention
is not: each query needs every earlier key.  PyTorch's `context_parallel` turns `scaled_dot_product_attention`
into a ring: the ranks' keys and values are passed around the c ranks (all-gathered, by default), each rank
attends its queries to each chunk in turn, and the partial results are merged by their log-sum-exp, exactly as
one kernel over the whole sequence would; backward sends the key and value gradients back around the ring.

The sequence is cut into 2c chunks and rank i takes chunks i and 2c - 1 - i (the head-tail load balancer):
under the causal mask the first chunks attend to little and the last to much, so each rank gets one of each.
That is why 2c must divide the sequence (scenario/pipeline.py checks it), and why the model is told where its
tokens sit (`positions`: rotary angles or learned positions follow the token, not its index on the rank).

`ContextParallel.shard(inputs, targets)` is what the training loop enters around each micro-batch's forward and
backward: it splits the token ids, the targets and the positions the same way, and routes attention through
the ring while it is open.  The loss is each rank's mean over its s / c tokens; the strategy averages gradients
over the data-parallel and context-parallel ranks together (one flattened mesh), which makes the step the mean
over the whole sequence.  Parameters are not split by context parallelism: FSDP shards them over dp x cp.

**On CPU**, PyTorch's ring covers the CUDA kernels (flash, memory-efficient, cuDNN) only; the CPU's
`_scaled_dot_product_flash_attention_for_cpu` has no rule, and `context_parallel` fails there.  suite adds one:
the same ring (`_templated_ring_attention`, PyTorch's own merge) around the CPU kernel, which returns the
log-sum-exp the merge needs.  That lets the 1-rank comparison run on gloo and the planner's trace (fake tensors
on the CPU) follow context-parallel cells; a CUDA run uses PyTorch's rules unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch

SEQ_DIM = 2  # attention's (batch, heads, time, head_dim): the ring splits dimension 2, as PyTorch's does


@dataclass
class ContextParallel:
    """The context-parallel part of a Parallel: `mesh` is the 1-D `cp` dimension of the world's mesh."""

    mesh: object  # torch.distributed.device_mesh.DeviceMesh (the cp dimension)

    @contextmanager
    def shard(self, inputs: torch.Tensor, targets: torch.Tensor
              ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """This rank's (inputs, targets, positions) of a micro-batch; attention is a ring while it is open.
        Copies are split, never the caller's tensors (PyTorch resizes its buffers in place)."""
        from torch.distributed.tensor.experimental import context_parallel

        x, y = inputs.clone(), targets.clone()
        positions = torch.arange(x.shape[1], device=x.device)
        buffers = [x, y, positions]
        with context_parallel(self.mesh, buffers=buffers, buffer_seq_dims=[1, 1, 0], no_restore_buffers=set(buffers)):
            with _cpu_ring() if x.device.type == "cpu" else nullcontext():
                yield x, y, positions


@contextmanager
def _cpu_ring() -> Iterator[None]:
    """Route the CPU attention kernel and its backward through the ring while open (see the module docstring).
    Entered inside `context_parallel`, which installs PyTorch's handlers for the CUDA kernels; restores the
    handlers it found."""
    from torch.distributed.tensor import DTensor

    aten = torch.ops.aten
    dispatcher = DTensor._op_dispatcher
    before = dispatcher._custom_op_handlers
    dispatcher._custom_op_handlers = {**before,
                                      aten._scaled_dot_product_flash_attention_for_cpu.default: _ring_forward,
                                      aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _ring_backward}
    try:
        yield
    finally:
        dispatcher._custom_op_handlers = before


def _ring_module():
    """PyTorch's ring attention (a private module: moved between 2.11 and 2.14)."""
    try:
        from torch.distributed.tensor.experimental._context_parallel import _attention
    except ImportError:
        from torch.distributed.tensor.experimental import _attention
    return _attention


def _dense(op):
    """`op` given contiguous tensors: the ring hands a rank's kernel halves of its queries, outputs, output
    gradients and log-sum-exps (views along the sequence, `chunk(2, dim=2)[1]`); PyTorch's CUDA kernels take
    such views, but the CPU kernel is only ever called on whole tensors by SDPA, so it gets dense copies."""
    def call(*args, **kwargs):
        dense = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        return op(*dense, **{k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
    return call


def _sharded(local: torch.Tensor, mesh, seq_len: int):
    """A DTensor of `local`, split on the sequence (dimension 2) over `mesh`, whole length `seq_len`."""
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

    shape = torch.Size([*local.shape[:SEQ_DIM], seq_len, *local.shape[SEQ_DIM + 1:]])
    stride = torch.empty(shape, device="meta").stride()
    spec = DTensorSpec(mesh, (Shard(SEQ_DIM),), tensor_meta=TensorMeta(shape, stride, local.dtype))
    return DTensor(local, spec, requires_grad=False)


def _ring_forward(op, args: tuple, kwargs: dict):
    """aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, *, attn_mask, scale) on
    sequence-split DTensors -> (out, logsumexp), both split like q."""
    query, key, value, *rest = args
    options = dict(zip(("dropout_p", "is_causal"), rest)) | dict(kwargs)
    if options.pop("attn_mask", None) is not None:
        raise NotImplementedError("context parallelism on CPU: attention with an explicit mask is not supported")
    mesh = query.device_mesh
    out, lse = _ring_module()._templated_ring_attention(
        mesh.get_group(), SEQ_DIM, _dense(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default),
        query._local_tensor, key._local_tensor, value._local_tensor, **options)
    seq = query.shape[SEQ_DIM]
    return _sharded(out, mesh, seq), _sharded(lse, mesh, seq)


_BACKWARD_ARGS = ("grad_out", "query", "key", "value", "out", "logsumexp", "dropout_p", "is_causal")


def _ring_backward(op, args: tuple, kwargs: dict):
    """aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, q, k, v, out, logsumexp, dropout_p,
    is_causal, *, attn_mask, scale) -> (grad_q, grad_k, grad_v), each split like its input."""
    from torch.distributed.tensor import DTensor

    named = dict(zip(_BACKWARD_ARGS, args)) | dict(kwargs)
    if named.pop("attn_mask", None) is not None:
        raise NotImplementedError("context parallelism on CPU: attention with an explicit mask is not supported")
    local = {k: v._local_tensor if isinstance(v, DTensor) else v for k, v in named.items()}
    query = named["query"]
    grads = _ring_module()._templated_ring_attention_backward(
        query.device_mesh.get_group(), SEQ_DIM,
        _dense(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default),
        grad_out_name="grad_out", **local)
    return tuple(DTensor(g, named[k]._spec, requires_grad=False) for g, k in zip(grads, ("query", "key", "value")))
