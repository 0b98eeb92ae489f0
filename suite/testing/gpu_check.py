"""The GPU check for a lent machine (one H200, its own image, offline), and its rehearsal here.

    scripts/gpu-check                 on the GPU machine: OUT=... (default results/gpu-check-out)
    scripts/gpu-check --rehearse      here, offline: every step that needs no GPU (docs/gpu-check.md)

scripts/gpu-check runs this module (`python3 -m suite.testing.gpu_check`) from the source tree.  The module
imports nothing but the standard library at its top, so the machine's bare python3 runs it before suite's
requirements are installed; the programs a step runs in the checked environment (`standin`,
`rehearsal-scenarios`, `harness`) are functions of gpu_programs.py, run as `python -m suite.testing.gpu_programs
NAME ARGS` by the interpreter they check.

The machine has Python 3.12, torch 2.11.0+cu130, torchvision, transformers, rich, typer, psutil, PyYAML,
pytest-benchmark, hypothesis and setuptools, no pydantic, and no network.  What suite needs beyond that
travels as wheels (scripts/gpu-wheels -> wheels/gpu, carried with the working tree); the check installs
them with `pip --no-index --no-deps --target` into a folder of their own and runs suite from the source tree
(PYTHONPATH): no build, no build isolation, nothing downloaded.  Steps, in order of what matters most:

    nvidia-smi   -> nvidia-smi.txt
    install      wheels -> target folder (checksums first)
    import       every suite module imports; versions, torch against the pinned one -> versions.txt
    plan         suite validate + suite plan of the GPU scenarios -> plan.txt
    cells        scenarios/gpu-check.yaml: gpt2-small bf16, 1 GPU, every checkpointing policy (CUDA allocated and
                 reserved peaks beside the trace)
                 (MFU with its accounting, CUDA peaks beside the planner's textbook, as-implemented and
                 traced predictions)
    harness      suite's step against the bare loop (bare_loop.py), same cell, same process -> harness.json
    layouts      sequence + loss, pipeline and context parallelism's code paths at world size 1, against the
                 plain model, and the attention kernel each ran -> layouts.json
    compile      scenarios/gpu-check-compile.yaml: the none cell with compile: true
    offload      scenarios/gpu-check-offload.yaml: gpt2-medium zero3 vs zero3-offload

A failing step never stops the ones after it (except a failed install or import: nothing could run).  The
whole check has a budget (--budget, default 420 s): each step gets what is left less a reserve, a step past
it is stopped (suite run keeps the cells it finished) and later steps are skipped, and report.md (a header
of our own, then `suite report`) and results.tgz (the run folders) are rewritten after every step, so a check
stopped from outside still leaves what it measured.  At most 8 files land in OUT: gpu-check.log,
nvidia-smi.txt, versions.txt, plan.txt, harness.json, layouts.json, report.md, results.tgz.

--rehearse builds a fresh environment with only what the GPU image has: a venv without site packages whose
.pth points at a folder of links to this machine's torch, torchvision and the image's other packages (with
their requirements, resolved from --torch-python's metadata; pydantic is refused there); `--torch-site DIR`
swaps in another torch (e.g. 2.11.0 unpacked from its wheel).  It installs wheels/host (the same pins as
wheels/gpu, built for this interpreter), then runs the same steps with PIP_NO_INDEX=1, the cells and the
harness on `device: cpu` for one step each (gpt-tiny instead of the GPT-2 models, which take minutes a step
in bf16 on 2 cores), and checks every cell finished ok, that OUT holds at most 8 files and that what travels
(tracked files plus wheels/gpu) is under 64 MiB.  `--steps install,import` runs only those steps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("nvidia-smi", "install", "import", "plan", "cells", "harness", "layouts", "compile", "offload")
SCENARIOS = {"cells": "scenarios/gpu-check.yaml", "compile": "scenarios/gpu-check-compile.yaml",
             "offload": "scenarios/gpu-check-offload.yaml"}
NEEDS_GPU = {"nvidia-smi"}
# What the GPU image has (issue 21), by distribution name; --rehearse links these and their requirements.
IMAGE = ("torch", "torchvision", "transformers", "rich", "typer", "psutil", "PyYAML", "pytest-benchmark",
         "hypothesis", "setuptools")
NOT_IN_IMAGE = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection")
MAX_FILES, MAX_FILE_BYTES, MAX_TRAVEL_BYTES = 8, 16 * 2**20, 64 * 2**20
RESERVE_S = 30  # kept back from every step for the report and the tarball
MARKER = ".gpu-check"  # an OUT folder this check made (--rehearse only empties one that has it)


class Check:
    def __init__(self, args: argparse.Namespace):
        self.args, self.rehearse = args, args.rehearse
        default = "results/gpu-check-rehearse" if self.rehearse else "results/gpu-check-out"
        self.out = Path(args.out or os.environ.get("OUT") or ROOT / default).resolve()
        self.t0 = time.monotonic()
        self.steps: list[dict] = []
        self.env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONUNBUFFERED="1",
                        COLUMNS=os.environ.get("COLUMNS", "160"),
                        PYTHONPATH=_pythonpath(ROOT, os.environ.get("PYTHONPATH")))  # the child programs: here
        self.py = args.python or os.environ.get("SUITE_GPU_PYTHON") or "python3"
        self.target: Path | None = None
        self.work = Path(tempfile.mkdtemp(prefix="suite-gpu-check-"))

    # ------------------------------------------------------------------------------------------ plumbing
    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.t0)

    def log(self, text: str) -> None:
        print(text, flush=True)
        with open(self.out / "gpu-check.log", "a") as f:
            f.write(text + "\n")

    def sh(self, cmd: list[str], timeout: float, capture: Path | None = None, cwd: Path = ROOT) -> int:
        """Run cmd (its output into the log, and into `capture` too); on timeout stop its process group
        (SIGTERM, 20 s, SIGKILL) and return 124."""
        self.log(f"$ {' '.join(map(str, cmd))}   (timeout {timeout:.0f} s)")
        with open(self.out / "gpu-check.log", "ab") as log:
            proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            sink = open(capture, "ab") if capture else None
            deadline = time.monotonic() + timeout
            try:
                os.set_blocking(proc.stdout.fileno(), False)
                while True:
                    chunk = proc.stdout.read() or b""
                    if chunk:
                        log.write(chunk), log.flush(), sys.stdout.buffer.write(chunk), sys.stdout.flush()
                        if sink:
                            sink.write(chunk)
                    if proc.poll() is not None and not chunk:
                        return proc.returncode
                    if time.monotonic() > deadline:
                        self._stop(proc)
                        log.write(f"gpu-check: stopped after {timeout:.0f} s (budget)\n".encode())
                        return 124
                    time.sleep(0.2)
            finally:
                if sink:
                    sink.close()

    @staticmethod
    def _stop(proc: subprocess.Popen) -> None:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def step(self, name: str, fn) -> bool:
        if self.args.steps and name not in self.args.steps:
            return True
        left = self.left() - RESERVE_S
        if left < 20:
            self.steps.append({"step": name, "status": "skipped", "detail": "out of time", "seconds": 0})
            self.log(f"== {name}: skipped (out of time)")
            return False
        self.log(f"== {name} ({left:.0f} s left)")
        t = time.monotonic()
        try:
            status, detail = fn(left)
        except Exception as exc:  # noqa: BLE001 - a failing step never stops the check
            status, detail = "failed", f"{type(exc).__name__}: {exc}"
        self.steps.append({"step": name, "status": status, "detail": detail,
                           "seconds": round(time.monotonic() - t, 1)})
        self.log(f"== {name}: {status} {detail} ({time.monotonic() - t:.1f} s)")
        if name not in ("nvidia-smi", "install", "import"):
            self.write_outputs()
        return status == "ok"

    # ------------------------------------------------------------------------------------------ steps
    def nvidia_smi(self, left: float) -> tuple[str, str]:
        path = self.out / "nvidia-smi.txt"
        if shutil.which("nvidia-smi") is None:
            path.write_text("nvidia-smi: not found\n")
            return "failed", "nvidia-smi not found"
        code = self.sh(["nvidia-smi"], min(left, 30), capture=path)
        self.sh(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit",
                 "--format=csv"], min(left, 30), capture=path)
        return ("ok" if code == 0 else "failed"), ""

    def install(self, left: float) -> tuple[str, str]:
        wheels = ROOT / "wheels" / ("host" if self.rehearse else "gpu")
        pins = _read_pins(wheels)
        if self.rehearse:  # the rehearsal's wheels must be the travelling set, rebuilt for this interpreter
            gpu = _read_pins(ROOT / "wheels" / "gpu")
            if gpu != pins:
                return "failed", f"wheels/host pins {pins} differ from wheels/gpu's {gpu}: rerun scripts/gpu-wheels"
        files = [_wheel_for(wheels, pin) for pin in pins]
        sums = _sha256sums(wheels)
        for f in files:
            if sums.get(f.name) != _sha256(f):
                return "failed", f"{f}: checksum differs from {wheels}/SHA256SUMS"
        self.target = Path(self.args.target or self.work / "site")
        shutil.rmtree(self.target, ignore_errors=True)
        code = self.sh([self.py, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "-q",
                        "--target", self.target, *files], left)
        if code != 0:  # no pip in the image: a wheel is a zip of its installed files
            self.log("gpu-check: pip failed; unpacking the wheels with zipfile instead")
            for f in files:
                if self.sh([self.py, "-m", "zipfile", "-e", f, self.target], left) != 0:
                    return "failed", f"could not unpack {f.name}"
        self.env["PYTHONPATH"] = _pythonpath(ROOT, self.target, os.environ.get("PYTHONPATH"))
        return "ok", f"{len(files)} wheels into {self.target} ({', '.join(pins)})"

    def imports(self, left: float) -> tuple[str, str]:
        path = self.out / "versions.txt"
        path.unlink(missing_ok=True)
        code = self.sh([self.py, "-m", "suite.compat", "--import-all", "--json", self.work / "versions.json"],
                       left, capture=path)
        info = json.loads((self.work / "versions.json").read_text()) if (self.work / "versions.json").exists() else {}
        self.versions = info
        if code != 0:
            return "failed", f"exit {code}: {info.get('import_failures') or 'see versions.txt'}"
        if not str(info.get("pydantic_file", "")).startswith(str(self.target)):
            return "failed", f"pydantic came from {info.get('pydantic_file')}, not from the carried wheels"
        return "ok", (f"torch {info['torch']} (cuda {info['torch_cuda']}), python {info['python']}, "
                      f"{info['imported']} modules")

    def plan(self, left: float) -> tuple[str, str]:
        path = self.out / "plan.txt"
        path.unlink(missing_ok=True)
        files = list(SCENARIOS.values())  # the GPU scenarios themselves, in the rehearsal too
        code = self.sh([self.py, "-m", "suite", "validate", *files], left, capture=path)
        for f in files:
            code = self.sh([self.py, "-m", "suite", "plan", f], left, capture=path) or code
        return ("ok" if code == 0 else "failed"), f"exit {code}"

    def run_scenario(self, key: str):
        def fn(left: float) -> tuple[str, str]:
            code = self.sh([self.py, "-m", "suite", "run", self.scenario(key), "--results", self.out / "results"],
                           left)
            statuses = [c["status"] for c in _cells(self.out / "results", self.scenario_name(key))]
            detail = f"exit {code}; cells: {', '.join(statuses) or 'none'}"
            return ("ok" if code == 0 else "timeout" if code == 124 else "failed"), detail
        return fn

    def harness(self, left: float) -> tuple[str, str]:
        out = self.out / "harness.json"
        steps, warmup, rounds = (1, 0, 1) if self.rehearse else (30, 10, 2)
        code = self.sh([self.py, *_child("harness"), self.scenario("cells"), out, str(steps), str(warmup),
                        str(rounds)], left)
        if not out.exists():
            return ("timeout" if code == 124 else "failed"), f"exit {code}"
        h = json.loads(out.read_text())
        return ("ok" if code == 0 else "failed"), f"suite/bare median step {h['ratio']:.3f}"

    def layouts(self, left: float) -> tuple[str, str]:
        out = self.out / "layouts.json"
        code = self.sh([self.py, *_child("layouts"), out], left)
        if not out.exists():
            return ("timeout" if code == 124 else "failed"), f"exit {code}"
        found = json.loads(out.read_text())
        probes = ("sequence_and_loss_parallel", "pipeline", "context_parallel")
        return ("ok" if code == 0 else "failed"), ", ".join(
            f"{p}: {'ran' if found[p]['ok'] else 'refused'}" for p in probes if p in found)

    # ------------------------------------------------------------------------------------------ scenarios
    def scenario(self, key: str) -> str:
        """The scenario file a step runs: the committed one, or (--rehearse) its CPU copy."""
        if not self.rehearse:
            return SCENARIOS[key]
        return str(self.work / Path(SCENARIOS[key]).name)

    def scenario_name(self, key: str) -> str:
        return Path(SCENARIOS[key]).stem + ("-rehearse" if self.rehearse else "")

    def make_rehearsal_scenarios(self) -> None:
        """CPU copies (`rehearsal_scenarios`, in the checked environment: it has PyYAML)."""
        pairs = [str(p) for k in SCENARIOS for p in (ROOT / SCENARIOS[k], self.scenario(k))]
        subprocess.run([self.py, *_child("rehearsal-scenarios"), *pairs], check=True, cwd=ROOT, env=self.env)

    # ------------------------------------------------------------------------------------------ outputs
    def write_outputs(self) -> None:
        results = self.out / "results"
        report = self.header()
        if results.is_dir():
            proc = subprocess.run([self.py, "-m", "suite", "report", results, "--format", "md"], cwd=ROOT,
                                  env=self.env, capture_output=True, text=True, timeout=120)
            report += "\n## suite report\n\n" + (proc.stdout if proc.returncode == 0 else
                                                  f"suite report failed ({proc.returncode}):\n\n```\n{proc.stderr[-3000:]}\n```\n")
            tgz = self.out / "results.tgz"
            for exclude in (False, True):  # work/ (launch logs) too, unless that is over the size limit
                with tarfile.open(tgz, "w:gz") as tar:
                    tar.add(results, "results", filter=(lambda m: None if "/work/" in m.name + "/" and exclude
                                                        else m))
                if tgz.stat().st_size < MAX_FILE_BYTES:
                    break
        (self.out / "report.md").write_text(report)

    def header(self) -> str:
        v = getattr(self, "versions", {})
        lines = [f"# GPU check{' (rehearsal on this machine, device: cpu)' if self.rehearse else ''}", "",
                 f"- torch {v.get('torch', '?')} (CUDA {v.get('torch_cuda')}), pinned {v.get('torch_pinned', '?')}; "
                 f"python {v.get('python', '?')}, pydantic {v.get('pydantic')}"]
        if v.get("torch_note"):
            lines.append(f"- **{v['torch_note']}**")
        lines.append(f"- elapsed {time.monotonic() - self.t0:.0f} s of a {self.args.budget:.0f} s budget")
        lines += ["", "| step | status | seconds | detail |", "|---|---|---|---|"]
        lines += [f"| {s['step']} | {s['status']} | {s['seconds']} | {s['detail']} |" for s in self.steps]
        cells = _cells(self.out / "results")
        if cells:
            lines += ["", "## Cells", "", "MFU = model FLOPs per token x tokens/s per device / the device's peak (its "
                      "accounting per cell below).  Memory per rank in MiB: CUDA max allocated (after warm-up), what "
                      "the caching allocator reserved (the headroom --max-micro-batch keeps covers the difference) and "
                      "the MemTracker total, beside each prediction the planner had (textbook, as implemented, "
                      "traced on fake tensors), with CUDA / prediction in brackets.", "",
                      "| scenario | cell | status | torch | median step ms | MFU | MFU accounting | CUDA max alloc "
                      "| CUDA max reserved | tracker total | textbook | as implemented | traced |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for c in cells:
                lines.append(_cell_row(c, v.get("torch_pinned")))
            formulas = sorted({(c.get("mfu") or {}).get("formula") for c in cells} - {None})
            lines += [""] + [f"MFU accounting: {f}" for f in formulas]
            lines += ["", "## The machine during each cell (CellResult.machine: suite/machine/, NVML through "
                      "nvidia-ml-py)", "", "Sampled every 0.5 s from the runner over the cell's training phase; "
                      "GPU 0's state before and after the launch.", "",
                      "| scenario | cell | window s | competing CPU | SM MHz before / min during / after (max) "
                      "| memory MHz | power W before / after (limit) | temperature C before / after | throttle "
                      "reasons seen | ECC errors | other GPU processes | note |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            lines += [_machine_row(c) for c in cells]
        harness = self.out / "harness.json"
        if harness.exists():
            h = json.loads(harness.read_text())
            lines += ["", "## Harness (suite's step against the bare loop, suite/testing/bare_loop.py)", "",
                      f"- device {h['device']}, torch {h['torch']}: median step suite {h['suite_ms']:.2f} ms, bare "
                      f"{h['bare_ms']:.2f} ms, ratio **{h['ratio']:.3f}** ({h['steps']} steps, {h['warmup']} "
                      f"warm-up, best of {h['rounds']} rounds); losses equal to rtol 2e-2: {h['losses_match']}"
                      + (" (one step on the CPU: the code path, not a measurement)" if self.rehearse else "")]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------------------------------ the run
    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        if self.rehearse:
            self.prepare_out()
        (self.out / MARKER).touch()
        (self.out / "gpu-check.log").touch()
        try:
            if self.rehearse:
                self.py = self.fresh_env()
            else:
                self.step("nvidia-smi", self.nvidia_smi)
            if not (self.step("install", self.install) and self.step("import", self.imports)):
                self.write_outputs()
                return 1
            if self.rehearse:
                self.make_rehearsal_scenarios()
            self.step("plan", self.plan)
            self.step("cells", self.run_scenario("cells"))
            self.step("harness", self.harness)
            self.step("layouts", self.layouts)
            self.step("compile", self.run_scenario("compile"))
            self.step("offload", self.run_scenario("offload"))
            self.write_outputs()
            return self.verdict()
        finally:
            (self.out / MARKER).unlink(missing_ok=True)
            if not self.args.keep:
                shutil.rmtree(self.work, ignore_errors=True)

    def verdict(self) -> int:
        files = [p for p in self.out.rglob("*") if p.is_file() and p.name != MARKER]
        big = [f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in files if p.stat().st_size >= MAX_FILE_BYTES]
        top = [p for p in self.out.iterdir() if p.name != MARKER and p.name != "results"]
        self.log(f"gpu-check: OUT {self.out}: {len(top)} files ({', '.join(sorted(p.name for p in top))}); "
                 f"the run folders are also under results/ (not sent back: results.tgz holds them)")
        bad = [s for s in self.steps if s["status"] != "ok"]
        if not self.rehearse:
            return 0 if not bad else 1
        travel = _travelling_bytes()
        self.log(f"gpu-check: what travels (tracked files + wheels/gpu): {travel / 2**20:.1f} MiB "
                 f"(limit {MAX_TRAVEL_BYTES / 2**20:.0f})")
        problems = [f"{s['step']}: {s['status']} {s['detail']}" for s in bad]
        problems += [f"{c['_scenario']} cell {c['cell_id']}: {c['status']}" for c in _cells(self.out / "results")
                     if c["status"] != "ok"]
        problems += [f"over {MAX_FILES} files in OUT"] if len(top) > MAX_FILES else []
        problems += [f"over {MAX_FILE_BYTES >> 20} MiB: {b}" for b in big if "results/" not in b]
        problems += [f"travels {travel / 2**20:.1f} MiB"] if travel >= MAX_TRAVEL_BYTES else []
        self.log("gpu-check --rehearse: " + ("passed" if not problems else "FAILED: " + "; ".join(problems)))
        return 0 if not problems else 1

    def prepare_out(self) -> None:
        entries = [p for p in self.out.iterdir()]
        if entries and not (self.out / MARKER).exists() and not (self.out / "gpu-check.log").exists():
            raise SystemExit(f"gpu-check: {self.out} is not empty and not a rehearsal's folder; choose another --out")
        for p in entries:
            shutil.rmtree(p) if p.is_dir() else p.unlink()

    def fresh_env(self) -> str:
        """A venv with only the GPU image's packages (links into --torch-python's site) on its path."""
        torch_py = self.args.torch_python or (str(ROOT / ".venv/bin/python") if (ROOT / ".venv/bin/python").exists()
                                              else sys.executable)
        found = subprocess.run([torch_py, *_child("standin"), ",".join(IMAGE), ",".join(NOT_IN_IMAGE)],
                               capture_output=True, text=True, cwd=ROOT, env=self.env)
        if found.returncode != 0:
            raise SystemExit(f"gpu-check: {torch_py} cannot stand in for the GPU image (run scripts/setup, or pass "
                             f"--torch-python an interpreter with torch and the image's packages):\n"
                             f"{found.stderr[-2000:]}")
        info = json.loads(found.stdout)
        standin = self.work / "image"
        standin.mkdir()
        swapped = set()
        if self.args.torch_site:  # another torch (and torchvision) in place of this machine's
            site = Path(self.args.torch_site).resolve()
            for entry in site.iterdir():
                (standin / entry.name).symlink_to(entry)
            swapped = {"torch", "torchvision", "triton"}  # triton: the other torch pins its own (CPU needs none)
        for name, entries in info["dists"].items():
            if name in swapped:
                continue
            for entry in entries:
                link = standin / Path(entry).name
                if not link.exists() and not link.is_symlink():
                    link.symlink_to(entry)
        venv = self.work / "venv"
        subprocess.run([info["base_python"], "-m", "venv", venv], check=True, env=self.env)
        py = venv / "bin" / "python"
        purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        absent = subprocess.run([py, "-c", "import pydantic"], capture_output=True, env=self.env).returncode != 0
        if not absent:
            raise SystemExit(f"gpu-check: the fresh venv {venv} already imports pydantic")
        (Path(purelib) / "_gpu_image.pth").write_text(str(standin) + "\n")
        if subprocess.run([py, "-c", "import pydantic"], capture_output=True, env=self.env).returncode == 0:
            raise SystemExit(f"gpu-check: the stand-in for the GPU image ({standin}) brings pydantic")
        self.log(f"gpu-check --rehearse: fresh venv {venv} (Python {info['python']}), no site packages; "
                 f"{len(info['dists'])} distributions linked from {info['site']} stand in for the GPU image "
                 f"({', '.join(IMAGE)} and their requirements)"
                 + (f"; torch and torchvision from {self.args.torch_site}" if self.args.torch_site else ""))
        self.log("gpu-check --rehearse: linked: " + ", ".join(sorted(info["dists"])))
        for name, by in sorted(info["dropped"].items()):  # e.g. typer >= 0.20 requires pydantic; the image's not
            self.log(f"gpu-check --rehearse: not linked (the GPU image lacks it): {name}, required here by "
                     f"{', '.join(sorted(set(by)))}; the carried wheels provide it")
        return str(py)


def _child(name: str) -> list[str]:
    """What follows an interpreter to run child program `name` (with ROOT on its PYTHONPATH, as self.env has):
    the programs a step runs inside the interpreter it checks live in gpu_programs.py."""
    return ["-m", "suite.testing.gpu_programs", name]


# ---------------------------------------------------------------------------------------------- helpers

def _pythonpath(*entries) -> str:
    """PYTHONPATH of these entries (each may itself be a PYTHONPATH), in order, each once."""
    out: list[str] = []
    for entry in entries:
        for part in str(entry or "").split(os.pathsep):
            if part and part not in out:
                out.append(part)
    return os.pathsep.join(out)


def _mib(b) -> str:
    return "" if not isinstance(b, (int, float)) else f"{b / 2**20:,.1f}"


def _label(c: dict) -> str:
    """A cell for people: its model, strategy and checkpointing."""
    axes = c.get("axes", {})
    return " ".join(f"{axes[k]}" for k in ("model", "strategy", "activation_checkpointing") if k in axes)


def _cell_row(c: dict, pinned: str | None) -> str:
    """One Markdown row: status, step time, MFU with its accounting, CUDA peak beside every prediction."""
    mfu, mem, pred = c.get("mfu") or {}, c.get("memory") or {}, c.get("prediction") or {}
    measured = mem.get("measured") or {}
    cuda = measured.get("total_cuda")
    step = (c.get("step_time") or {}).get("median")
    label = _label(c) + (" compile" if (c.get("cell") or {}).get("compile") else "")
    torch_v = f"{c['_torch']}" + ("" if str(c["_torch"]).split("+")[0] == pinned else " (not the pinned one)")
    preds = []
    for b in ((pred.get("memory_bytes") or {}).get("total"), (pred.get("as_implemented") or {}).get("total"),
              (pred.get("traced") or {}).get("peak")):
        ratio = f" ({cuda / b:.2f})" if isinstance(cuda, (int, float)) and b else ""
        preds.append(_mib(b) + ratio if b else "")
    value = mfu.get("value")
    accounting = (f"{mfu.get('flops_per_token', 0):.4g} FLOPs/token, peak {mfu.get('peak_flops') or 0:.4g} FLOP/s "
                  f"({mfu.get('peak_source')}, {mfu.get('precision')})") if mfu else ""
    return (f"| {c['_scenario']} | {label} | {c['status']} | {torch_v} | "
            f"{'' if step is None else f'{step * 1e3:.1f}'} | {'' if value is None else f'{value:.3f}'} | {accounting} | "
            f"{_mib(cuda)} | {_mib(measured.get('reserved_cuda'))} | {_mib(measured.get('total_tracker'))} | "
            f"{' | '.join(preds)} |")


def _machine_row(c: dict) -> str:
    """One Markdown row of a cell's recorded machine state (CellResult.machine), blank where none was recorded."""
    m = c.get("machine") or {}
    label = _label(c)
    b, a = ((m.get(k) or {}).get("gpus") or [{}] for k in ("before", "after"))
    b, a = b[0], a[0]

    def two(key: str) -> str:
        return f"{b.get(key, '-')} / {a.get(key, '-')}"

    return (f"| {c['_scenario']} | {label} | {m.get('window_s', 0):.1f} | {m.get('competing_cpu', 0):.2f} | "
            f"{b.get('sm_clock_mhz', '-')} / {m.get('gpu_sm_clock_min_mhz', '-')} / {a.get('sm_clock_mhz', '-')} "
            f"({b.get('max_sm_clock_mhz', '-')}) | {two('mem_clock_mhz')} | {two('power_w')} "
            f"({b.get('power_limit_w', '-')}) | {two('temperature_c')} | {', '.join(m.get('gpu_throttle') or []) or 'none'} "
            f"| {a.get('ecc_errors', '-')} | {', '.join(o['name'] for o in m.get('gpu_others') or []) or 'none'} | "
            f"{m.get('gpu_note') or ('' if m else 'no state recorded')} |")


