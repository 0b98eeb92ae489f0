"""Provenance: the environment a run's results were obtained in (manifest.json).

What matters for reproducing a number: the code (suite version, git commit, dirty flag), the software stack
(python, torch, CUDA, NCCL, driver), the hardware (devices, CPU model, host), the container image, the seed,
and the handful of environment variables that change how collectives and threads behave.  Environment
variables are taken from an ALLOWLIST only: the whole environment routinely holds tokens and passwords, and
results folders get published.

torch is queried in a subprocess (`python -c ...`): the runner itself never imports torch (that alone costs
seconds and would initialise CUDA in the parent of every launch).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from suite import __version__
from suite.results.schema import Manifest
from suite.results.store import utc_iso

# Names kept exactly, and prefixes kept (minus anything that looks like a credential).
ENV_NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
             "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "SUITE_FAULT", "SUITE_IMAGE",
             "SUITE_IMAGE_DIGEST", "SUITE_WORKER_MODULE", "SUITE_PLUGINS")
ENV_PREFIXES = ("NCCL_", "RAY_", "TORCH_", "TORCHELASTIC_", "GLOO_", "CUDA_", "UCX_", "FI_")
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "COOKIE")

_TORCH_PROBE = r"""
import json, torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": None, "devices": []}
if torch.cuda.is_available():
    out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError):
        out["nccl"] = None
print(json.dumps(out))
"""


def allowed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowlisted environment variables (never a credential-looking name), sorted by name."""
    environ = os.environ if environ is None else environ
    kept = {}
    for name, value in environ.items():
        upper = name.upper()
        if any(marker in upper for marker in SECRET_MARKERS):
            continue
        if name in ENV_NAMES or name.startswith(ENV_PREFIXES):
            kept[name] = value
    return dict(sorted(kept.items()))


