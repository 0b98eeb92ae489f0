"""When a machine is too busy to time on, when two machines differ too much to compare, and what to do.

Stated thresholds (`Thresholds`) turn a MachineState into reasons, each naming the number and its source:

- busy(state):      competing CPU above `competing_cpu` CPUs (naming the busiest processes), a GPU throttled
                    (NVML's reasons), other processes on a GPU;
- differences(a, b): either side busy, or the CPU / GPU clocks, device models or drivers differ by more than
                    the thresholds; None when a side has no recorded state (older results: "unknown").

`QuietPolicy` is `suite run --require-quiet` (and a scenario's `quiet:`): before each timed launch it probes the
machine for a moment and, while it is busy, waits (up to max_wait_s), warns, or refuses, as the user chose.
"""

from __future__ import annotations

import time
from typing import Annotated, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from suite.machine.sampler import Sampler
from suite.machine.state import Competitor, MachineState


class Thresholds(BaseModel):
    """What counts as busy, or as a different machine (docs/machine.md says why these values)."""

    model_config = ConfigDict(extra="forbid")

    competing_cpu: Annotated[float, Field(ge=0, le=1e6)] = Field(
        0.5, description="CPUs kept busy by other processes (averaged over the timed steps) above which the "
        "machine was busy: half a core.  A planted busy loop is 1.0; a quiet machine's daemons stay under 0.1.")
    clock_change: Annotated[float, Field(ge=0, le=10)] = Field(
        0.10, description="A relative difference in the lowest CPU or GPU SM clock sampled above which two "
        "states differ (a throttled or differently set machine).")
    gpu_others: bool = Field(True, description="Other processes on a GPU make it busy.")
    gpu_throttle: bool = Field(True, description="A throttle reason on a GPU (thermal, power, HW slowdown) makes "
                               "it busy.")


def _who(competitors: list[Competitor], limit: int = 3) -> str:
    return ", ".join(f"{c.name} (pid {c.pid}) {c.cpu:.2f}" for c in competitors[:limit]) or "no single process"


def busy(state: MachineState, t: Thresholds | None = None) -> list[str]:
    """Why this state makes a timing untrustworthy (empty: quiet)."""
    t = t or Thresholds()
    out = []
    # first: the sweep's own neighbours are the cause that names itself (their CPU also counts as competing on a
    # loopback cluster, and readers such as compare keep only the first few reasons)
    if state.shared_with:
        out.append(f"shared its node with {len(state.shared_with)} other cell(s) of the sweep during the timed "
                   f"steps: {', '.join(state.shared_with[:3])}{' ...' if len(state.shared_with) > 3 else ''} "
                   f"(--schedule pack)")
    if state.competing_cpu > t.competing_cpu:
        out.append(f"competing CPU load {state.competing_cpu:.2f} CPUs > {t.competing_cpu:.2f} "
                   f"(over {state.window_s:.1f} s of {state.window}; {_who(state.competitors)})")
    if t.gpu_throttle and state.gpu_throttle:
        out.append(f"GPU throttled: {', '.join(state.gpu_throttle)}")
    if t.gpu_others and state.gpu_others:
        out.append("other processes on the GPU: " + ", ".join(f"{c.name} (pid {c.pid})" for c in state.gpu_others[:3]))
    return out


def describe(states: list[MachineState], t: Thresholds | None = None) -> str | None:
    """One line for people on the machine during these repeats: "quiet (others 0.03 CPUs)" or "busy: <why>";
    None when none was recorded (older results)."""
    if not states:
        return None
    reasons = [why for st in states for why in busy(st, t)]
    if reasons:
        return "busy: " + reasons[0] + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "")
    worst = max(st.competing_cpu for st in states)
    return f"quiet (others {worst:.2f} CPUs)"


def _change(a: float | None, b: float | None, limit: float) -> float | None:
    if a is None or b is None or a <= 0:
        return None
    rel = b / a - 1
    return rel if abs(rel) > limit else None


def differences(base: MachineState | None, cur: MachineState | None, t: Thresholds | None = None) -> list[str] | None:
    """What differs between two recorded states beyond the thresholds (empty: alike); None when either side
    has no recorded state."""
    if base is None or cur is None:
        return None
    t = t or Thresholds()
    out = [f"{side}: {why}" for side, state in (("baseline", base), ("current", cur)) for why in busy(state, t)]
    for what, a, b in (("CPU clock", base.cpu_mhz_min, cur.cpu_mhz_min),
                       ("GPU SM clock", base.gpu_sm_clock_min_mhz, cur.gpu_sm_clock_min_mhz)):
        rel = _change(a, b, t.clock_change)
        if rel is not None:
            out.append(f"{what} {a:,.0f} -> {b:,.0f} MHz ({rel:+.0%})")
    for what, key in (("GPU model", lambda g: g.name), ("GPU driver", lambda g: g.driver)):
        a, b = sorted({str(key(g)) for g in base.before.gpus}), sorted({str(key(g)) for g in cur.before.gpus})
        if a and b and a != b:
            out.append(f"{what} {', '.join(a)} -> {', '.join(b)}")
    return out


class QuietPolicy(BaseModel):
    """Check the machine before each timed launch (suite run --require-quiet, or a scenario's `quiet:`)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["wait", "warn", "refuse"] = Field(
        "wait", description="While the machine is busy: wait for it to quiet down (then refuse), only warn, or "
        "refuse at once.")
    max_wait_s: Annotated[float, Field(ge=0, le=86400)] = Field(300.0, description="How long `wait` waits.")
    probe_s: Annotated[float, Field(gt=0, le=600)] = Field(2.0, description="How long each look at the machine "
                                                         "samples it.")
    thresholds: Thresholds = Field(default_factory=Thresholds, description="What counts as busy.")


def probe(seconds: float = 2.0, gpus: bool = True) -> MachineState:
    """The machine over the next `seconds` (this process and its children are not competitors)."""
    sampler = Sampler(interval=max(seconds / 4, 0.05), gpus=gpus).start()
    time.sleep(seconds)
    sampler.stop()
    return sampler.state()


def wait_until_quiet(policy: QuietPolicy, note: Callable[[str], None],
                     look: Callable[[float], MachineState] = probe,
                     stopped: Callable[[], bool] = lambda: False) -> tuple[bool, list[str], MachineState]:
    """(go ahead, the last reasons it was busy, the last state): quiet, or busy and only warned about -> go;
    busy under `refuse`, still busy after max_wait_s under `wait`, or stopped() (Ctrl-C) while waiting -> do not."""
    started = time.monotonic()
    while True:
        state = look(policy.probe_s)
        reasons = busy(state, policy.thresholds)
        if not reasons:
            return True, [], state
        if stopped():
            return False, reasons, state
        if policy.mode == "warn":
            note("warning: the machine is busy: " + "; ".join(reasons))
            return True, reasons, state
        waited = time.monotonic() - started
        if policy.mode == "refuse" or waited + policy.probe_s > policy.max_wait_s:
            return False, reasons, state
        note(f"waiting for a quiet machine ({waited:.0f} of {policy.max_wait_s:.0f} s): " + "; ".join(reasons))
