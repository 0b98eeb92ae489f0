"""Bytes each rank communicates per optimizer step (../shared/reference.md, in units of Psi elements).

- ddp:   all-reduce of gradients = 2 Psi (ring: reduce-scatter + all-gather).
- zero1: torch's ZeroRedundancyOptimizer under DDP = all-reduce (2 Psi) + each shard's owner broadcasts it
         (Psi) = 3 Psi.  (The ZeRO paper's ZeRO-1, reduce-scatter + all-gather, is 2 Psi.)
- zero2: reduce-scatter of gradients + all-gather of updated parameters = 2 Psi.
- zero3: all-gather in forward + all-gather in backward per micro-batch, + one reduce-scatter = (2 k + 1) Psi
         with k micro-batches per step (k = 1 gives the textbook 3 Psi).
Each strategy's numbers are its registry entry's `comm` (suite/strategies/registry.py): scratch-dp* = ddp's
2 Psi; scratch-zero1 = all-reduce + all-gather of the updated shards = 3 Psi (ZeRO-1 as the seed describes
it); scratch-zero2 = 2 Psi; scratch-zero3 = (2 k + 1) Psi (its root unit, the embeddings, is gathered once per
micro-batch instead of twice, so it moves slightly less).
- hsdp:  zero3's (2 k + 1) Psi within the shard group of S ranks, + an all-reduce of each rank's gradient
         shard across the R = N / S replicas = 2 Psi / S (when R > 1).
Element size: 4 bytes in fp32, 2 in mixed precision.  A single rank communicates nothing.
"""

from __future__ import annotations

from suite.strategies import registry


def comm_bytes_per_step(num_parameters: int, strategy: str, precision: str, world: int, grad_accum: int,
                        shard: int | None = None) -> float:
    if world <= 1:
        return 0.0
    spec = registry.get(strategy)
    if spec.shard_group and shard:
        if shard == 1:  # groups of one: nothing is sharded or gathered, the gradients are all-reduced (ddp)
            return float(2 * num_parameters * (4 if precision == "fp32" else 2))
        elements = spec.comm.elements(grad_accum, shard=shard, replicas=world // shard)
    else:
        elements = spec.comm.elements(grad_accum)
    return float(elements * num_parameters * (4 if precision == "fp32" else 2))
