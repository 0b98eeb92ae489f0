"""Convergence gates: pure checks of a finished cell's loss curve (the scenario's `convergence:` block).

- finite: every loss is a finite number (always checked for a cell that finished ok).
- min_loss_drop: losses[0] - losses[-1] >= the threshold.
- max_final_loss: losses[-1] <= the threshold.
- match: the curve equals, step by step, the curve of the *reference* cell: the one whose axes are identical
  except that the match axis holds the gate's value (`match: {strategy: ddp}` compares every ZeRO cell with
  the DDP cell of the same model, batch, ...).  Step i passes when |loss - ref| <= atol + rtol x |ref|
  (numpy's isclose).  Strategies, world sizes with the same global batch, and accumulation are the same
  mathematics, so in fp32 they agree to ~1e-5; a cell with a different global batch does not.  The
  gradient-norm curves (the global norm of the gradient each step applied, worker/gradients.py) must match
  too, within grad_rtol / grad_atol (defaults by precision: scenario/convergence.GRAD_RTOL): Adam hides a gradient's
  scale from the loss, not from its norm.  The gate fails at the first step where either curve differs,
  naming the step, both values and the tolerance.  A result from before schema 5 has no gradient norms: the
  loss curves are compared alone and the detail says so.

Reference cells run first (`order_cells`), so their results exist when the others are gated.  A cell whose
reference did not run to the end (failed, timeout, diverged, ...) fails its match gate, and the detail says why.
"""

from __future__ import annotations

import math
from typing import Sequence

from suite.results.schema import Gate
from suite.scenario.references import reference_axes


def is_reference(cell, match) -> bool:
    # match.value is already a strategy's name, not an alias: aliases are resolved when the scenario is validated
    return cell.axes()[match.axis] == match.value


def reference_of(cell, cells: Sequence, match):
    """The cell that differs from `cell` only in the match axis, holding the gate's value (None if absent)."""
    if is_reference(cell, match):
        return None
    want = reference_axes(cell.axes(), match.axis, match.value)
    for other in cells:
        if other.axes() == want:
            return other
    return None


def order_cells(cells: Sequence) -> list:
    """Reference cells of a match or band gate first, the others after, each group in the scenario's order."""
    def is_ref(c) -> bool:  # of a match gate, or one of a seed band's reference cells
        conv = c.convergence
        return conv is not None and any(g is not None and is_reference(c, g) for g in (conv.match, conv.band))

    refs = [c for c in cells if is_ref(c)]
    return refs + [c for c in cells if c not in refs]


def run_order(cells: Sequence, repeats: int | None = None, shuffle: int | None = None) -> list[tuple]:
    """(cell, repeat) in the order a run launches them: interleaved rounds, A0 B0 C0 A1 B1 C1 ...

    Why interleaved: the noise that moves a run's numbers comes in spells (another job on the node, clocks,
    a cache that another process flushed).  Running all of A's repeats and then all of B's would put a slow
    spell on one cell's repeats and make it look slower; round by round, a spell hits every cell alike.
    `shuffle` (a seed) also shuffles the order within each round, so a cell is not always the one that follows
    another (the same seed gives the same order, so --resume finds the same plan).  Reference cells of a match
    gate still run first in every round: repeat r of a cell is gated against repeat r of its reference.
    `repeats` overrides every cell's own count (--repeats)."""
    import random

    counts = [repeats or c.repeats for c in cells]
    plan: list[tuple] = []
    for r in range(max(counts, default=0)):
        round_cells = [c for c, n in zip(cells, counts) if r < n]
        if shuffle is not None:
            random.Random(f"{shuffle}:{r}").shuffle(round_cells)
        plan += [(c, r) for c in order_cells(round_cells)]
    return plan


def finite_gate(losses: Sequence[float]) -> Gate:
    if not losses:
        return Gate(name="finite", passed=False, detail="no losses were recorded", step=0)
    for i, x in enumerate(losses):
        if not math.isfinite(x):
            return Gate(name="finite", passed=False, detail=f"loss at step {i} is {x}", step=i)
    return Gate(name="finite", passed=True, detail=f"all {len(losses)} losses finite")


def min_loss_drop_gate(losses: Sequence[float], threshold: float) -> Gate:
    drop = losses[0] - losses[-1]
    ok = drop >= threshold
    return Gate(name="min_loss_drop", passed=ok, step=None if ok else len(losses) - 1,
                detail=f"loss {losses[0]:.6g} -> {losses[-1]:.6g}: drop {drop:.6g} "
                       f"{'>=' if ok else '<'} required {threshold:.6g}")


def max_final_loss_gate(losses: Sequence[float], threshold: float) -> Gate:
    ok = losses[-1] <= threshold
    return Gate(name="max_final_loss", passed=ok, step=None if ok else len(losses) - 1,
                detail=f"final loss {losses[-1]:.6g} {'<=' if ok else '>'} limit {threshold:.6g}")


