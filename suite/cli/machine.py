"""`suite machine`: the node's state now, and whether it is quiet enough to time on (the --require-quiet test)."""

from __future__ import annotations

from suite.machine.policy import Thresholds, busy, probe
from suite.machine.state import MachineState


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def lines(state: MachineState, reasons: list[str]) -> list[str]:
    """The state for people, one fact a line."""
    b = state.before
    load = "-" if b.loadavg is None else " / ".join(f"{x:.2f}" for x in b.loadavg)
    clock = "-" if b.cpu_mhz is None else f"{b.cpu_mhz:,.0f} MHz" + (
        f" of {b.cpu_max_mhz:,.0f}" if b.cpu_max_mhz else "") + (f", governor {b.governor}" if b.governor else "")
    out = [f"cpus: {b.cpu_count}; load average 1/5/15 min: {load}; clock: {clock}",
           f"memory available: {_mib(b.mem_available_bytes)}",
           f"competing CPU over {state.window_s:.1f} s: {state.competing_cpu:.2f} CPUs "
           f"(busiest interval {state.competing_cpu_peak:.2f})"]
    out += [f"  {c.name} (pid {c.pid}): {c.cpu:.2f} CPUs" for c in state.competitors]
    for g in b.gpus:
        out.append(f"gpu {g.index}: {g.name}, driver {g.driver or '-'}; SM {g.sm_clock_mhz or '-'} of "
                   f"{g.max_sm_clock_mhz or '-'} MHz, memory {g.mem_clock_mhz or '-'} MHz; power {g.power_w or '-'} "
                   f"of {g.power_limit_w or '-'} W; {g.temperature_c if g.temperature_c is not None else '-'} C; "
                   f"busy {g.utilization_pct if g.utilization_pct is not None else '-'}%; throttle "
                   f"{', '.join(g.throttle_reasons) or 'none'}; ECC errors {g.ecc_errors if g.ecc_errors is not None else '-'}"
                   + (f"; others: {', '.join(f'{o.name} (pid {o.pid})' for o in g.other_processes)}"
                      if g.other_processes else ""))
    if state.gpu_note:
        out.append(state.gpu_note)
    out.append("quiet" if not reasons else "busy: " + "; ".join(reasons))
    return out


def machine(seconds: float, as_json: bool, competing_cpu: float | None) -> int:
    import json

    from suite.console import console

    thresholds = Thresholds() if competing_cpu is None else Thresholds(competing_cpu=competing_cpu)
    state = probe(seconds)
    reasons = busy(state, thresholds)
    if as_json:
        doc = {"state": state.model_dump(mode="json"), "quiet": not reasons, "reasons": reasons,
               "thresholds": thresholds.model_dump(mode="json")}
        print(json.dumps(doc, indent=1))
    else:
        for line in lines(state, reasons):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    return 0 if not reasons else 1
