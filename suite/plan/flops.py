"""Training FLOPs per token and MFU accounting (../shared/reference.md).

FLOPs per token = 6 Psi (forward + backward of every weight, dense) + 12 L h s (attention scores and the
weighted sum, forward and backward, with no causal discount).  Recomputation is not counted: it is hardware
work, not model work (HFU, not MFU).
"""

from __future__ import annotations

# Dense bf16/fp16 peaks from vendor datasheets, FLOP/s.  The key is matched against the device name.
PEAK_BF16_FLOPS = {
    "H200": 989e12,
    "H100 SXM": 989e12,
    "H100 80GB HBM3": 989e12,
    "H100 PCIe": 756e12,
    "A100": 312e12,
    "B200": 2250e12,
    "L40S": 362e12,
    "L4": 121e12,
}
PEAK_SOURCE = "vendor datasheet dense bf16 peak (../shared/reference.md)"


def flops_per_token(shape, seq_len: int) -> float:
    """6 Psi + 12 L h s; a model of your own whose width suite does not know (family: python) counts 6 Psi
    alone, a floor (its attention, if any, uncounted)."""
    layers, hidden = getattr(shape, "layers", None), getattr(shape, "hidden", None)
    attention = 12 * layers * hidden * seq_len if layers and hidden else 0
    return 6 * shape.num_parameters() + attention


def peak_flops(device_name: str | None, precision: str) -> float | None:
    """Peak dense FLOP/s for the precision used, or None: an unknown device (or a CPU) has no MFU."""
    if not device_name or precision == "fp32":
        return None  # fp32 peaks differ per device and are not tabulated; no borrowed number
    for key, peak in PEAK_BF16_FLOPS.items():
        if key in device_name:
            return peak
    return None
