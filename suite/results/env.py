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


def packages_digest() -> tuple[str, int]:
    """(digest, count) of the installed Python distributions: sha256 of their sorted `name==version` lines, the
    first 16 hex digits.  Two builds a month apart that installed `>= x` requirements differ here even when
    suite, torch and the image tag look alike."""
    import hashlib
    from importlib import metadata

    lines = sorted({f"{(d.metadata['Name'] or '?').lower()}=={d.version}" for d in metadata.distributions()})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16], len(lines)


def build_manifest(run_id: str, scenario: str, seed: int | list[int], command: list[str],
                   extra: dict[str, Any] | None = None, torch_facts: dict[str, Any] | None = None) -> Manifest:
    """Collect the environment into a Manifest (torch_facts may be passed in to skip the probe, e.g. in tests)."""
    facts = torch_facts if torch_facts is not None else torch_info()
    commit, dirty = git_info()
    digest, packages = packages_digest()
    more = {"python_executable": sys.executable, "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "packages": packages}
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
        seed=seed,
        env=allowed_env(),
        extra={**more, **(extra or {})},
    )
