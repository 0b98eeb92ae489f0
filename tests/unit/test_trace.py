"""The memory trace (suite/plan/trace.py): what it refuses, what it caches, and its place in `suite plan`.

The comparison with measured peaks of real 2-rank runs is tests/dist/test_trace_vs_measured.py."""

from __future__ import annotations

import json
import sys

import pytest

from suite.plan import predict
from suite.plan.search import max_micro_batch
from suite.plan.trace import TraceError, check_traceable, trace_cell, trace_key
from suite.plan.trace_cache import TraceCache
from suite.plan.trace_record import Trace, TraceFailure
from suite.strategies import registry
from suite.testing.builders import make_cell

TINY = dict(model="gpt-tiny", seq_len=32, micro_batch_size=2, global_batch_size=4, gpus=2)


def test_trace_key_ignores_what_does_not_change_memory():
    base = make_cell(**TINY)
    assert trace_key(base) == trace_key(make_cell(**TINY, steps=9, seed=3, optimizer={"lr": 1e-2}))
    assert trace_key(base) != trace_key(make_cell(**TINY, strategy="zero3"))
    assert trace_key(base) != trace_key(make_cell(**{**TINY, "micro_batch_size": 1}))
    # accumulation beyond 2 micro-batches is a steady state: 4 and 8 trace alike, 1 does not
    four, eight = (make_cell(**{**TINY, "micro_batch_size": 1, "global_batch_size": g}) for g in (8, 16))
    one = make_cell(**{**TINY, "micro_batch_size": 1, "global_batch_size": 2})
    assert trace_key(four) == trace_key(eight) != trace_key(one)


def _fake_trace(peak_of):
    def trace(cell):
        return Trace(peak=peak_of(cell), at_peak={}, labels_at_peak={}, category_peaks={}, counted={},
                     tracker="MemTracker", world=cell.gpus, steps=2, micro_batches=1, device="cpu",
                     attention_kernel=None, seconds=0.0, torch="x")
    return trace


def test_cache_traces_each_shape_once():
    cells = [make_cell(**TINY, seed=i % 500, strategy=["ddp", "zero3"][i % 2]) for i in range(1000)]
    cache = TraceCache(_fake_trace(lambda c: 1))
    for cell in cells:
        cache.get(cell)
    assert cache.traced == 2


def test_plan_of_1000_cells_traces_two_shapes(benchmark):
    """The real tracer behind the cache: 1,000 cells of 2 shapes cost 2 traces (a few seconds here)."""
    from suite.plan.rows import plan_rows

    cells = [make_cell(**TINY, seed=i, strategy=["ddp", "zero3"][i % 2]) for i in range(1000)]

    def plan():
        cache = TraceCache()
        return cache, plan_rows(cells, cache.get)

    cache, rows = benchmark.pedantic(plan, rounds=1, iterations=1)
    assert cache.traced == 2
    assert all(r["fits_by"] == "traced" for r in rows) and len({r["traced"]["peak"] for r in rows}) == 2


