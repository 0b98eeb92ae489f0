"""The world a trace runs in: a fake process group of the cell's ranks, and what makes it hold what a real
one holds.

`traced_world` enters them in one order: the fake process group (`fake_world`), then what keeps the trace's
accounting that of a real rank: DTensor's shape propagation apart (`propagation_apart`), device meshes built
real (`meshes_real`), deep copies kept in the trace's fake mode (`copies_keep_the_mode`), send works holding
their tensors (`sends_held_by_their_works`) and the cyclic collector off (`collector_off`).  The caller enters
its FakeTensorMode inside it (plan/trace._run)."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

from suite.plan.trace_record import TraceError


@contextmanager
def traced_world(world: int, rank: int = 0):
    """Every context of the module docstring, in its order."""
    with ExitStack() as stack:
        for context in (fake_world(world, rank), propagation_apart(), meshes_real(), copies_keep_the_mode(),
                        sends_held_by_their_works(), collector_off()):
            stack.enter_context(context)
        yield


@contextmanager
def fake_world(world: int, rank: int = 0):
    """A fake process group of `world` ranks, this process `rank`, destroyed afterwards."""
    import sys

    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise TraceError("a process group already exists in this process: trace from the planner, not a worker")
    hook = sys.excepthook  # init_process_group wraps it to prefix "[rank0]:", once more per group
    try:
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        sys.excepthook = hook
        _forget_sharding_plans()


@contextmanager
def propagation_apart():
    """Let DTensor work out its outputs' shapes in a fake mode of its own, as it does in a real run.

    To learn an operator's output shape, DTensor runs the operator once on fake tensors of the *global* shapes
    (`ShardingPropagator._propagate_tensor_meta_non_cached`, once per operator and placements: it is cached), in
    the fake mode it finds active, else in a new one.  A real run has none active, so torch's MemTracker, which
    skips what runs in a fake mode other than the one it started in, skips those tensors.  Under the trace's own
    FakeTensorMode DTensor finds that mode, and the tracker counts the global-shape tensors as if a rank held
    them: AdamW's first step on one 4096 x 1024 parameter sharded on 4 ranks traced at 67.1 MB against 21.0 MB
    on real tensors, and so did every first use of an operator on large DTensors.  Inside this context DTensor
    finds no active mode and makes its own, as in the real run (21.0 MB)."""
    try:
        from torch.distributed.tensor import _sharding_prop as prop
    except ImportError:  # a torch without DTensor's propagator: nothing to keep apart
        yield
        return
    found = getattr(prop, "detect_fake_mode", None)
    if found is None:
        yield
        return
    prop.detect_fake_mode = lambda *args: None
    try:
        yield
    finally:
        prop.detect_fake_mode = found


@contextmanager
def copies_keep_the_mode():
    """Let a deep copy of fake tensors stay in the trace's FakeTensorMode.

    A fake tensor keeps its mode in its `__dict__`, and `copy.deepcopy` copies that too: every copy of a model
    (an interleaved pipeline rank cuts each of its chunks from a copy, techniques/pipeline_parallel.split_stage)
    came out in a mode of its own, a copy of the trace's with copies of its tables.  Ops then mixed tensors of
    two modes; with tensor + sequence parallelism that broke memory ("tensor's device must be `meta`, got cpu",
    SIGSEGV in the garbage collector): the 405B interleaved-1f1b cell's known failure until 2026-12-07.  A mode is
    a context, not data, so its copy is itself."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    had = "__deepcopy__" in FakeTensorMode.__dict__
    found = FakeTensorMode.__dict__.get("__deepcopy__")
    FakeTensorMode.__deepcopy__ = lambda self, memo: self
    try:
        yield
    finally:
        if had:
            FakeTensorMode.__deepcopy__ = found
        else:
            del FakeTensorMode.__deepcopy__


