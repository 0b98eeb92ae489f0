"""Data parallelism and ZeRO written by hand from collectives, to run beside (and be checked against) torch's.

Each file is one strategy, readable top to bottom, an `apply(model, mesh, policy, device) -> Parallel` like the
native ones in suite/strategies/:

    dp.py           scratch-dp            all-reduce every gradient after backward (the naive version)
    dp_overlap.py   scratch-dp-overlap    async all-reduce from each parameter's gradient hook, during backward
    dp_bucketed.py  scratch-dp-bucketed   the same, gradients packed into flat buckets (what DDP does)
    zero1.py        scratch-zero1         optimizer states and fp32 master weights sharded (flat shards)
    zero2.py        scratch-zero2         + gradients reduce-scattered during backward, only a shard kept
    zero3.py        scratch-zero3         + parameters sharded, each block gathered just before its use

Twins (the same mathematics, so the same loss curve in fp32): scratch-dp* ~ ddp, scratch-zeroN ~ zeroN.
common.py holds what they share: flat buckets, the Bucket / BucketReducer that sends a bucket the moment its
last gradient is ready (overlap, bucketed, zero2, zero3), and byte counting that counts aliased memory once.
"""