def test_untraceable_strategy_is_refused_by_name(tmp_path, monkeypatch):
    (tmp_path / "host_reader.py").write_text(
        "from suite.strategies.scratch.dp import apply as dp\n"
        "def apply(model, mesh, policy, device):\n"
        "    float(next(model.parameters()).sum())  # reads a value on the host: fake tensors have none\n"
        "    return dp(model, mesh, policy, device)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.register(registry.StrategySpec("host-reader", "dp", "host_reader:apply", registry.Comm(2), "test"))
    registry.register(registry.StrategySpec("opaque", "dp", "host_reader:apply", registry.Comm(2), "test",
                                            traceable=False))
    try:
        with pytest.raises(TraceError, match="while applying checkpointing and strategy host-reader: the code reads "
                                             "a tensor's value on the host"):
            trace_cell(make_cell(**TINY, strategy="host-reader"))
        with pytest.raises(TraceError, match="opaque is registered with traceable=False"):
            check_traceable(make_cell(**TINY, strategy="opaque"))
        # in a plan: the row says why and `fits` falls back to the as-implemented model, saying so
        failure = TraceCache().get(make_cell(**TINY, strategy="host-reader", gpu_memory_gb=1))
        assert isinstance(failure, TraceFailure)
        p = predict(make_cell(**TINY, strategy="host-reader", gpu_memory_gb=1), failure)
        assert p.traced is None and "host-reader" in p.trace_error and p.fits_by == "as-implemented"
    finally:
        registry.unregister("host-reader")
        registry.unregister("opaque")


def test_model_too_large_to_build_is_refused():
    deep = make_cell(**{**TINY, "model": {"family": "gpt", "layers": 600, "hidden": 64, "heads": 4, "vocab": 256,
                                          "max_seq_len": 64}})
    with pytest.raises(TraceError, match="600 layers; a full trace builds every layer and handles at most 512"):
        check_traceable(deep)


def test_trace_refuses_inside_a_process_group():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(TraceError, match="process group already exists"):
            trace_cell(make_cell(**TINY))
    finally:
        dist.destroy_process_group()


def test_max_micro_batch_bisects_to_the_largest_fit():
    cell = make_cell(**TINY, gpu_memory_gb=1.0)
    cache = TraceCache(_fake_trace(lambda c: 100e6 * c.micro_batch_size))  # 100 MB per sample
    answer = max_micro_batch(cell, cache.get, headroom=0.1)  # limit 900 MB
    assert answer.micro_batch_size == 9 and answer.peak == 900e6 and answer.limit == pytest.approx(900e6)
    assert [m for m, _ in answer.traces] == [1, 2, 4, 8, 16, 12, 10, 9]
    assert answer.next_micro_batch == 10 and answer.next_peak == 1000e6  # the first misfit, and by how much
    none = max_micro_batch(cell.model_copy(update={"gpu_memory_gb": 0.05}), cache.get, headroom=0.1)
    assert none.micro_batch_size is None
    with pytest.raises(ValueError, match="--headroom 1 must be at least 0 and below 1"):
        max_micro_batch(cell, cache.get, headroom=1.0)
    with pytest.raises(ValueError, match="needs the device's size: set gpu_memory_gb"):
        max_micro_batch(make_cell(**TINY), cache.get, headroom=0.1)


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nmodel: gpt-tiny\nseq_len: 32\nstrategy: [ddp, zero3]\nactivation_checkpointing: full\n"
                    "gpus: 2\nmicro_batch_size: 2\nglobal_batch_size: 4\ngpu_memory_gb: 0.004\n")
    return path


