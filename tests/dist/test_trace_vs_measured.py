"""The traced peak against the measured one: the same cells traced on fake tensors (suite/plan/trace.py) and
run on 2 real gloo ranks with the MemTracker peaks pass (measure_peaks), fp32.

What must hold: the traced static categories equal the bytes the real run counts (count_bytes), exactly,
and the traced peak is within 5% of the measured MemTracker peak (or 5% of it less one all-gather buffer that
gloo let go of late: suite/testing/peaks.py).  A representative slice runs here (every
strategy once, llama's selective for seven of them, each checkpointing policy for several, gpt and llama);
scripts/trace-vs-measured runs the whole product (every strategy x none/selective/full x gpt/llama) and its
numbers are in results/traces/.

Known gap: scratch-zero2's measured peak is 12.5% above its trace on gloo (traced / measured = 0.889 for every
checkpointing mode and both models).  The cause is the backend: gloo's reduce-scatter stages the input in a
buffer of its own, which appears (as a tensor torch's tracker sees) when the collective is waited on — a
1000-element reduce-scatter peaks at 10,000 bytes on gloo and 6,000 on the fake group.  The same code with
real tensors on the fake process group peaks exactly where the fake-tensor trace does, so the trace is
faithful to the code; NCCL reduce-scatters into the output without such a buffer.  The band is pinned, so a
change either way shows up.
"""

from __future__ import annotations

import pytest

from suite.plan.trace import trace_cell
from suite.strategies import registry
from suite.testing.builders import make_cell
from suite.testing.peaks import peak_matches_trace
from suite.testing.spawn import run_group

TOLERANCE = 0.05
KNOWN_GAP = {"scratch-zero2": (0.87, 0.91)}

SLICE = ([("gpt-tiny", s, "none") for s in registry.names()]
         + [("llama-tiny", s, "selective") for s in ("ddp", "zero1", "zero3", "hsdp-offload", "scratch-dp-bucketed",
                                                     "scratch-zero2", "scratch-zero3")]
         + [("llama-tiny", s, "full") for s in ("ddp", "zero2", "zero3", "scratch-zero3")]
         + [("llama-tiny", s, "op-level") for s in ("ddp", "zero1", "zero2", "zero3", "scratch-zero3")]
         + [("gpt-tiny", s, "every-2") for s in ("ddp", "zero2", "zero3")])


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    cells = [make_cell(model=m, strategy=s, activation_checkpointing=c, measure_peaks=True, steps=2,
                       warmup_steps=0) for m, s, c in SLICE]
    records = run_group(cells, tmp_path_factory.mktemp("trace-vs-measured"))
    return [(cell, next(r for r in records[cell.id] if r.rank == 0)) for cell in cells]


def test_traced_matches_measured(measured):
    problems, ratios = [], {}
    for cell, record in measured:
        assert record.status == "ok", record.error
        trace = trace_cell(cell)
        label = f"{cell.model.preset} {cell.strategy} {cell.activation_checkpointing}"
        if trace.counted != record.tensor_bytes.model_dump():
            problems.append(f"{label}: traced counted {trace.counted} != measured {record.tensor_bytes}")
        ratio = trace.peak / record.peaks.total
        ratios[label] = ratio
        if cell.strategy in KNOWN_GAP:
            low, high = KNOWN_GAP[cell.strategy]
            outside = not low <= ratio <= high
        else:  # within 5%, or that plus one late all-gather buffer (suite/testing/peaks.py)
            low, high = 1 - TOLERANCE, 1 + TOLERANCE
            outside = not peak_matches_trace(record.peaks.total, trace.peak, cell, TOLERANCE)
        if outside:
            problems.append(f"{label}: traced/measured peak {ratio:.4f} outside [{low}, {high}] "
                            f"(traced {trace.peak}, measured {record.peaks.total})")
    assert not problems, "\n".join(problems)
    assert len(ratios) == len(SLICE)
