"""NVIDIA devices through NVML's own Python bindings (`nvidia-ml-py`, imported as `pynvml`; optional).

Without the bindings, or without a driver, there is no GPU state and `open_nvml` says why in one line (the
result's gpu_note).  Each query that a device or driver does not support leaves its field None: a missing
number is never a failed run.  The bindings are passed in (`nvml`), so the tests drive this module with a
stand-in on machines without a GPU.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from suite.machine import proc
from suite.machine.state import Competitor, GpuState

# NVML's clocks-event (throttle) reason bits (nvml.h, nvmlClocksEventReason*): the ones that mean the device
# was held below the clock it could run at.  GpuIdle (0x1) and the application / display clock settings
# (0x2, 0x100) say nothing about a slowdown and are left out.
THROTTLE_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
                 0x40: "hw_thermal", 0x80: "hw_power_brake"}
NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 1, 0


def open_nvml() -> tuple[Any | None, str | None]:
    """(the initialised bindings, None), or (None, why there are none)."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        return None, "no GPU state: NVML's bindings are not installed (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:  # and its many subclasses (no driver, no device): say which
        return None, f"no GPU state: NVML did not start ({type(exc).__name__}: {str(exc)[:150]})"
    return nvml, None


def close_nvml(nvml: Any) -> None:
    """Undo open_nvml's nvmlInit (NVML counts them)."""
    _ask(nvml, nvml.nvmlShutdown)


def _ask(nvml: Any, call: Callable[[], Any]) -> Any:
    """One NVML query; None when the device or driver does not support it (any NVMLError)."""
    try:
        return call()
    except nvml.NVMLError:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return (value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))[:200]


def throttle_reasons(mask: int | None) -> list[str]:
    return [] if mask is None else [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def gpu_states(nvml: Any, ours: Callable[[int], bool]) -> list[GpuState]:
    """Every device now; processes on a device for which ours(pid) is False are listed as others."""
    count = _ask(nvml, nvml.nvmlDeviceGetCount) or 0
    driver = _text(_ask(nvml, nvml.nvmlSystemGetDriverVersion))
    out = []
    for i in range(min(int(count), 1024)):
        h = _ask(nvml, lambda: nvml.nvmlDeviceGetHandleByIndex(i))
        if h is None:
            continue
        power = _ask(nvml, lambda: nvml.nvmlDeviceGetPowerUsage(h))
        limit = _ask(nvml, lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h))
        util = _ask(nvml, lambda: nvml.nvmlDeviceGetUtilizationRates(h))
        reasons_call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons")
        procs = _ask(nvml, lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h)) or []
        others = [Competitor(pid=p.pid, name=proc.name(p.pid), cpu=0.0) for p in procs if not ours(p.pid)][:64]
        out.append(GpuState(
            index=i, name=_text(_ask(nvml, lambda: nvml.nvmlDeviceGetName(h))) or "?", driver=driver,
            sm_clock_mhz=_ask(nvml, lambda: nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM)),
            max_sm_clock_mhz=_ask(nvml, lambda: nvml.nvmlDeviceGetMaxClockInfo(h, NVML_CLOCK_SM)),
            mem_clock_mhz=_ask(nvml, lambda: nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_MEM)),
            power_w=None if power is None else power / 1000, power_limit_w=None if limit is None else limit / 1000,
            temperature_c=_ask(nvml, lambda: nvml.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)),
            utilization_pct=None if util is None else float(util.gpu),
            throttle_reasons=throttle_reasons(_ask(nvml, lambda: reasons_call(h))),
            ecc_errors=_ask(nvml, lambda: nvml.nvmlDeviceGetTotalEccErrors(
                h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)),
            other_processes=others))
    return out
