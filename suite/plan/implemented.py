"""The "as implemented" memory model: what suite's code holds at rest, per strategy and precision (pure).

The textbook (memory.py) is the ZeRO paper's accounting: 16-bit parameters and gradients plus a separate
fp32 master copy in mixed precision.  The code differs, and this model follows the code where a formula can:

- Static bytes: each strategy's registry entry says what it holds per parameter (`StrategySpec.holds`, as
  `replicated + sharded / N` bytes), in fp32 and in mixed precision.  Autocast strategies keep fp32
  parameters and gradients and no master copy (ZeRO-1 mixed: 8 + 8/N bytes per parameter, where the
  textbook says 4 + 12/N); FSDP2's fp32 shards are its master copy; the hand-written ZeRO keeps 16-bit flat
  buffers and an fp32 master shard.  These are the numbers `count_bytes` reports after the first step, up to
  padding (flat buffers and FSDP2 shards are padded to a multiple of N) and ZeroRedundancyOptimizer's
  whole-tensor partitions.
- Unsharded parameters: a strategy that shards parameters gathers the root unit (embeddings, final norm,
  head) for all of forward and backward and `Holds.unsharded_blocks` blocks around it, in the compute dtype
  (a trace of llama3-8b zero3 on 8 ranks peaks at exactly root + 1 block: 2.36 GiB).  Counted under
  parameters.  A pipeline stage instead peaks at a backward's start (its ends and two blocks gathered) or at
  its end (the whole stage gathered), whichever holds more (`pipeline_peak`).
- Activations: what each block keeps for backward, counted from the models' code per policy
  (`layer_bytes_per_token`): the models call fused SDPA, which saves q, k, v, its output and one fp32
  logsumexp per query, never the s x s scores the textbook's 5 a s / h term counts; under autocast the
  residual stream and the norms stay fp32 and each matmul's weight is cast to 16 bits and kept; FSDP2's
  param_dtype computes everything in 16 bits.  Plus what the loss saves: the fp32 log-probabilities over
  the vocabulary.
- The moment of the peak: the start of backward, where the loss's backward holds the fp32 gradients of the
  log-probabilities and the logits (`temporaries`), and FSDP2's gradients do not exist yet in a step of
  one micro-batch (`gradients_absent_at_peak`, left out of the total); or, under autocast with
  checkpointing, the end of forward, where autocast's cache holds a 16-bit copy of every weight.

Against the traced peak of llama3-8b on 8 ranks (ddp, zero1, zero2, zero3 x every policy, bf16) it is
within 3.4% (low: the backward temporaries of a block and the optimizer step's are not counted); the
textbook is 0.5 to 2.3 times the trace.  `fits` still prefers the trace: it is the code, not a model of it.
"""

from __future__ import annotations

from suite.axes import PIPELINE_SCHEDULES, checkpoint_every
from suite.plan.memory import MemoryBreakdown, layered, offloaded, shard_world
from suite.plan.pipeline import context, in_flight, message_tensors, pipeline, stage_parameters, stage_shape
from suite.plan.tensor_parallel import block_parameters, ends_split, matmul_outputs, matmul_weights
from suite.strategies import registry


def static_bytes(num_parameters: int, strategy: str, precision: str, world: int) -> dict[str, float]:
    """Parameters, gradients, master weights and optimizer states per rank, as the code holds them."""
    holds = registry.get(strategy).holds(precision)
    out = {}
    for key in ("parameters", "gradients", "optimizer_states", "master_weights"):
        replicated, sharded = getattr(holds, key)
        out[key] = num_parameters * (replicated + sharded / world)
    return out


def gathered_bytes(precision: str, params: float) -> float:
    """Bytes of `params` gathered (unsharded) for compute, in the compute dtype: 16 bits in mixed precision."""
    return (2 if precision != "fp32" else 4) * params


