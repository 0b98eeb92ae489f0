"""The gates of a scenario's `convergence:` block, as pydantic models (the checks are suite/gates/loss.py,
quality.py and band.py).

- MatchGate: the loss curve and the gradient-norm curve equal the curves of the cell that differs only in one
  axis (`{strategy: ddp}`);
- BandGate: the held-out curve stays inside the seed band of the reference cells (`{reference: {strategy:
  ddp}, k: 3}`): MLPerf's reference-convergence-point idea, checked at every evaluation of a short run;
- Convergence: the block itself, loss gates and held-out quality gates together.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from suite.axes import AXES
from suite.scenario.data import Target
from suite.scenario.fields import resolve_alias, Strict
from suite.scenario.yaml_loader import clip


# The gradient-norm curve's default relative tolerance per step, by precision (MatchGate.grad_rtol unset).
# Measured on the 2-core development machine (docs/convergence.md, "The gradient-norm curve"), gpt-tiny, 2 gloo
# ranks.  fp32: every strategy's global gradient norm equals the 1-rank DDP reference's to at most 5.4e-8
# relative per step over smoke's 30 steps (the 2-rank strategies equal DDP's to 1e-15), so 1e-5 leaves 180x
# headroom, while a doubled gradient is off by 1.0 and a skipped synchronisation by 0.41 to 1.0 at its step.
# bf16-mixed (CPU, 6 steps): the autocast strategies (ddp, zero1, scratch-dp*) equal DDP's bf16 curve; those
# that compute with 16-bit parameters (FSDP2's MixedPrecisionPolicy, the hand-written ZeRO's 16-bit buffers)
# differ from it by up to 4.4e-2 per step, growing with the steps (DDP bf16 vs fp32: 4.6e-3), so 1e-1: 2x
# headroom, still under the faults' 0.4 to 1.0.  fp16-mixed: bf16's, not measured separately.
GRAD_RTOL = {"fp32": 1.0e-5, "bf16-mixed": 1.0e-1, "fp16-mixed": 1.0e-1}
# The loss curve's default relative tolerance per step, by precision (MatchGate.rtol unset), measured by
# scripts/loss-tolerance (results/tolerances/: gpt-tiny, smoke's settings, 2 gloo ranks, 30 steps).  fp32:
# every strategy's curve equals 2-rank DDP's exactly and 1-rank DDP's to 1.2e-7, so 1e-5 (86x headroom).
# bf16-mixed: the autocast strategies (ddp, zero1, scratch-dp*) equal DDP's bf16 curve exactly; those that
# compute with 16-bit parameters (FSDP2's MixedPrecisionPolicy, the hand-written ZeRO) differ from it by up
# to 5.7e-4 after 30 steps (6.9e-5 after 6: it grows with the steps; bf16 vs fp32 DDP: 1.75e-4), so 5e-3 -
# room for runs several times longer; gradient bugs are the gradient-norm curve's to catch.  fp16: bf16's.
LOSS_RTOL = {"fp32": 1.0e-5, "bf16-mixed": 5.0e-3, "fp16-mixed": 5.0e-3}
_TOLERANCES = ("rtol", "atol", "grad_rtol", "grad_atol")


class MatchGate(Strict):
    """Loss and gradient-norm curves must match the cell that differs only in one axis, e.g. {strategy: ddp,
    rtol: 1e-4}.  The gradient-norm curve (the global norm of the gradient each step applied) shows what the
    loss curve cannot under Adam: doubled or unsynchronized gradients (docs/convergence.md)."""

    axis: str = Field(description="The axis that differs (written as its key in the file: `strategy: ddp`).")
    value: Any = Field(description="The reference cell's value on that axis.")
    rtol: float | None = Field(
        None, ge=0, description="Relative tolerance per step of the loss curve; unset: by precision, fp32 1e-5, "
        "bf16-mixed and fp16-mixed 5e-3 (measured, see docs/convergence.md).")
    atol: float = Field(0.0, ge=0, description="Absolute tolerance per step of the loss curve.")
    grad_rtol: float | None = Field(
        None, ge=0, description="Relative tolerance per step of the gradient-norm curve; unset: by precision, "
        "fp32 1e-5, bf16-mixed and fp16-mixed 1e-1 (measured, see docs/convergence.md).")
    grad_atol: float = Field(0.0, ge=0, description="Absolute tolerance per step of the gradient-norm curve.")

    def loss_tolerance(self, *precisions: str) -> float:
        """rtol, or the loosest default of the precisions compared."""
        if self.rtol is not None:
            return self.rtol
        return max(LOSS_RTOL.get(p, max(LOSS_RTOL.values())) for p in precisions or ("fp32",))

    def grad_tolerance(self, *precisions: str) -> float:
        """grad_rtol, or the loosest default of the precisions compared (a bf16 cell against an fp32 one: bf16's)."""
        if self.grad_rtol is not None:
            return self.grad_rtol
        return max(GRAD_RTOL.get(p, max(GRAD_RTOL.values())) for p in precisions or ("fp32",))

    @model_validator(mode="before")
    @classmethod
    def _from_mapping(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "axis" not in data:
            rest = {k: v for k, v in data.items() if k not in _TOLERANCES}
            if len(rest) != 1:
                # key=str: YAML keys may mix types (`1: a, b: c`), which sorted() alone cannot order
                got = clip(repr(sorted(rest, key=str))) if rest else "none"
                raise ValueError(f"match needs exactly one axis key besides {'/'.join(_TOLERANCES)}, got {got}")
            (axis, value), = rest.items()
            data = {"axis": axis, "value": value, **{k: data[k] for k in _TOLERANCES if k in data}}
        if data.get("axis") == "strategy":  # aliases are resolved here, once (fsdp -> zero3)
            data = {**data, "value": resolve_alias(data.get("value"))}
        return data

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> Any:
        # Files write the short form {strategy: ddp, rtol: ...}; without this the exported schema would only
        # allow {axis, value} and an editor would flag every shipped match gate as invalid.
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        for axis in AXES:
            target["properties"][axis] = {"description": f"Short form: the reference cell's {axis}."}
        target.pop("required", None)
        target["minProperties"] = 1
        return schema

    @field_validator("axis")
    @classmethod
    def _known_axis(cls, axis: str) -> str:
        if axis not in AXES:
            raise ValueError(f"match axis {clip(repr(axis))} is not an axis; axes: {', '.join(AXES)}")
        return axis


class BandGate(Strict):
    """The cell's held-out curve must stay inside the band of the reference seeds at every evaluation.

    The reference cells of a cell are those equal to it on every axis except `seed` and the reference axis,
    which holds the reference value: with `seed: [0, 1, 2, 3]`, `strategy: [ddp, zero3]` and `reference:
    {strategy: ddp}`, ZeRO-3 with seed s is judged against DDP's four seeds.  At each evaluation step the
    band is mean +- (k x std + atol) of the reference values (sample std, n-1), and the cell's value must lie
    inside it.  Reference cells are the band and pass.  Needs eval: and at least two seeds."""

    axis: str = Field(description="The reference axis (written `reference: {strategy: ddp}`).")
    value: Any = Field(description="The reference cells' value on that axis.")
    k: float = Field(3.0, gt=0, le=1000, description="Half-width of the band in reference standard deviations.")
    atol: float = Field(0.0, ge=0, description="Added to the half-width: a floor for seeds that agree exactly.")
    metric: Literal["eval_loss", "accuracy", "perplexity"] = Field(
        "eval_loss", description="The held-out metric the band is drawn on (accuracy: vit only).")

    @model_validator(mode="before")
    @classmethod
    def _from_reference(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "axis" in data:
            return data
        if "reference" not in data:
            raise ValueError("band needs reference: {<axis>: <value>}, e.g. band: {reference: {strategy: ddp}, k: 3}")
        ref, rest = data["reference"], {k: v for k, v in data.items() if k != "reference"}
        if not isinstance(ref, dict) or len(ref) != 1:
            raise ValueError(f"band reference must be one axis and its value, e.g. {{strategy: ddp}}; got "
                             f"{clip(repr(ref))}")
        (axis, value), = ref.items()
        return {"axis": axis, "value": resolve_alias(value) if axis == "strategy" else value, **rest}

    @field_validator("axis")
    @classmethod
    def _known_axis(cls, axis: str) -> str:
        if axis == "seed":
            raise ValueError("band reference axis cannot be seed: the band is drawn over the seeds; name the axis "
                             "whose value gives the reference cells, e.g. {strategy: ddp}")
        if axis not in AXES:
            raise ValueError(f"band reference axis {clip(repr(axis))} is not an axis; axes: {', '.join(AXES)}")
        return axis


class Convergence(Strict):
    """Optional gates a cell must pass after it ran; a cell that fails one is `gate-failed`."""

    min_loss_drop: float | None = Field(None, description="First-minus-last loss must be at least this.")
    max_final_loss: float | None = Field(None, description="The last loss must be at most this.")
    match: MatchGate | None = Field(None, description="Curve must match the cell differing only in one axis.")
    max_eval_loss: float | None = Field(None, description="The last held-out loss must be at most this (needs eval:).")
    min_accuracy: float | None = Field(
        None, ge=0, le=1, description="The last held-out accuracy must be at least this (vit; needs eval:).")
    band: BandGate | None = Field(None, description="The held-out curve must stay inside the reference seeds' "
                                  "band, e.g. {reference: {strategy: ddp}, k: 3} (needs eval: and a seed axis).")
    target: Target | None = Field(None, description="A held-out quality target to reach within steps; records the "
                                  "step and the time it took (needs eval:).")

    def quality(self) -> list[str]:
        """The gates set here that judge held-out evaluations."""
        return [k for k in ("max_eval_loss", "min_accuracy", "target", "band") if getattr(self, k) is not None]
