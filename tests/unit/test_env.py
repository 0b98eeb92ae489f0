"""Provenance: allowlisted environment only (a planted secret never reaches the manifest), versions, git."""

from __future__ import annotations

import subprocess
from importlib.metadata import version
from pathlib import Path

from suite.results import env

FACTS = {"torch": "9.9.9", "cuda": "12.0", "nccl": "2.21.5", "devices": ["NVIDIA H200", "NVIDIA H200"]}


def test_allowlist_keeps_relevant_variables_and_drops_secrets():
    environ = {
        "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "0,1",
        "RAY_ADDRESS": "auto", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "RAY_AUTH_TOKEN": "tok-123", "NCCL_SECRET": "s3cret", "TORCH_API_KEY": "k-456", "RAY_PASSWORD": "pw",
        "AWS_SECRET_ACCESS_KEY": "aws", "GITHUB_TOKEN": "gh", "HOME": "/root", "PATH": "/bin",
    }
    kept = env.allowed_env(environ)
    assert kept == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5",
                    "OMP_NUM_THREADS": "1", "RAY_ADDRESS": "auto", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_manifest_never_contains_a_planted_secret(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", "planted-token-value-1")
    monkeypatch.setenv("NCCL_SOCKET_PASSWORD", "planted-password-value-2")
    monkeypatch.setenv("SOME_RANDOM_VAR", "planted-unlisted-value-3")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("SUITE_IMAGE", "suite:test")
    monkeypatch.setenv("SUITE_IMAGE_DIGEST", "sha256:abc")
    m = env.build_manifest("0001_x_y", "smoke", 7, ["suite", "run"], torch_facts=FACTS)
    text = m.model_dump_json()
    for planted in ("planted-token-value-1", "planted-password-value-2", "planted-unlisted-value-3"):
        assert planted not in text
    assert m.env["NCCL_DEBUG"] == "WARN"
    assert (m.container_image, m.container_image_digest) == ("suite:test", "sha256:abc")
    assert (m.seed, m.device_count, m.devices, m.nccl) == (7, 2, FACTS["devices"], "2.21.5")
    assert m.cpu_model and m.hostname and m.python


def test_git_commit_is_the_checkout_head():
    repo = Path(__file__).resolve().parents[2]
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    commit, dirty = env.git_info(repo)
    assert commit == head.stdout.strip() and len(commit) == 40
    assert dirty in (True, False)


def test_git_outside_a_checkout_uses_the_image_label(tmp_path, monkeypatch):
    monkeypatch.setenv("SUITE_GIT_COMMIT", "feedbeef")
    assert env.git_info(tmp_path) == ("feedbeef", None)


def test_torch_probe_reports_the_installed_torch():
    facts = env.torch_info()
    assert facts["torch"].split("+")[0] == version("torch").split("+")[0]
    assert isinstance(facts["devices"], list)
