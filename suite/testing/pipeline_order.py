"""PyTorch's own pipeline orders, run through a dependency simulation: the yardstick for the planner's bubble
and in-flight formulas (plan/pipeline.py; tests/unit/test_pipeline_plan.py).

PyTorch computes each rank's list of actions (`_calculate_single_rank_operations`: forward, full backward, or
the backward split into its input-gradient and weight-gradient passes, per stage and micro-batch).  `simulate`
runs those lists: a rank takes its next action as soon as what it depends on is done (a forward needs the
previous stage's forward of the micro-batch; an input gradient, or a full backward, needs the stage's own forward
and the next stage's input gradient; a weight gradient its stage's input gradient), each action costing its
`cost` and messages nothing.  It reads the bubble (each rank's idle share of the longest rank's time) and the
activations in flight (forwards whose backward, or weight-gradient pass, has not yet run), in model chunks.

This reaches into PyTorch's private schedule internals on purpose: if a torch changes its orders, the test
that compares them with the planner fails and says so, rather than the planner drifting silently.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Simulated:
    """One schedule run on equal stages.  idle: each pipeline rank's idle share; in_flight: each rank's most
    chunks of activations held at once (a chunk is 1 / v of a rank's layers)."""

    idle: list[float]
    in_flight: list[int]


def torch_order(schedule: str, p: int, v: int, m: int) -> dict[int, list]:
    """Each pipeline rank's actions in PyTorch's order for a multi-stage schedule (interleaved-1f1b,
    zero-bubble), built without stages or a process group."""
    from torch.distributed.pipelining import schedules

    from suite.techniques.pipeline_parallel import TORCH_SCHEDULES

    cls = getattr(schedules, TORCH_SCHEDULES[schedule])
    order = object.__new__(cls)
    order.pp_group_size, order.n_local_stages, order._n_microbatches = p, v, m
    order.number_of_rounds = max(1, m // p)
    order.microbatches_per_round = m // order.number_of_rounds
    order.pipeline_order = {r: order._calculate_single_rank_operations(r) for r in range(p)}
    if schedule == "zero-bubble":
        order.pipeline_order = order._add_bubbles_to_actions(v * p)
    return order.pipeline_order


def single_stage_order(schedule: str, p: int, m: int) -> dict[int, list[tuple[str, int, int]]]:
    """gpipe's and 1f1b's order (PyTorch's single-stage schedules run it in their step loop, not as a list):
    gpipe every forward then every backward; 1f1b p - r forwards, then one backward and one forward, then the
    remaining backwards."""
    out = {}
    for r in range(p):
        if schedule == "gpipe":
            out[r] = [("F", r, i) for i in range(m)] + [("B", r, i) for i in range(m)]
            continue
        warm = min(m, p - r)
        acts = [("F", r, i) for i in range(warm)]
        for i in range(m - warm):
            acts += [("B", r, i), ("F", r, warm + i)]
        acts += [("B", r, i) for i in range(m - warm, m)]
        out[r] = acts
    return out


def simulate(schedule: str, p: int, m: int, v: int = 1, forward: float = 1.0, input_grad: float = 1.0,
             weight_grad: float = 1.0) -> Simulated:
    """Run `schedule`'s order on p equal ranks, m micro-batches (a full backward costs input_grad + weight_grad)."""
    if schedule in ("gpipe", "1f1b"):
        orders, stages = single_stage_order(schedule, p, m), p
    else:
        from torch.distributed.pipelining.schedules import _ComputationType as T

        kinds = {T.FORWARD: "F", T.FULL_BACKWARD: "B", T.BACKWARD_INPUT: "I", T.BACKWARD_WEIGHT: "W"}
        orders = {r: [(kinds[a.computation_type], a.stage_index, a.microbatch_index)
                      for a in acts if a is not None]
                  for r, acts in torch_order(schedule, p, v, m).items()}
        stages = p * v
    cost = {"F": forward, "B": input_grad + weight_grad, "I": input_grad, "W": weight_grad}
    done: dict[tuple[str, int, int], float] = {}
    clock, busy, held, most = [0.0] * p, [0.0] * p, [0] * p, [0] * p
    nxt = [0] * p
    moved = True
    while moved:
        moved = False
        for r in range(p):
            while nxt[r] < len(orders[r]):
                kind, s, i = orders[r][nxt[r]]
                if kind == "F":
                    needs = [("F", s - 1, i)] if s > 0 else []
                elif kind in ("B", "I"):  # the next stage's input gradient ("B" is stored as "I" too)
                    needs = [("F", s, i)] + ([("I", s + 1, i)] if s < stages - 1 else [])
                else:
                    needs = [("I", s, i)]
                if any(n not in done for n in needs):
                    break
                clock[r] = max([clock[r]] + [done[n] for n in needs]) + cost[kind]
                busy[r] += cost[kind]
                done[("I" if kind == "B" else kind, s, i)] = clock[r]
                held[r] += 1 if kind == "F" else -1 if kind in ("B", "W") else 0
                most[r] = max(most[r], held[r])
                nxt[r] += 1
                moved = True
    if any(nxt[r] < len(orders[r]) for r in range(p)):
        raise RuntimeError(f"{schedule} p={p} m={m}: the order deadlocks in the simulation")
    span = max(clock)
    return Simulated(idle=[(span - b) / span for b in busy], in_flight=most)
