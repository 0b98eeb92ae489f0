"""Scenario texts several tests share."""


def infeasible(name: str) -> str:
    """64 CPU ranks is over the cap: both cells are infeasible and recorded without a launch (no torchrun
    started), so a `suite run` of it is quick and writes a complete run folder."""
    return f"""\
name: {name}
model: gpt-tiny
seq_len: 16
strategy: [ddp, zero1]
gpus: 64
micro_batch_size: 2
global_batch_size: 128
steps: 2
warmup_steps: 1
device: cpu
"""