@contextmanager
def meshes_real():
    """Build every DeviceMesh on real tensors while the trace's FakeTensorMode is active.

    A mesh is a small tensor of ranks that computes this rank's coordinates on itself (`nonzero`), which a fake
    tensor cannot answer; FSDP2 builds such meshes inside `fully_shard` when it joins its data-parallel mesh
    with the tensor-parallel mesh of DTensor parameters (`DeviceMesh._concatenate`).  Only the mesh's own
    construction leaves the fake mode here, narrower than running all of `fully_shard` outside it (what the
    fsdp strategy did before 2026-12-07), which let any factory call inside FSDP's sharding make real tensors."""
    import functools

    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    init = DeviceMesh.__init__

    @functools.wraps(init)
    def real_init(self, *args, **kwargs):
        with unset_fake_temporarily():
            init(self, *args, **kwargs)

    DeviceMesh.__init__ = real_init
    try:
        yield
    finally:
        DeviceMesh.__init__ = init


class _HeldWork:
    """A communication work that holds its tensors while it lives, as gloo's and NCCL's works do."""

    __slots__ = ("work", "tensors")

    def __init__(self, work, tensors: list) -> None:
        self.work, self.tensors = work, tensors

    def wait(self, *args, **kwargs):
        return self.work.wait(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.work, name)


@contextmanager
def sends_held_by_their_works():
    """Let a pipeline's point-to-point works hold their tensors, as a real process group's do.

    A gloo (or NCCL) work keeps the tensor it sends until the work object is dropped; the fake process group's
    work holds nothing.  PyTorch's runtime schedules (interleaved-1f1b, zero-bubble) keep every send's work
    until the end of the step (`_PipelineScheduleRuntime._step_microbatches`; gpipe to the end of its phase
    loops, 1f1b until its next send), so each micro-batch's sent
    activations and input gradients stay alive on a real rank after the stage's backward has let them go:
    3 activation-sized tensors per micro-batch on each rank of a 2-rank interleaved pipeline.  Without them
    the trace read 1.4-12% under the ranks' real peaks (m = 4 to 16, tiny llama, 2026-12-07).  Each work the
    schedules' `_batch_p2p` returns holds its batch's tensors here."""
    try:
        from torch.distributed.pipelining import schedules
    except ImportError:  # a torch without pipelining: nothing to hold
        yield
        return
    batch = schedules._batch_p2p

    def held(p2p_ops, desc=None):
        tensors = [op.tensor for op in p2p_ops]
        return [_HeldWork(work, tensors) for work in batch(p2p_ops, desc=desc)]

    schedules._batch_p2p = held
    try:
        yield
    finally:
        schedules._batch_p2p = batch


@contextmanager
def collector_off():
    """Trace with Python's cyclic garbage collector off (after one full collection).

    Part of a pipeline micro-batch's autograd graph (zero-bubble's split backward, interleaved chunks) is held
    by reference cycles that only the cyclic collector frees, so with the collector on a traced peak depends on
    when it happens to run, i.e. on how many objects the process holds and what it traced before: one
    zero-bubble stage of tests/dist/test_pipeline_parallel.py read 4.18, 4.24 or 4.38 MB by the order of the
    traces before it; its real rank measured 4.59 MB.  Off, nothing the trace holds is freed late or early by
    chance: the same stage read 4.61 MB in any order (4.62 MB once send works held their tensors, above), the
    peak with every cycle kept (the cautious answer)."""
    import gc

    was_on = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _forget_sharding_plans() -> None:
    """Empty DTensor's sharding-propagation caches.  They key on the device mesh by its shape and ranks and
    hand back the mesh they first saw: a later fake world with an equal mesh (the next pipeline rank's trace)
    would get specs that name the destroyed world's process groups ("Could not resolve the process group")."""
    import torch
    from torch.distributed.tensor import DTensor

    clear_native = getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", None)  # the C++ fast path's
    if clear_native is not None:
        clear_native()
    propagator = DTensor._op_dispatcher.sharding_propagator
    for name in ("propagate_op_sharding", "_propagate_tensor_meta_cached"):
        cache = getattr(propagator, name, None)
        if hasattr(cache, "cache_clear"):
            cache.cache_clear()