def _read_pins(wheels: Path) -> list[str]:
    path = wheels / "PINS"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run scripts/gpu-wheels (where the package index is reachable)")
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def _wheel_for(wheels: Path, pin: str) -> Path:
    name, version = pin.split("==")
    found = sorted(wheels.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not found:
        raise RuntimeError(f"no wheel for {pin} in {wheels}: run scripts/gpu-wheels")
    return found[0]


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sha256sums(wheels: Path) -> dict[str, str]:
    path = wheels / "SHA256SUMS"
    return {} if not path.exists() else {line.split()[1]: line.split()[0]
                                         for line in path.read_text().splitlines() if line.strip()}


def _cells(results: Path, scenario: str | None = None) -> list[dict]:
    """Every stored cell result under results/<scenario>/<run>/cells/, with its run's torch version."""
    out = []
    for run in sorted(results.glob(f"{scenario or '*'}/*/")):
        manifest = run / "manifest.json"
        torch_v = json.loads(manifest.read_text()).get("torch") if manifest.exists() else None
        for f in sorted((run / "cells").glob("*.json")):
            try:
                c = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            out.append({**c, "_scenario": run.parent.name, "_torch": torch_v})
    return out


def _travelling_bytes() -> int:
    """Tracked files (as the working tree has them) plus wheels/gpu: what the GPU machine receives."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    total = sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file())
    return total + sum(p.stat().st_size for p in (ROOT / "wheels" / "gpu").glob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="scripts/gpu-check", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rehearse", action="store_true", help="the steps that need no GPU, here, offline, device: cpu")
    p.add_argument("--out", help="output folder (default $OUT, else results/gpu-check-out or -rehearse)")
    p.add_argument("--budget", type=float, default=420.0, help="seconds for the whole check (default 420)")
    p.add_argument("--steps", type=lambda s: s.split(","), help=f"only these steps ({','.join(STEPS)})")
    p.add_argument("--python", help="the interpreter to check (default python3; --rehearse: the fresh venv's)")
    p.add_argument("--target", help="where the wheels are installed (default a temporary folder)")
    p.add_argument("--torch-python", help="--rehearse: the interpreter whose torch and packages stand in for the "
                   "image's (default .venv/bin/python)")
    p.add_argument("--torch-site", default=os.environ.get("SUITE_REHEARSE_TORCH_SITE"),
                   help="--rehearse: a folder holding another torch and torchvision to use instead")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (venv, target, scenarios)")
    args = p.parse_args(argv)
    if args.steps and set(args.steps) - set(STEPS):
        p.error(f"unknown steps {sorted(set(args.steps) - set(STEPS))}; known: {', '.join(STEPS)}")
    if args.rehearse and args.budget == 420.0:
        args.budget = 3000.0  # 2 CPU cores: traces, one step per cell and a CPU compile take minutes here
    return Check(args).run()


if __name__ == "__main__":
    sys.exit(main())
