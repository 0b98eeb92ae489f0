"""Algorithm and bus bandwidth of a collective, with the NCCL-tests conventions (pure: no torch).

NCCL-tests (doc/PERFORMANCE.md in NVIDIA/nccl-tests) report two bandwidths for an operation of S bytes
that took t seconds on n ranks:

    algbw = S / t
    busbw = algbw * factor(op, n)

busbw undoes the rank-count dependence of algbw so it can be compared with one link's unidirectional peak:
a ring all-reduce moves every byte 2(n-1)/n times through each rank's link (n-1 additions, n assignments),
all-gather and reduce-scatter do one half of that ((n-1)/n), all-to-all sends (n-1)/n of its buffer away, and
broadcast / reduce are bottlenecked by the root's single link (factor 1).

What "S" is matters as much as the factor, and follows NCCL-tests exactly:
- all_reduce, broadcast, reduce: the size of the (per-rank) buffer.
- all_gather: the size of the whole gathered OUTPUT buffer, i.e. n x the per-rank send chunk.
- reduce_scatter: the size of the whole INPUT buffer, i.e. n x the per-rank received chunk.
- all_to_all: the size of each rank's send (= receive) buffer, n chunks of S/n.
So `--sizes 64MiB` means a 64 MiB gathered tensor for all_gather (each rank contributes 64/n MiB), not 64 MiB
per rank.  Bandwidths are in bytes per second; tables print GB/s = 1e9 B/s like NCCL-tests.
"""

from __future__ import annotations

# Ops whose buffer is split into n equal per-rank chunks: S must be a multiple of n elements.
CHUNKED_OPS = ("all_gather", "reduce_scatter", "all_to_all")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")
DEFAULT_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def busbw_factor(op: str, world_size: int) -> float:
    """The NCCL-tests correction factor from algbw to busbw for `op` on `world_size` ranks."""
    n = world_size
    if n < 1:
        raise ValueError(f"world_size must be >= 1, got {n}")
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective op {op!r}; known: {', '.join(OPS)}")


def algbw(nbytes: int, time_s: float) -> float:
    """Algorithm bandwidth, bytes per second: S / t."""
    if time_s <= 0:
        raise ValueError(f"time must be positive to compute a bandwidth, got {time_s} s for {nbytes} bytes")
    return nbytes / time_s


def busbw(op: str, nbytes: int, time_s: float, world_size: int) -> float:
    """Bus bandwidth, bytes per second: algbw x busbw_factor(op, n)."""
    return algbw(nbytes, time_s) * busbw_factor(op, world_size)


def effective_bytes(op: str, requested: int, world_size: int, elem_size: int = 4) -> int:
    """The S actually measured for a requested size: rounded down to whole elements (and, for chunked ops,
    to n equal chunks of whole elements), but never below one element (per rank for chunked ops).

    E.g. 1 KiB all_gather on 3 ranks of float32: 1024 // 12 * 12 = 1020 bytes (85 floats per rank)."""
    if op not in OPS:
        raise ValueError(f"unknown collective op {op!r}; known: {', '.join(OPS)}")
    unit = elem_size * (world_size if op in CHUNKED_OPS else 1)
    return max(unit, requested // unit * unit)