def curve_gate(losses: Sequence[float], ref: Sequence[float], rtol: float, atol: float, ref_label: str,
               what: str = "loss", tol: str = "") -> Gate:
    """Step-by-step isclose of two curves; fails at the first step that differs (or a length mismatch).
    `what` names the curve's values in the detail, `tol` prefixes the tolerances' names (grad_: grad_rtol).
    Equal infinities agree (a step fp16's GradScaler skipped on both sides); NaN never does."""
    worst_abs, worst_rel = 0.0, 0.0
    for i, (x, y) in enumerate(zip(losses, ref)):
        if math.isinf(x) and x == y:
            continue
        diff = abs(x - y)
        if not (math.isfinite(x) and math.isfinite(y)) or diff > atol + rtol * abs(y):
            return Gate(name="match", passed=False, step=i,
                        detail=f"step {i}: {what} {x!r} vs {ref_label} {y!r}: |diff| {diff:.3g} > "
                               f"{tol}atol {atol:g} + {tol}rtol {rtol:g} x {abs(y):.6g}")
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / abs(y) if y else 0.0)
    if len(losses) != len(ref):
        n = min(len(losses), len(ref))
        return Gate(name="match", passed=False, step=n,
                    detail=f"{len(losses)} steps vs {len(ref)} steps of {ref_label}"
                           + ("" if what == "loss" else f" ({what}s)"))
    return Gate(name="match", passed=True,
                detail=f"{len(losses)} steps within {tol}rtol {rtol:g} / {tol}atol {atol:g} of {ref_label} "
                       f"(max |diff| {worst_abs:.3g}, max rel {worst_rel:.3g})")


def match_curves(losses: Sequence[float], grad_norms: Sequence[float], ref, match, ref_label: str,
                 precisions: Sequence[str] = ("fp32",)) -> Gate:
    """Both curves of a cell against its reference result `ref` (losses, grad_norms): fails at the earliest step
    where either differs (the gradient norm first on a tie: it moves at the faulty step itself, the loss one
    step later).  Either side without gradient norms (an older result): the losses alone, saying so.  Unset
    tolerances are the loosest defaults of the `precisions` compared (suite/scenario/convergence.py)."""
    loss = curve_gate(losses, ref.losses, match.loss_tolerance(*precisions), match.atol, ref_label)
    grad_rtol = match.grad_tolerance(*precisions)
    if not grad_norms or not ref.grad_norms:
        who = "this cell" if not grad_norms else ref_label
        note = f"; gradient norms not compared: {who} recorded none (a result from before schema 5)"
        return loss.model_copy(update={"detail": loss.detail + note})
    grads = curve_gate(grad_norms, ref.grad_norms, grad_rtol, match.grad_atol, ref_label, "grad norm", "grad_")
    failed = [g for g in (grads, loss) if not g.passed]
    if failed:
        return min(failed, key=lambda g: g.step if g.step is not None else math.inf)
    return Gate(name="match", passed=True, detail=f"loss: {loss.detail}; grad norm: {grads.detail}")


def match_gate(cell, losses: Sequence[float], match, ref_cell, ref_result, grad_norms: Sequence[float] = ()) -> Gate:
    """The match gate of `cell` (its loss and gradient-norm curves), given its reference cell (or None) and that
    cell's result (or None)."""
    want = f"{match.axis}={match.value}"
    if is_reference(cell, match):
        return Gate(name="match", passed=True, detail=f"this cell is the reference ({want})")
    if ref_cell is None:
        return Gate(name="match", passed=False, detail=f"no cell in the scenario differs only in {want}")
    label = f"reference {ref_cell.id} ({want})"
    if ref_result is None:
        return Gate(name="match", passed=False, detail=f"{label} has no result in this run")
    if ref_result.status not in ("ok", "gate-failed"):  # a gate-failed reference still has a whole curve
        why = f": {ref_result.error.strip().splitlines()[0]}" if ref_result.error else ""
        return Gate(name="match", passed=False, detail=f"{label} did not finish ok (status {ref_result.status}{why})")
    return match_curves(losses, grad_norms, ref_result, match, label, (cell.precision, ref_cell.precision))


def loss_gates(losses: Sequence[float], convergence) -> list[Gate]:
    """finite always; min_loss_drop / max_final_loss when the scenario sets them (and the curve is finite)."""
    gates = [finite_gate(losses)]
    if not gates[0].passed or convergence is None:
        return gates
    if convergence.min_loss_drop is not None:
        gates.append(min_loss_drop_gate(losses, convergence.min_loss_drop))
    if convergence.max_final_loss is not None:
        gates.append(max_final_loss_gate(losses, convergence.max_final_loss))
    return gates


def first_failure(gates: Sequence[Gate]) -> Gate | None:
    return next((g for g in gates if not g.passed), None)
