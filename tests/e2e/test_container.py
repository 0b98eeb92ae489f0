"""Containers end to end: the image, `docker compose run suite FILE`, and one cell through the Docker SDK.

Docker is installed and started by scripts/docker-setup (called once per session by the `images` fixture),
which also builds the registry-free base image and the suite image; both are cached between runs on one
machine (a warm setup takes seconds). Everything these tests create carries the label suite.test=<session> or runs
in a compose project named suite-test-<session>-*, and the session ends by checking that none of it is left.
"""

from __future__ import annotations

import json
import os
import sys
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from suite.launch import container, torchrun
from suite.results.schema import CellResult, Manifest, RankRecord
from suite.runner.cell import launch_request, write_payload
from suite.scenario import Cell, load_cells

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# One value per test session: sessions of other people on the same daemon do not see each other's leftovers.
SESSION = uuid.uuid4().hex[:8]
TEST_LABEL = f"suite.test={SESSION}"
PROJECT_PREFIX = f"suite-test-{SESSION}-"


def sh(*args, check=True, timeout=900, env=None, cwd=ROOT) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=None if env is None else {**os.environ, **env})
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


def leftovers() -> dict[str, list[str]]:
    """Containers, networks and volumes made by these tests (by label or test compose project) still present."""
    found = {}
    for kind in ("container", "network", "volume"):
        names = set()
        for flt in (f"label={TEST_LABEL}", "label=com.docker.compose.project"):
            cmd = ["docker", kind, "ls", "-q", "--filter", flt] + (["-a"] if kind == "container" else [])
            fmt = "{{.Names}}" if kind == "container" else "{{.Name}}"
            out = sh(*cmd, "--format", fmt).stdout.split()
            names |= {n for n in out if flt == f"label={TEST_LABEL}" or PROJECT_PREFIX in n}
        found[kind] = sorted(names)
    return found


@pytest.fixture(scope="session")
def images():
    """Docker running, compose v2 present, suite:latest built on the local base (scripts/docker-setup)."""
    sh(ROOT / "scripts" / "docker-setup", timeout=3600)
    before = leftovers()
    digest = sh("docker", "image", "inspect", "-f", "{{.Id}}", "suite:latest").stdout.strip()
    revision = sh("git", "rev-parse", "HEAD").stdout.strip()
    yield {"image": "suite:latest", "digest": digest, "revision": revision}
    after = leftovers()
    assert after == before == {"container": [], "network": [], "volume": []}, f"left behind: {after}"


@pytest.fixture
def compose(images, tmp_path):
    """compose(*args) runs `docker compose` at the project root in a private project, results in tmp_path."""
    project = f"{PROJECT_PREFIX}{uuid.uuid4().hex[:6]}"
    results = tmp_path / "results"
    results.mkdir()
    env = {"COMPOSE_PROJECT_NAME": project, "SUITE_RESULTS_DIR": str(results)}

    def run(*args, check=True, timeout=900):
        return sh("docker", "compose", *args, check=check, timeout=timeout, env=env)

    run.results = results
    yield run
    everything = ["--profile", "cli", "--profile", "ray", "--profile", "ray-driver"]
    sh("docker", "compose", *everything, "down", "--remove-orphans", "--volumes", "--timeout", "5", env=env)
    # a `run` container whose client was killed (a test timeout) is stopped and removed here too
    stray = sh("docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}").stdout.split()
    if stray:
        sh("docker", "rm", "-f", *stray)
        sh("docker", "compose", *everything, "down", "--remove-orphans", "--volumes", env=env)


@pytest.fixture(scope="session")
def host_reference(tmp_path_factory):
    """The smoke scenario's zero2 cell run on the host with the torchrun launcher: its rank-0 loss curve."""
    cell = small_cell("zero2", steps=None)
    workdir = tmp_path_factory.mktemp("host")
    result = torchrun.run_cell(write_payload(cell, launch_request(cell, workdir, "cpu", timeout_s=600)),
                               stop=threading.Event())
    assert result.returncode == 0, result.error
    losses = records(workdir)[0].losses
    assert len(losses) == cell.steps
    return cell, losses


def small_cell(strategy: str = "ddp", steps: int | None = 6, cell_id: str | None = None) -> Cell:
    """The smoke scenario's cell for `strategy` (2 CPU ranks, gpt-tiny), optionally shortened or renamed."""
    _, cells = load_cells(str(ROOT / "scenarios" / "smoke.yaml"))
    cell = next(c for c in cells if c.strategy == strategy)
    changes = {**({"steps": steps, "warmup_steps": 1} if steps else {}), **({"id": cell_id} if cell_id else {})}
    return Cell.model_validate({**cell.model_dump(), **changes})


def records(workdir: Path) -> list[RankRecord]:
    return [RankRecord.model_validate_json(p.read_text()) for p in sorted(workdir.glob("rank*.json"))]


