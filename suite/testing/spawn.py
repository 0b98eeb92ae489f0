"""Helpers for multi-rank worker tests: launch cells (builders.make_cell) with torchrun or as one spawned group.

Each launch of fresh processes costs ~10 s here (every rank imports torch), so most 2-rank checks run in one
*group*: 2 processes started once (RANK/WORLD_SIZE/MASTER_ADDR set as torchrun would) that call
`suite.worker.main.run_worker` — the function Ray Train calls — for a list of cells one after another, each
cell with its own process group on its own port (suite/testing/group_worker.py).  The `python -m suite.worker`
entry point itself is tested with real torchrun launches (`torchrun_cell`).
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterable

from suite.results.schema import RankRecord
from suite.scenario import Cell

ROOT = Path(__file__).resolve().parents[2]


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **(extra or {})}


def read_records(out: Path, world: int) -> list[RankRecord]:
    return [RankRecord.model_validate_json((out / f"rank{r}.json").read_text()) for r in range(world)]


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux: /proc; elsewhere the IANA default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def free_ports(n: int) -> list[int]:
    """n distinct ports free now, below the ephemeral range.  A group's ports are chosen before its cells run;
    a port the kernel hands out meanwhile (gloo's and TCPStore's own listeners bind port 0) is always in the
    ephemeral range, so it can never take one of these (it did: EADDRINUSE, and the other rank waited)."""
    rng = random.Random()
    low = max(1024, min(_ephemeral_low(), 65536) - 20000)
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(low, low + 20000)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken now
        ports.append(port)
    return ports


def torchrun_cell(cell: Cell, out: Path, env: dict[str, str] | None = None, timeout: float = 240):
    """`torchrun --standalone --nproc_per_node gpus -m suite.worker cell.json out` -> (returncode, output)."""
    out.mkdir(parents=True, exist_ok=True)
    cell_file = out / "cell.json"
    cell_file.write_text(cell.model_dump_json())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={cell.gpus}",
           "-m", "suite.worker", str(cell_file), str(out)]
    p = subprocess.run(cmd, cwd=ROOT, env=worker_env(env), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def run_group(cells: list[Cell], out_root: Path, world: int = 2, timeout: float = 600) -> dict[str, list[RankRecord]]:
    """Run every cell on `world` spawned ranks (one process per rank for all cells); records by cell id."""
    if any(c.gpus != world for c in cells):
        raise ValueError(f"every cell of a group needs gpus: {world}")
    out_root.mkdir(parents=True, exist_ok=True)
    spec = out_root / "group.json"
    spec.write_text(json.dumps({"cells": [c.model_dump(mode="json") for c in cells], "ports": free_ports(len(cells)),
                                "out_root": str(out_root)}))
    procs = []
    for r in range(world):
        env = worker_env({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world),
                          "MASTER_ADDR": "127.0.0.1"})
        log = open(out_root / f"group_rank{r}.log", "w")
        procs.append((subprocess.Popen([sys.executable, "-m", "suite.testing.group_worker", str(spec)], cwd=ROOT,
                                       env=env, stdout=log, stderr=subprocess.STDOUT), log))
    try:
        codes = [p.wait(timeout=timeout) for p, _ in procs]
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    if any(codes):
        logs = "\n".join((out_root / f"group_rank{r}.log").read_text()[-3000:] for r in range(world))
        raise RuntimeError(f"group ranks exited {codes}:\n{logs}")
    return {c.id: read_records(out_root / c.id, world) for c in cells}


def run_named_groups(groups: dict[int, dict[str, dict]], mktemp, make_cell) -> dict[str, tuple[Cell, list[RankRecord]]]:
    """{world: {name: make_cell settings}} -> {name: (cell, its rank records)}: one spawned group per world size
    (`mktemp(name)` gives each group's folder, e.g. pytest's tmp_path_factory.mktemp)."""
    out = {}
    for world, group in groups.items():
        cells = {name: make_cell(**settings) for name, settings in group.items()}
        records = run_group(list(cells.values()), mktemp(f"group-{world}"), world=world)
        out.update({name: (cells[name], records[cell.id]) for name, cell in cells.items()})
    return out


def one_rank_references(layouts: Iterable[dict], out: Path, make_cell, **settings) -> dict[int, RankRecord]:
    """{global batch size: the 1-rank ddp run's record} for every global batch size among `layouts` (make_cell
    settings; the reference a multi-rank layout must reproduce), each cell made with `settings` (model, ...)."""
    from suite.worker.main import run_worker

    refs = {}
    for gbs in sorted({o["global_batch_size"] for o in layouts}):
        record = run_worker(make_cell(gpus=1, strategy="ddp", global_batch_size=gbs, **settings), out / str(gbs))
        if record.status != "ok":
            raise RuntimeError(f"the 1-rank reference (global batch {gbs}) failed: {record.error}")
        refs[gbs] = record
    return refs