def git_info(repo: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout suite runs from; SUITE_GIT_COMMIT (set in images) when not a checkout.

    Dirty means tracked files differ from the commit; untracked files (results, scratch) do not count.
    """
    repo = repo or Path(__file__).resolve().parents[2]
    git = shutil.which("git")
    if git and (repo / ".git").exists():
        head = subprocess.run([git, "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode == 0:
            status = subprocess.run([git, "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True)
            dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
            return head.stdout.strip(), dirty
    commit = os.environ.get("SUITE_GIT_COMMIT")
    return (commit or None), None


def torch_info(python: str = sys.executable, timeout: float = 120) -> dict[str, Any]:
    """torch / CUDA / NCCL versions and CUDA device names, from a short-lived subprocess."""
    proc = subprocess.run([python, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"torch": None, "cuda": None, "nccl": None, "devices": [], "error": tail[0]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    proc = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                          text=True, timeout=30)
    lines = proc.stdout.strip().splitlines()
    return lines[0].strip() if proc.returncode == 0 and lines else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: fall back to what platform knows
    return platform.processor() or platform.machine()


def device_text(m: Manifest) -> str:
    """What a run's cells ran on, as a person reads it: "2 x NVIDIA H200 (CUDA 13.0, driver 580.1)", or
    "CPU: AMD EPYC ..." (a CPU run's manifest still names the CUDA its torch was built for: not what ran)."""
    if not m.devices:
        return f"CPU: {m.cpu_model}"
    kinds = sorted(set(m.devices))
    what = ", ".join(f"{m.devices.count(k)} x {k}" for k in kinds)
    facts = [f"CUDA {m.cuda}" if m.cuda else None, f"driver {m.driver}" if m.driver else None]
    return what + (f" ({', '.join(f for f in facts if f)})" if any(facts) else "")


def cuda_text(m: Manifest) -> str:
    """The manifest's CUDA version, saying when no GPU used it (a CPU run of a CUDA build of torch)."""
    if not m.cuda:
        return "-"
    return m.cuda if m.devices else f"{m.cuda} (the torch build's; no GPU used)"


def packages_digest() -> tuple[str, int]:
    """(digest, count) of the installed Python distributions: sha256 of their sorted `name==version` lines, the
    first 16 hex digits.  Two builds a month apart that installed `>= x` requirements differ here even when
    suite, torch and the image tag look alike."""
    import hashlib
    from importlib import metadata

    lines = sorted({f"{(d.metadata['Name'] or '?').lower()}=={d.version}" for d in metadata.distributions()})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16], len(lines)


# Where an installer keeps the lock files it installed from (scripts/setup: .venv/suite-lock/dev.txt; the
# Dockerfile: /opt/venv/suite-lock/base.txt and one file per extra), relative to the environment's sys.prefix.
LOCK_FOLDER = "suite-lock"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def _norm(name: str) -> str:
    """A distribution name as PEP 503 compares them (case, and runs of -_. alike)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(text: str) -> dict[str, str]:
    """name -> version of every `name==version` line of a lock file (hashes, comments and markers ignored)."""
    return {_norm(m.group(1)): m.group(2) for m in map(_PIN.match, text.splitlines()) if m}


def lock_state(prefix: str | None = None) -> tuple[str | None, list[str], list[str]]:
    """(digest, files, mismatches) of the lock the running environment was installed from.

    digest: sha256 (first 16 hex digits) of the lock files in `<sys.prefix>/suite-lock/` by name and content;
    None when the environment was not installed from a lock (a plain `pip install suite`).  mismatches: the
    locked packages whose installed version differs from the pin or that are missing — empty when the
    environment is what the lock says (packages outside the lock, e.g. a base image's own, are not counted)."""
    import hashlib
    from importlib import metadata

    folder = Path(prefix or sys.prefix) / LOCK_FOLDER
    try:
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".txt")
    except OSError:
        return None, [], []
    if not files:
        return None, [], []
    h = hashlib.sha256()
    pins: dict[str, str] = {}
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        h.update(f.name.encode() + b"\0" + text.encode() + b"\0")
        pins.update(lock_pins(text))
    installed: dict[str, str] = {}
    for d in metadata.distributions():  # in sys.path order: the first one found is the one imports get (a venv's
        installed.setdefault(_norm(d.metadata["Name"] or "?"), d.version)  # pip before its base image's own)
    mismatches = [f"{name}: locked {want}, installed {installed.get(name, 'none')}"
                  for name, want in sorted(pins.items()) if installed.get(name) != want]
    return h.hexdigest()[:16], [f.name for f in files], mismatches


def build_manifest(run_id: str, scenario: str, seed: int | list[int], command: list[str],
                   extra: dict[str, Any] | None = None, torch_facts: dict[str, Any] | None = None) -> Manifest:
    """Collect the environment into a Manifest (torch_facts may be passed in to skip the probe, e.g. in tests)."""
    facts = torch_facts if torch_facts is not None else torch_info()
    commit, dirty = git_info()
    digest, packages = packages_digest()
    lock, lock_files, off_lock = lock_state()
    more: dict[str, Any] = {"python_executable": sys.executable, "platform": platform.platform(),
                            "cpu_count": os.cpu_count(), "packages": packages}
    if lock is not None:  # which lock files, and what the environment holds that the lock does not say
        more["lock_files"] = lock_files
        more["lock_mismatches"] = off_lock[:20]
    if facts.get("error"):
        more["torch_probe_error"] = facts["error"]
    return Manifest(
        run_id=run_id,
        scenario=scenario,
        created_at=utc_iso(),
        command=list(command),
        suite_version=__version__,
        git_commit=commit,
        git_dirty=dirty,
        python=platform.python_version(),
        torch=facts.get("torch"),
        cuda=facts.get("cuda"),
        nccl=facts.get("nccl"),
        driver=driver_version() if facts.get("devices") else None,
        devices=list(facts.get("devices") or []),
        device_count=len(facts.get("devices") or []),
        cpu_model=cpu_model(),
        hostname=socket.gethostname(),
        container_image=os.environ.get("SUITE_IMAGE") or None,
        container_image_digest=os.environ.get("SUITE_IMAGE_DIGEST") or None,
        packages_digest=digest,
        lock_digest=lock,
        seed=seed,
        env=allowed_env(),
        extra={**more, **(extra or {})},
    )