def test_image_labels_user_and_entry_point(images, tmp_path):
    import tomllib

    labels = json.loads(sh("docker", "image", "inspect", "-f", "{{json .Config.Labels}}", images["image"]).stdout)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.revision"].removesuffix("-dirty") == images["revision"]
    assert labels["org.opencontainers.image.base.name"] == "suite-base:bookworm"
    run = ["docker", "run", "--rm", "--label", TEST_LABEL]
    # non-root by default
    assert sh(*run, images["image"], "--exec", "id", "-u").stdout.strip() == "10001"
    # started as root (as compose does), the entry point drops to the owner of the results folder
    owned = tmp_path / "owned"
    owned.mkdir()
    os.chown(owned, 12345, 12346)
    out = sh(*run, "--user", "root", "-v", f"{owned}:/workspace/results", images["image"],
             "--exec", "sh", "-c", "id -u; id -g; touch /workspace/results/f").stdout.split()
    assert out == ["12345", "12346"]
    assert (owned / "f").stat().st_uid == 12345
    # `IMAGE ARGS` is `suite ARGS`
    assert sh(*run, images["image"], "version").stdout.strip()


def test_compose_files_lint(images):
    sh("docker", "compose", "config", "-q")
    everything = ["--profile", "cli", "--profile", "ray", "--profile", "ray-driver"]
    cpu = sh("docker", "compose", *everything, "config", "--format", "json").stdout
    gpu = sh("docker", "compose", *everything, "config", "--format", "json",
             env={"COMPOSE_FILE": "compose.yaml:compose/gpu.yaml"}).stdout
    cpu, gpu = json.loads(cpu), json.loads(gpu)
    assert set(cpu["services"]) == {"suite", "ray-head", "ray-worker", "suite-ray"}
    # `docker compose up` starts only the Ray cluster; `suite` and `suite-ray` are for `run`
    assert sh("docker", "compose", "--profile", "ray", "config", "--services").stdout.split() == \
        ["ray-head", "ray-worker"]
    assert all("deploy" not in svc and "memlock" not in svc.get("ulimits", {}) for svc in cpu["services"].values())
    devices = gpu["services"]["suite"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and devices[0]["count"] == -1
    assert gpu["services"]["suite"]["ipc"] == "host"
    assert all(gpu["services"][s]["ulimits"]["memlock"] == -1 for s in ("suite", "ray-head", "ray-worker"))
    assert cpu["services"]["ray-worker"]["environment"]["RAY_AUTH_MODE"] == "disabled"


def test_compose_validate_and_plan(compose):
    """`docker compose run suite validate|plan FILE` at the project root sees the project's scenario files."""
    assert "ok" in compose("run", "--rm", "-l", TEST_LABEL, "suite", "validate", "scenarios/smoke.yaml").stdout
    _, cells = load_cells(str(ROOT / "scenarios" / "smoke.yaml"))
    plan = compose("run", "--rm", "-l", TEST_LABEL, "suite", "plan", "scenarios/smoke.yaml", "--json").stdout
    assert all(c.id in plan for c in cells)


def test_compose_run_smoke_writes_results_on_the_host(compose, images, host_reference):
    """The README's command, `docker compose run suite scenarios/smoke.yaml` (here the zero2 cell and the ddp
    cell its match gate needs): results on the host, the image digest in the manifest, the host's losses."""
    cell, host_losses = host_reference
    out = compose("run", "--rm", "-l", TEST_LABEL, "suite", "scenarios/smoke.yaml", "--only", cell.id,
                  timeout=1800)
    runs = sorted((compose.results / "smoke").iterdir())
    assert len(runs) == 1, out.stdout
    manifest = Manifest.model_validate_json((runs[0] / "manifest.json").read_text())
    assert manifest.container_image == images["image"]
    assert manifest.container_image_digest == images["digest"]
    assert manifest.git_commit.removesuffix("-dirty") == images["revision"]  # from the image (no .git inside)
    # compose names the host (not Docker's random container id): every run here is one machine to compare
    assert manifest.hostname == os.environ.get("SUITE_HOSTNAME", "suite")
    results = {r.cell_id: r for r in (CellResult.model_validate_json(p.read_text())
                                      for p in (runs[0] / "cells").glob("*.json"))}
    assert len(results) == 2 and all(r.status == "ok" for r in results.values()), \
        {k: (r.status, r.error) for k, r in results.items()}
    assert results[cell.id].losses == pytest.approx(host_losses, rel=1e-6, abs=0)
    assert all(p.stat().st_uid == os.getuid() for p in runs[0].rglob("*"))


def test_suite_run_image_runs_cells_in_containers(images, tmp_path, host_reference, monkeypatch):
    """`suite run FILE --image IMAGE` on the host: every cell in a fresh container (Docker SDK), the image and
    its digest in the manifest, the host's losses, records owned by the host user, no container left."""
    cell, host_losses = host_reference
    monkeypatch.setenv("SUITE_CONTAINER_LABELS", TEST_LABEL)
    suite = Path(sys.executable).parent / "suite"
    proc = sh(suite, "run", "scenarios/smoke.yaml", "--only", cell.id, "--image", images["image"],
              "--results", tmp_path, check=False, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = sorted((tmp_path / "smoke").iterdir())
    manifest = Manifest.model_validate_json((run / "manifest.json").read_text())
    assert (manifest.container_image, manifest.container_image_digest) == (images["image"], images["digest"])
    result = CellResult.model_validate_json(next((run / "cells").glob(f"{cell.id}-*.json")).read_text())
    assert result.status == "ok" and result.launcher == "container", result.error
    assert result.losses == pytest.approx(host_losses, rel=1e-6, abs=0)
    assert all(p.stat().st_uid == os.getuid() for p in run.rglob("*"))
    assert sh("docker", "ps", "-aq", "--filter", f"label={TEST_LABEL}").stdout.split() == []


def test_sdk_timeout_and_stop_remove_the_container(images, tmp_path, monkeypatch):
    """A hanging cell is stopped at its timeout, a Ctrl-C (the stop event) stops another; both are removed."""
    monkeypatch.setenv("SUITE_CONTAINER_LABELS", TEST_LABEL)
    hang = small_cell("ddp", steps=50, cell_id="hangs")
    monkeypatch.setenv("SUITE_FAULT", "hangs:hang@2")
    (tmp_path / "t").mkdir()
    t0 = time.monotonic()
    timed = container.run_cell(write_payload(hang, launch_request(hang, tmp_path / "t", "cpu", timeout_s=25,
                                                                  image=images["image"])),
                               stop=threading.Event(), grace_s=3)
    assert timed.timed_out and not timed.interrupted and "timeout" in timed.error, \
        (timed, (tmp_path / "t" / "launcher.log").read_text()[-3000:])
    assert time.monotonic() - t0 < 25 + 300  # a hang guard only: timed_out above says it stopped at its timeout
    stop = threading.Event()
    threading.Timer(15, stop.set).start()
    (tmp_path / "s").mkdir()
    stopped = container.run_cell(write_payload(hang, launch_request(hang, tmp_path / "s", "cpu", timeout_s=600,
                                                                    image=images["image"])),
                                 stop=stop, grace_s=3)
    assert stopped.interrupted and not stopped.timed_out
    left = sh("docker", "ps", "-aq", "--filter", f"label={TEST_LABEL}").stdout.split()
    assert left == []


@pytest.fixture(scope="session")
def ray_image(images):
    sh(ROOT / "scripts" / "docker-setup", "--ray", timeout=3600)
    return "suite:ray"


@pytest.mark.long  # builds the ray image too (minutes on a fresh machine) and runs 73 s after it
def test_compose_ray_cluster_runs_a_two_node_cell_across_worker_containers(compose, ray_image, tmp_path):
    """`docker compose up` gives a head and two workers, each a node with its own address; `suite-ray` (a
    CPU-less node of that cluster) runs a `nodes: 2` Ray cell: one rank per worker container, the loss curve of
    the same cell under torchrun on the host, the ray image's digest in the manifest."""
    _, cells = load_cells(str(ROOT / "scenarios" / "ray-multinode-cpu.yaml"))
    cell = next(c for c in cells if c.strategy == "ddp")
    compose("--profile", "ray", "up", "-d", "--wait", "--scale", "ray-worker=2", timeout=600)
    workers = compose("--profile", "ray", "ps", "-q", "ray-worker").stdout.split()
    assert len(workers) == 2
    compose("--profile", "ray", "run", "--rm", "-T", "-l", TEST_LABEL, "suite-ray",
            "scenarios/ray-multinode-cpu.yaml", "--only", cell.id, timeout=1500)
    (run,) = sorted((compose.results / "ray-multinode-cpu").iterdir())
    result = CellResult.model_validate_json(next((run / "cells").glob(f"{cell.id}-*.json")).read_text())
    assert result.status == "ok" and result.launcher == "ray", result.error
    assert len({r.node_ip for r in result.ranks}) == 2  # two distinct node addresses
    assert sorted(r.hostname for r in result.ranks) == sorted(w[:12] for w in workers)  # one rank per worker
    manifest = Manifest.model_validate_json((run / "manifest.json").read_text())
    ray_digest = sh("docker", "image", "inspect", "-f", "{{.Id}}", ray_image).stdout.strip()
    assert (manifest.container_image, manifest.container_image_digest) == (ray_image, ray_digest)
    # the same cell on one node under torchrun, on the host: the same losses
    local = Cell.model_validate({**cell.model_dump(), "launcher": "torchrun", "nodes": 1})
    host = torchrun.run_cell(write_payload(local, launch_request(local, tmp_path, "cpu", timeout_s=600)),
                             stop=threading.Event())
    assert host.returncode == 0, host.error
    assert result.losses == pytest.approx(records(tmp_path)[0].losses, rel=1e-5, abs=0)