def test_plan_trace_cli_json_and_table(cli, scenario):
    result = cli("plan", scenario, "--trace", "--max-micro-batch", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    for r in rows:
        assert r["fits_by"] == "traced" and r["fits_bytes"] == r["traced"]["peak"] > 0
        assert r["traced"]["counted"]["parameters"] > 0 and r["traced"]["world"] == 2
        assert r["max_micro_batch"]["micro_batch_size"] >= 2 and r["max_micro_batch"]["peak"] <= 0.9 * 0.004e9
    table = cli("plan", scenario, "--trace")
    assert table.exit_code == 0 and "traced peak" in table.stdout and "yes (traced)" in table.stdout


@pytest.mark.parametrize("args,message", [
    (["--no-trace", "--max-micro-batch"], "--max-micro-batch searches over traces: drop --no-trace"),
    (["--trace", "--max-micro-batch", "--headroom", "1.5"], "--headroom 1.5 must be at least 0 and below 1"),
    (["--tracee"], "No such option"),
    (["--trace", "--headroom", "0.2"], "--headroom applies to --max-micro-batch only"),
])
def test_plan_bad_requests_exit_2(cli, scenario, args, message):
    result = cli("plan", scenario, *args)
    assert result.exit_code == 2 and message in result.output


def test_planner_without_trace_needs_no_torch():
    import subprocess

    code = ("import sys; from suite.scenario.expand import load_cells; from suite.plan.rows import plan_rows; "
            "from suite.plan.trace import trace_key; cells = load_cells('scenarios/trace-llama3-8b.yaml')[1]; "
            "plan_rows(cells); [trace_key(c) for c in cells]; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_max_micro_batch_without_device_size_is_refused_before_tracing(cli, tmp_path, monkeypatch):
    from suite.plan import trace as trace_mod

    monkeypatch.setattr(trace_mod, "trace_cell", lambda cell: pytest.fail("traced before the request was checked"))
    path = tmp_path / "unsized.yaml"
    path.write_text("name: u\nmodel: gpt-tiny\nseq_len: 32\ngpus: 2\nmicro_batch_size: 2\nglobal_batch_size: 4\n")
    result = cli("plan", path, "--trace", "--max-micro-batch")
    assert result.exit_code == 2 and "set gpu_memory_gb in the scenario (1 of 1 cells have none)" in result.output


@pytest.mark.parametrize("model,strategy,precision", [
    ("vit-cifar10", "zero3", "fp16-mixed"), ("vit-cifar10", "scratch-dp-bucketed", "bf16-mixed"),
    ("llama-tiny", "scratch-zero3", "fp16-mixed"), ("gpt-tiny", "zero2", "bf16-mixed"),
])
def test_every_family_and_precision_traces(model, strategy, precision):
    extra = {"seq_len": 65} if model == "vit-cifar10" else {}
    cell = make_cell(**{**TINY, **extra, "model": model}, strategy=strategy, precision=precision,
                     activation_checkpointing="selective")
    trace = trace_cell(cell)
    assert trace.peak > sum(trace.counted[k] for k in ("parameters", "gradients", "optimizer_states")) > 0
    assert trace.at_peak["activations"] + trace.at_peak["temporaries"] >= 0 and trace.world == 2
    assert trace.attention_kernel is not None and "attention" in trace.attention_kernel
    assert any(n.startswith("fp16: GradScaler disabled") for n in trace.notes) == (precision == "fp16-mixed")


def test_notes_that_depend_on_the_cell_are_added_after_the_cache():
    """Cells sharing a trace differ in compile, accumulation beyond 2 and a fused optimizer: each gets its own."""
    cache = TraceCache(_fake_trace(lambda c: 1))
    plain = make_cell(**{**TINY, "micro_batch_size": 1, "global_batch_size": 4}, device="cpu")
    other = make_cell(**{**TINY, "micro_batch_size": 1, "global_batch_size": 16}, device="cuda", compile=True)
    assert trace_key(plain) == trace_key(other)
    assert cache.get(plain).notes == []
    notes = cache.get(other).notes
    assert cache.traced == 1 and len(notes) == 3
    assert any("compile: off" in n for n in notes) and any("2 of the cell's 8 micro-batches" in n for n in notes)
    assert any("foreach implementation" in n for n in notes) and cache.get(plain).notes == []


def test_disk_cache_answers_a_second_plan_and_survives_hostile_files(tmp_path):
    """A trace is kept on disk: a new cache (a second `suite plan`) reads it instead of tracing; a damaged or
    oversized file is a miss that is counted and overwritten, never an error."""
    from suite.plan.trace_cache import MAX_ENTRY_BYTES, disk_key

    cell = make_cell(**TINY)
    first = TraceCache(_fake_trace(lambda c: 7), disk=tmp_path)
    assert first.get(cell).peak == 7 and first.counts["traced"] == 1
    second = TraceCache(_fake_trace(lambda c: pytest.fail("traced although the disk has it")), disk=tmp_path)
    assert second.has(cell) and second.get(cell).peak == 7 and second.counts == {**second.counts, "disk": 1}
    path = tmp_path / "traces" / f"{disk_key(cell)}.json"
    for hostile in (b"{not json", b'{"format": 1, "trace": {"peak": "x"}}', b"[" * 100_000,
                    b" " * (MAX_ENTRY_BYTES + 1)):
        path.write_bytes(hostile)
        third = TraceCache(_fake_trace(lambda c: 9), disk=tmp_path)
        assert third.get(cell).peak == 9 and third.counts["unreadable"] == 1 and third.counts["traced"] == 1
        assert json.loads(path.read_text())["trace"]["peak"] == 9  # overwritten by the new trace


def test_disk_key_changes_with_the_shape_only():
    from suite.plan.trace_cache import disk_key

    assert disk_key(make_cell(**TINY)) == disk_key(make_cell(**TINY, seed=4))
    assert disk_key(make_cell(**TINY)) != disk_key(make_cell(**TINY, strategy="zero3"))


def _first_adamw_step_peak(fake: bool) -> int:
    """torch's MemTracker's peak over AdamW's first step on one 4096 x 1024 parameter sharded on 4 ranks, on
    fake tensors inside the trace's own contexts, or on real ones."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from suite.plan.fake_world import fake_world, propagation_apart

    with fake_world(4):
        mesh = init_device_mesh("cpu", (4,))
        with propagation_apart(), (FakeTensorMode(allow_non_fake_inputs=True) if fake else torch.enable_grad()):
            w = torch.nn.Parameter(distribute_tensor(torch.empty(4096, 1024), mesh, [Shard(0)]))
            w.grad = distribute_tensor(torch.empty(4096, 1024), mesh, [Shard(0)])
            opt = torch.optim.AdamW([w], foreach=False)
            tracker = MemTracker()
            tracker.track_external(w, opt)
            with tracker:
                opt.step()
            peak = tracker.get_tracker_snapshot("peak")
            return next(snap["Total"] for dev, snap in peak.items() if str(dev) == "cpu")


def test_dtensors_shape_propagation_is_not_counted_as_a_ranks_memory():
    """DTensor learns an operator's output shape by running it once on fake tensors of the global shapes, in
    whatever fake mode is active: in the trace's own, the tracker would count them as the rank's (67.1 MB here
    against 21.0 MB real: a parameter's local 4 MiB and AdamW's two states, where the global tensors are 4x).
    `propagation_apart` gives DTensor a mode of its own, as in a real run: fake and real agree."""
    fake, real = _first_adamw_step_peak(True), _first_adamw_step_peak(False)
    assert real == pytest.approx(21.0e6, rel=0.01)
    assert fake == real


def test_a_deep_copy_under_the_trace_stays_in_the_traces_fake_mode():
    """copy.deepcopy copies a fake tensor's mode with it; an interleaved pipeline rank cuts its chunks from
    copies of the model, and tensors of two modes mixed broke the 405B interleaved trace (SIGSEGV).  Inside
    `copies_keep_the_mode` the copy shares the trace's mode; outside it torch's behaviour is back."""
    import copy

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from suite.plan.fake_world import copies_keep_the_mode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        layer = torch.nn.Linear(4, 4)
        with copies_keep_the_mode():
            kept = copy.deepcopy(layer)
        apart = copy.deepcopy(layer)
    assert kept.weight.fake_mode is mode and kept.weight is not layer.weight
    assert apart.weight.fake_mode is not mode  # torch's own deepcopy, restored


def test_a_mesh_built_inside_the_trace_is_real():
    """FSDP2 joins its mesh with tensor parallelism's inside `fully_shard` (DeviceMesh._concatenate), and a mesh
    computes this rank's coordinates with `nonzero`, which a fake tensor cannot answer: `meshes_real` builds
    every mesh outside the fake mode, and only that."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    from suite.plan.fake_world import fake_world, meshes_real

    init = DeviceMesh.__init__
    with fake_world(4):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        with meshes_real(), FakeTensorMode(allow_non_fake_inputs=True):
            joined = DeviceMesh._concatenate([mesh["dp"], mesh["tp"]])
            assert isinstance(torch.empty(1), FakeTensor)  # the fake mode is still on around the mesh
        assert list(joined.get_coordinate()) == [0, 0]
    assert DeviceMesh.__init__ is init


def test_a_pipelines_send_holds_its_tensor_while_its_work_lives():
    """A gloo or NCCL work holds the tensor it sends; the fake process group's holds nothing, and PyTorch's
    runtime schedules keep every send's work to the end of the step: inside `sends_held_by_their_works` the
    schedules' works hold their tensors as a real rank's do (the ranks' real interleaved peaks, measured in
    tests/dist/test_pipeline_parallel.py, depend on it)."""
    import gc
    import weakref

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import schedules

    from suite.plan.fake_world import fake_world, sends_held_by_their_works

    batch = schedules._batch_p2p
    with fake_world(2):
        def sent():
            t = torch.ones(8)
            gone = weakref.ref(t)
            works = schedules._batch_p2p([dist.P2POp(dist.isend, t, 1)])
            del t
            gc.collect()
            alive = gone() is not None
            schedules._wait_batch_p2p(works)
            del works
            gc.collect()
            return alive, gone() is not None

        with sends_held_by_their_works():
            assert sent() == (True, False)  # held while the work lives, freed with it
        assert sent() == (False, False)  # the fake group's own work: nothing held
    assert schedules._batch_p2p is batch
