"""What a machine was doing while a cell was timed: the records a result stores (CellResult.machine).

A snapshot is taken just before a launch and just after it; between them a sampler reads the machine every
interval, and the window that matters is the timed steps (the training phase: from the worker's "setup done" to
the end of training) when the worker reported it, else the whole launch.  Competing CPU is counted in CPUs
(CPU-seconds per second of the window): 1.0 is one core kept busy by processes that are not the launch's.
Every number is bounded: a stored result is data from a stranger.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Cpus = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]
Mhz = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]
Watts = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, le=1e10, allow_inf_nan=False)]
Name = Annotated[str, Field(max_length=200)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Competitor(_Record):
    """A process outside the launch that used CPU time during the window."""

    pid: int = Field(ge=0, description="Process id on the machine that ran the cell.")
    name: Name = Field(description="The process's command name (/proc/PID/comm), at most 200 characters.")
    cpu: Cpus = Field(description="Its CPU time over the window's length: CPUs it kept busy on average.")


class GpuState(_Record):
    """One NVIDIA device as NVML saw it; None where the device or driver does not say."""

    index: int = Field(ge=0, le=1 << 16, description="NVML's device index.")
    name: Name = Field(description="Device model, e.g. NVIDIA H200.")
    driver: Name | None = Field(None, description="Driver version.")
    sm_clock_mhz: Mhz | None = Field(None, description="Current SM clock.")
    max_sm_clock_mhz: Mhz | None = Field(None, description="The device's maximum SM clock.")
    mem_clock_mhz: Mhz | None = Field(None, description="Current memory clock.")
    power_w: Watts | None = Field(None, description="Power draw.")
    power_limit_w: Watts | None = Field(None, description="Enforced power limit.")
    temperature_c: Annotated[float, Field(ge=-300, le=1000, allow_inf_nan=False)] | None = Field(
        None, description="GPU core temperature, degrees Celsius.")
    utilization_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(None, description="SM busy, percent.")
    throttle_reasons: list[Name] = Field(default_factory=list, max_length=32, description="Why the clocks are held "
                                         "down (NVML's clocks-event reasons, e.g. sw_thermal, hw_slowdown); idle "
                                         "and application-clock settings are not counted.")
    ecc_errors: int | None = Field(None, ge=0, le=1 << 62, description="Volatile uncorrected ECC errors.")
    other_processes: list[Competitor] = Field(default_factory=list, max_length=64, description="Processes using "
                                              "the device that are not the launch's (cpu: 0; pid and name).")


class Snapshot(_Record):
    """The machine at one moment (before or after a launch)."""

    at: Seconds = Field(description="Unix time of the snapshot.")
    loadavg: tuple[Cpus, Cpus, Cpus] | None = Field(None, description="/proc/loadavg: 1, 5 and 15 minutes (it "
                                                    "counts the launch's own processes too).")
    cpu_count: int = Field(ge=1, le=1 << 20, description="Online CPUs.")
    cpu_mhz: Mhz | None = Field(None, description="Mean current CPU clock over the CPUs (cpufreq, else "
                                "/proc/cpuinfo).")
    cpu_max_mhz: Mhz | None = Field(None, description="The CPUs' maximum clock (cpufreq), when known.")
    governor: Name | None = Field(None, description="cpufreq scaling governor of CPU 0 (performance, powersave...).")
    mem_available_bytes: int | None = Field(None, ge=0, le=1 << 62, description="/proc/meminfo MemAvailable.")
    gpus: list[GpuState] = Field(default_factory=list, max_length=1024, description="NVIDIA devices (NVML).")


class MachineState(_Record):
    """The machine around one timed launch: what competed with it, and how fast the hardware ran."""

    window: Literal["train", "launch"] = Field(description="What the sampled numbers cover: the timed training "
                                               "phase (train) or, when the worker did not report it, the launch.")
    window_s: Seconds = Field(description="Length of that window.")
    interval_s: Seconds = Field(description="Sampling interval.")
    samples: int = Field(ge=0, le=1 << 40, description="Samples taken in the window.")
    competing_cpu: Cpus = Field(description="CPUs kept busy by processes outside the launch, averaged over the "
                                "window (processes that are neither the runner's descendants nor name the "
                                "launch's work folder).")
    competing_cpu_peak: Cpus = Field(description="The same for the busiest sampling interval.")
    competitors: list[Competitor] = Field(default_factory=list, max_length=16, description="The busiest of them "
                                          "(at most 5 are recorded), busiest first.")
    cpu_mhz_min: Mhz | None = Field(None, description="The lowest mean CPU clock sampled in the window.")
    gpu_sm_clock_min_mhz: Mhz | None = Field(None, description="The lowest SM clock of any device in the window.")
    gpu_throttle: list[Name] = Field(default_factory=list, max_length=32, description="Every throttle reason seen "
                                     "on any device in the window.")
    gpu_others: list[Competitor] = Field(default_factory=list, max_length=64, description="Processes not the "
                                         "launch's seen on a device in the window.")
    gpu_note: Name | None = Field(None, description="Why there is no GPU state, when there is none.")
    shared_with: list[Name] = Field(default_factory=list, max_length=256, description="Cells of the same sweep "
                                    "(cell-rK) that ran on this cell's node during the window (suite run "
                                    "--schedule pack on a Ray cluster, suite/sweep/); a timing is timing-grade "
                                    "only when this is empty.")
    before: Snapshot
    after: Snapshot