def unsharded_bytes(shape, strategy: str, precision: str, tp: int = 1) -> float:
    """The parameters a parameter-sharding strategy holds unsharded while computing (see the docstring); a
    block's split projections are 1/tp of it under tensor parallelism."""
    blocks = registry.get(strategy).holds(precision).unsharded_blocks
    if not blocks:
        return 0.0
    block = block_parameters(shape, tp)
    root = shape.num_parameters() - shape.layers * shape.block_parameters()
    return gathered_bytes(precision, root + blocks * block)


def block_backward_bytes(cell) -> float:
    """What one block's backward holds beyond the saved activations, on a pipeline stage (where the peak falls
    inside a block's backward, not at the loss): the block's activations as without checkpointing, less what
    its policy kept (the recomputation rebuilds them), and its parameters' new gradients before they are added
    to the sums (FSDP2: in the compute dtype, then to its fp32 sums; autocast: fp32).  Traced, PyTorch 2.14,
    the 405B-shaped 1f1b cell: a middle rank peaks inside a block's backward 2.6 GiB above the gathered stage,
    its sums and its in-flight activations; this says 1.5 GiB (0.79 of recomputed activations, 0.74 of
    gradients); the rest is not broken down."""
    r, c, autocast = forward_dtypes(cell.strategy, cell.precision)
    tp, sp = getattr(cell, "tensor_parallel", 1), getattr(cell, "sequence_parallel", False)
    tokens = cell.seq_len / context(cell) * cell.micro_batch_size
    every = checkpoint_every(cell.activation_checkpointing)
    kept = "full" if every else cell.activation_checkpointing  # every-k: a checkpointed block kept its input
    rebuilt = tokens * (layer_bytes_per_token(cell.model, "none", r, c, tp, sp)
                        - layer_bytes_per_token(cell.model, kept, r, c, tp, sp))
    grads = 4 if autocast else c  # the dtype of the parameters backward writes: fp32 under autocast
    return rebuilt + grads * block_parameters(cell.model, tp)


def embedding_backward_bytes(cell) -> float:
    """The embedding's new weight gradient, made by each micro-batch's backward before it is added to the sums:
    V x h whole (DTensor's backward returns it replicated where the embedding is split on the vocabulary), in the
    dtype backward writes (fp32 under autocast).  On a pipeline's first stage the embedding's backward ends every
    micro-batch's backward, while the other micro-batches in flight keep their activations: with a vocabulary
    large beside the stage's activations that moment is the stage's peak (a 4-block llama of hidden 128 and
    vocabulary 4096 on 2 stages, t = 2 with SP, ddp, traced, PyTorch 2.14: the first stage's trace was 14-19% over
    a model without it under gpipe, and is 0-4% with it under gpipe, 1f1b and interleaved-1f1b; with t = 1 the same stage's trace peaks in the optimizer step, whose
    foreach temporaries the model leaves out, 5-10% over)."""
    _, c, autocast = forward_dtypes(cell.strategy, cell.precision)
    return (4 if autocast else c) * cell.model.vocab * cell.model.hidden


def forward_dtypes(strategy: str | None, precision: str) -> tuple[int, int, bool]:
    """(bytes of the residual stream, bytes of a matmul's output, whether autocast casts fp32 weights) in a
    cell's forward: fp32 is 4, 4; a strategy that computes with 16-bit parameters (FSDP2's param_dtype, the
    hand-written ZeRO's 16-bit buffers) is 2, 2; autocast over fp32 parameters keeps the residual stream and the
    norms in fp32 and casts every weight to 16 bits for its matmul."""
    if precision == "fp32":
        return 4, 4, False
    holds = registry.get(strategy).holds(precision) if strategy else None
    if holds is not None and (holds.unsharded_blocks or sum(holds.parameters) == 2):
        return 2, 2, False
    return 4, 2, True


def layer_bytes_per_token(shape, mode: str, r: int, c: int, tp: int = 1, sequence_parallel: bool = False) -> float:
    """What one block keeps for backward, per token, under `mode` (none, selective, op-level, full): r, c from
    forward_dtypes.  Counted from the code (models/llama.py, gpt.py):

      none       the two norms' inputs (r h each) and their outputs as the next matmuls' inputs (c h each), the
                 attention kernel's q, k, v (k and v repeated to all heads), output and fp32 logsumexp (4 c h +
                 4 a), the output projection's input (c h, a reshaped copy), the MLP's intermediates (llama:
                 gate, silu(gate), up, their product: 4 c f; gpt: the up projection's output and its GeLU: 2 c f),
                 the norms' fp32 statistics (8)
      selective  the block's input (r h) and every matmul's output
      op-level   the block's input, the odd-numbered matmuls' outputs, the attention output and its logsumexp
      full       the block's input
    plus, for llama, the rotary tables each block keeps (4 x head_dim) and without checkpointing the fp32
    rotary's copies of q and k.  With sequence parallelism the residual stream (the block's input, the norms'
    inputs) is split on the sequence: those r h terms / t."""
    h, a = shape.hidden / tp, shape.heads / tp
    residual = r * shape.hidden / (tp if sequence_parallel else 1)
    mm = matmul_outputs(shape, tp)
    llama = getattr(shape, "family", None) in ("llama", "hf")
    rotary = 4 * (shape.hidden // shape.heads) if llama else 0
    if mode == "none":
        f = mm[-2]  # the MLP's inner width (per rank under tensor parallelism)
        mlp = 4 * c * f if llama else 2 * c * f
        # llama's rotary embedding runs in fp32: q and k are kept as fp32 copies twice (x.float() and its
        # rotation; measured on the trace), with the tables
        fp32_rotary = 2 * 4 * (mm[0] + mm[1]) + rotary if llama else 0
        return 2 * residual + 7 * c * h + mlp + 4 * a + 8 + fp32_rotary
    if mode == "selective":
        return residual + c * sum(mm) + rotary
    if mode == "op-level":
        return residual + c * (sum(mm[0::2]) + h) + 4 * a + rotary
    if mode == "full":
        return residual + rotary
    raise ValueError(f"no per-block bytes for activation_checkpointing {mode!r}")


def activation_bytes(shape, seq_len: int, micro_batch: int, checkpointing: str, precision: str,
                     tp: int = 1, strategy: str | None = None, vocab_split: int = 1, ends: bool = True,
                     sequence_parallel: bool = False) -> float:
    """Activation bytes for one micro-batch over all layers (see layer_bytes_per_token), the fp32
    log-probabilities the loss saves, and under autocast the 16-bit copy of every matmul weight that blocks
    without checkpointing keep for backward (the head's is not one micro-batch's: `head_copy`).  ends=False: a
    pipeline stage without the head (no loss's log-probabilities)."""
    r, c, autocast = forward_dtypes(strategy, precision)
    tokens = seq_len * micro_batch
    per_layer = {mode: tokens * layer_bytes_per_token(shape, mode, r, c, tp, sequence_parallel)
                 for mode in ("none", "selective", "op-level", "full")}
    if autocast:  # the weight copies live as long as the block's saved tensors; recomputed when checkpointed
        per_layer["none"] += 2 * matmul_weights(shape, tp)
    loss = _loss_bytes(shape, seq_len, micro_batch) / vocab_split if ends else 0.0  # loss_parallel: split
    return layered(per_layer, checkpointing, shape.layers) + loss


def head_copy(shape, strategy: str | None, precision: str) -> float:
    """Under autocast, the 16-bit copy of the head's weight its matmul keeps for backward.  Autocast caches the
    copy of a weight it casts for the rest of its region, so the micro-batches a pipeline's last stage has in
    flight share one: counted once beside them (`predict_memory`), not once per micro-batch."""
    return 2.0 * shape.hidden * getattr(shape, "vocab", 0) if forward_dtypes(strategy, precision)[2] else 0.0


def loss_temporaries(shape, seq_len: int, micro_batch: int) -> float:
    """What the loss's backward holds at once as it starts: the gradients of the log-probabilities and of the
    logits, both fp32 over the vocabulary (the peak of most cells falls here)."""
    vocab = getattr(shape, "vocab", None)
    return 8 * micro_batch * seq_len * vocab if vocab else 0.0


def autocast_copies(shape, checkpointing: str, strategy: str | None, precision: str, tp: int = 1) -> float:
    """Under autocast, the 16-bit copies of the checkpointed blocks' weights: autocast caches every weight it
    casts until its region ends, so at the end of forward all of them are alive (the blocks without
    checkpointing keep theirs for backward anyway: activation_bytes counts those)."""
    if not forward_dtypes(strategy, precision)[2] or checkpointing == "none":
        return 0.0
    block = 2 * matmul_weights(shape, tp)
    every = checkpoint_every(checkpointing)
    return block * (shape.layers // every if every else shape.layers)


def peak_extra(cell, last: bool = True) -> float:
    """What the peak holds beyond the saved activations and the static bytes: the loss's gradients at the start
    of backward or, under autocast with checkpointing, the weight copies autocast caches at the end of forward,
    whichever is larger (the peak falls there).  last=False: a pipeline stage without the loss."""
    tp = getattr(cell, "tensor_parallel", 1)
    seq = cell.seq_len / context(cell)
    # not / t under loss parallelism: its backward holds vocabulary-wide temporaries as large as without it
    # (traced, PyTorch 2.14: 8 V bytes a token either way); only the saved log-probabilities are split
    temps = loss_temporaries(cell.model, seq, cell.micro_batch_size) if last else 0.0
    copies = autocast_copies(stage_shape(cell), cell.activation_checkpointing, cell.strategy, cell.precision, tp)
    return max(copies, temps)


def unsharded_accumulation(cell, params: float) -> float:
    """The gradients a strategy accumulates unsharded while a step's micro-batches run under no_sync (FSDP2:
    full size in fp32 on every rank until the last micro-batch's reduce-scatter; its registry entry's
    `accumulates_unsharded`): from the second micro-batch on, the peak holds them beside the sharded ones.
    `params`: the rank's (pipeline stage's, tensor-parallel) parameters before ZeRO.  A pipeline's stages do
    the same across the schedule's micro-batches.  Traced, PyTorch 2.14, llama3-8b zero3 on 8 ranks at 16k
    tokens: 2 micro-batches hold 29.9 GiB (8.03 G x 4 bytes) more than 1."""
    spec = registry.get(cell.strategy)
    return 4.0 * params if spec.accumulates_unsharded and cell.grad_accum > 1 else 0.0


def _loss_bytes(shape, seq_len: int, micro_batch: int) -> float:
    """The fp32 log-probabilities the loss saves: every token over the vocabulary (gpt, llama), or one row
    of class scores per image (vit)."""
    vocab = getattr(shape, "vocab", None)
    return 4 * micro_batch * (seq_len * vocab if vocab else shape.num_classes)


def vocab_split(cell) -> int:
    """t with loss parallelism (the logits and the log-probabilities the loss saves split on the vocabulary),
    else 1."""
    return getattr(cell, "tensor_parallel", 1) if getattr(cell, "loss_parallel", False) else 1


def whole_embedding_gradient(cell, static: dict[str, float], params: float) -> float:
    """Bytes beyond the split parameters' gradients: with sequence or loss parallelism the embedding is split on
    the vocabulary (RowwiseParallel), but DTensor's embedding backward (PyTorch 2.11-2.14) returns its gradient
    replicated: V x h whole on every rank until a strategy that shards gradients (zero3, hsdp) reduce-scatters
    it.  So ddp (tensor parallelism alone) keeps (1 - 1/t) V h more gradient than the split says."""
    split = ends_split(cell)
    if split == 1 or registry.get(cell.strategy).shards.gradients:
        return 0.0
    per = static["gradients"] / params
    return per * cell.model.vocab * cell.model.hidden * (1 - 1 / split)


def whole_embedding_in_backward(cell) -> float:
    """The same replicated embedding gradient (whole_embedding_gradient) under a strategy that shards gradients
    (FSDP2), on the first stage: each micro-batch's backward makes V x h in the compute dtype before FSDP2 keeps
    its split rows, and, where the micro-batches accumulate unsharded (no_sync), FSDP2 upcasts and sums that
    whole gradient: V x h in fp32 where the split says V / t x h.  Both are there at the end of a later
    micro-batch's backward.  The whole V x h of one micro-batch is measured on real tensors (a fake process group,
    PyTorch 2.14); the fp32 sum is FSDP2's `to_accumulated_grad_if_needed` on that gradient.  At 405B (t = 8,
    SP) the two are 3.9 and 7.8 GiB, and the first rank's traced peak falls there."""
    split = ends_split(cell)
    spec = registry.get(cell.strategy)
    if split == 1 or not spec.shards.gradients:
        return 0.0
    whole = cell.model.vocab * cell.model.hidden
    fresh = forward_dtypes(cell.strategy, cell.precision)[1] * whole
    summed = 4.0 * whole * (1 - 1 / split) if spec.accumulates_unsharded and cell.grad_accum > 1 else 0.0
    return fresh + summed


def pipeline_peak(cell, params: float, extra: float, acts: float, one: float, rank: int,
                  working: float) -> tuple[float, float, float]:
    """(parameters gathered, temporaries beyond the gradient sums, activations) at the peak of a pipeline stage:
    the larger of two moments.  Without the loss (every stage but the last) a stage's peak falls inside a block's
    backward, which the model does not count without a pipeline (there the loss's moment is larger).  Under a
    parameter-sharding strategy (`working` > 0) PyTorch's PipelineStage also sets `reshard_after_backward` to
    False in every micro-batch's backward and reshards only at the step's final gradient reduction, while each
    forward still reshards every block after it:

      the start of a backward (on the last stage, the loss's moment) follows a forward: the stage's ends (the
        embedding or the head) and two blocks gathered (the one backward starts in and the one FSDP2
        prefetches), `extra` (the loss's temporaries), and the activations of every micro-batch in flight,
        `acts`;
      the end of a backward: every block gathered (a middle rank of the 405B-shaped 1f1b cell, traced:
        14.1 GiB of parameters at its peak, 2.97 sharded and 15 of 16 blocks in bf16), one block's own backward
        (`block_backward_bytes`), autocast's cache of 16-bit weights (the loop runs the whole schedule inside
        autocast, so the cache lives until the step ends), and the activations of one micro-batch (`one`)
        fewer, but for the stage's output, which the stage holds until that micro-batch's backward returns (on
        the last stage the logits, in the compute dtype; elsewhere the hidden states it sent on); on the first
        stage the embedding's own backward, which comes after the blocks', where it is the larger
        (`embedding_backward_bytes`).

    At both moments the stage also holds its messages' receive buffers and the tensors its send works still
    hold (`pipeline.message_tensors`).  Where every forward comes first (gpipe: its schedule's
    `forwards_first`) the last stage also holds the logits of every micro-batch but the one whose backward
    starts: its forward's output, which PyTorch's stage keeps (`fwd_cache`) until that micro-batch's backward
    takes it, is not one of the tensors the loss saves (it saves the fp32 log-probabilities); the other schedules
    run the last stage's backward right after its forward.  Without them the model was 25% under the trace on
    the 405B cell's last stage, and a tiny llama's traced last stage was up to 1.38 times the model (2 ranks,
    m = 4 and 8).  `one` is one micro-batch's activations (without what the micro-batches share: the head's
    copy).

    Without a pipeline the model gathers the whole model's ends and one block (`unsharded_bytes`)."""
    tp, sp = getattr(cell, "tensor_parallel", 1), getattr(cell, "sequence_parallel", False)
    shape = stage_shape(cell)
    p, _, schedule = pipeline(cell)
    last_stage = rank == p - 1
    start_gathered = end_gathered = working
    if working:
        block = block_parameters(cell.model, tp)
        ends = params - shape.layers * block
        start_gathered = gathered_bytes(cell.precision, ends + min(2, shape.layers) * block)
        end_gathered = gathered_bytes(cell.precision, params)
    tokens = cell.seq_len / context(cell) * cell.micro_batch_size
    width = cell.model.vocab if last_stage else cell.model.hidden / (tp if sp else 1)
    element = forward_dtypes(cell.strategy, cell.precision)[1]
    output = element * tokens * width
    messages = message_tensors(cell, rank) * element * tokens * cell.model.hidden / (tp if sp else 1)
    # the loop runs the whole schedule inside autocast, so autocast's cache keeps a 16-bit copy of every weight
    # of the stage it cast (with checkpointing; without, each micro-batch's saved tensors hold them) to the end
    cache = autocast_copies(shape, cell.activation_checkpointing, cell.strategy, cell.precision, tp)
    logits = output * (cell.grad_accum - 1) if last_stage and PIPELINE_SCHEDULES[schedule].forwards_first else 0.0
    backward = block_backward_bytes(cell)
    if rank == 0 and getattr(cell.model, "vocab", None) and not whole_embedding_in_backward(cell):
        backward = max(backward, embedding_backward_bytes(cell))  # (counted apart where whole_embedding_in_backward)
    start = (start_gathered, extra + messages, acts + logits)
    end = (end_gathered, backward + cache + messages, max(0.0, acts - one) + output)
    return max(start, end, key=sum)


def predict_memory(cell, rank: int | None = None) -> MemoryBreakdown:
    """The as-implemented per-rank breakdown of a cell: of pipeline rank `rank`, or (None) of the pipeline rank
    whose total is the largest (without pipeline parallelism there is one: 0)."""
    p = getattr(cell, "pipeline_parallel", 1)
    if rank is None:
        return max((predict_memory(cell, r) for r in range(p)), key=lambda b: b.total)
    tp, last = getattr(cell, "tensor_parallel", 1), rank == p - 1
    params = stage_parameters(cell, rank)
    static = static_bytes(params, cell.strategy, cell.precision, shard_world(cell))
    static["gradients"] += whole_embedding_gradient(cell, static, params) if rank == 0 else 0.0
    working = unsharded_bytes(cell.model, cell.strategy, cell.precision, tp)  # on the device, offloaded or not
    extra = peak_extra(cell, last)
    one = activation_bytes(stage_shape(cell), cell.seq_len / context(cell), cell.micro_batch_size,
                           cell.activation_checkpointing, cell.precision, tp, cell.strategy, vocab_split(cell),
                           ends=last, sequence_parallel=getattr(cell, "sequence_parallel", False))
    shared = head_copy(cell.model, cell.strategy, cell.precision) if last else 0.0  # one for every micro-batch
    acts = one * in_flight(cell, rank) + shared
    if p > 1:
        working, extra, acts = pipeline_peak(cell, params, extra, acts, one, rank, working)
    static["parameters"] += working
    out = offloaded(static, cell.strategy, working, acts)
    temps = extra + unsharded_accumulation(cell, params)
    temps += whole_embedding_in_backward(cell) if rank == 0 else 0.0
    # At the peak (the start of backward or the end of forward) FSDP2's sharded gradients are None: zero_grad
    # set them to None, and backward makes them only at the last micro-batch's reduce-scatter (before it, the
    # unsharded ones accumulate: unsharded_accumulation)
    spec = registry.get(cell.strategy)  # (offloaded gradients are host bytes: never in the device total)
    absent = out.gradients if not spec.keeps_gradients and not spec.offload else 0.0
    return out.model_copy(update={"temporaries": temps, "total": out.total + temps - absent,
                                  "gradients_absent_at_peak": absent})
