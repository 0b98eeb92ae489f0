"""Run one cell in a fresh container through the Docker SDK (`suite run FILE --image IMAGE`).

The container runs the same torchrun command as the torchrun launcher (suite/launch/torchrun.py), with the
image's Python instead of the host's:

    python3 -m torch.distributed.run --standalone --nproc_per_node=N -m suite.worker CELL_JSON WORKDIR

What goes in is explicit, so a result depends on the image and the cell, not on the host's shell:
- mounts: the cell's work folder read-write at the same absolute path (CELL_JSON and the rank records keep
  their host paths), the current directory read-only at the same path (relative data paths resolve as on the
  host), and a CIFAR-10 root read-write when the cell may download into it;
- environment: an allowlist (threads, NCCL/GLOO/TORCH/CUDA knobs, SUITE_FAULT), never the whole environment;
- devices: on cuda, a device request for every GPU (or the ones CUDA_VISIBLE_DEVICES names on the host,
  which then are not passed on: inside the container the GPUs are renumbered from 0);
- shared memory and the ulimits PyTorch needs; the host user's uid:gid, so the records belong to the user.

The container's output is streamed into the cell's launcher.log; the cell's timeout and the runner's stop
event (Ctrl-C) stop it (SIGTERM, then SIGKILL after a grace period), and it is removed afterwards whatever
happened.  A runner killed hard (SIGKILL, OOM killer) cannot remove it: a watchdog process does, and the next
container launch removes any whose runner is dead (suite/launch/container_watch.py).  The image's digest (its registry digest when it has one, else its local image id) is returned in
`LaunchResult.extra["image_digest"]` and given by `image_identity()` for the run's manifest.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
import time
from pathlib import Path
from typing import Any, Callable

from suite.launch import LaunchRequest, LaunchResult, container_watch
from suite.launch.supervise import GRACE_S, outcome_error, supervise
from suite.launch.torchrun import command as torchrun_command, environment
from suite.results.env import allowed_env

LABEL = "io.github.suite.launcher"  # every container this launcher creates carries it (cleanup, tests)
SHM_SIZE = "8g"  # PyTorch DataLoader workers / NCCL use /dev/shm; Docker's default is 64 MB
# As NVIDIA's PyTorch containers recommend: a 64 MiB stack, and unlimited locked memory for GPU hosts (pinned
# memory, NCCL over InfiniBand). Raising memlock needs CAP_SYS_RESOURCE in the daemon, which unprivileged or
# nested daemons (CI machines) lack, so CPU cells do not ask for it.
STACK = {"stack": (67108864, 67108864)}
GPU_ULIMITS = {"memlock": (-1, -1), **STACK}
# Host variables that only describe the host: never passed into the container.
HOST_ONLY = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "SUITE_IMAGE", "SUITE_IMAGE_DIGEST")


def _docker():
    """The Docker SDK, imported only when a container is asked for."""
    try:
        import docker
    except ImportError as exc:
        raise RuntimeError("the container launcher needs the Docker SDK for Python: "
                           "pip install 'suite[docker]' (or pip install docker)") from exc
    return docker


def client():
    """A client for the local daemon ($DOCKER_HOST or the default socket), with a clear error when none runs."""
    docker = _docker()
    try:
        c = docker.from_env()
        c.ping()
    except docker.errors.DockerException as exc:
        raise RuntimeError(f"no Docker daemon answers ({exc}); start it, e.g. with scripts/docker-setup") from exc
    return c


def image_identity(image: str, docker_client=None) -> tuple[str, str]:
    """(reference, digest) of a local image: the registry digest `name@sha256:...` when it was pulled or
    pushed, else the content-addressed image id `sha256:...` (a locally built image has no registry digest)."""
    c = docker_client or client()
    try:
        img = c.images.get(image)
    except _docker().errors.ImageNotFound as exc:
        raise RuntimeError(f"image {image!r} is not on this machine: build it (scripts/docker-setup) "
                           f"or pull it first") from exc
    repo_digests = img.attrs.get("RepoDigests") or []
    return image, (repo_digests[0] if repo_digests else img.id)


def container_env(request: LaunchRequest, host_env: dict[str, str] | None = None) -> dict[str, str]:
    """The container's environment: the allowlisted host variables plus the launcher's per-cell settings."""
    base = {k: v for k, v in allowed_env(host_env).items() if k not in HOST_ONLY}
    env = environment(request, base=base)
    env.pop("PATH", None)  # the image's PATH (its virtualenv) must win
    return env


def device_requests(device: str, host_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """GPU requests for the daemon's NVIDIA runtime: all GPUs, or those CUDA_VISIBLE_DEVICES lists on the host.
    Plain dicts (DeviceRequest's fields) so spec building needs no SDK; run_cell converts them."""
    if device != "cuda":
        return []
    env = os.environ if host_env is None else host_env
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        return [{"Driver": "nvidia", "DeviceIDs": [d.strip() for d in visible.split(",") if d.strip()],
                 "Capabilities": [["gpu"]]}]
    return [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}]


def mounts(request: LaunchRequest, cwd: Path) -> dict[str, dict[str, str]]:
    """Bind mounts, host path -> {bind, mode} (docker-py's `volumes` form), all at their host paths: the
    project read-only, the work folder and the request's writable folders (relative to cwd) read-write."""
    workdir = str(request.workdir)
    spec = {str(cwd): {"bind": str(cwd), "mode": "ro"}, workdir: {"bind": workdir, "mode": "rw"}}
    for folder in request.writable_dirs:
        root = (cwd / folder).resolve()
        root.mkdir(parents=True, exist_ok=True)  # a bind mount of a missing path would be created as root
        spec[str(root)] = {"bind": str(root), "mode": "rw"}
    return spec


def _resolved(request: LaunchRequest) -> LaunchRequest:
    """The request with absolute paths: the container sees the host's paths, whatever the runner's cwd."""
    return replace(request, workdir=Path(request.workdir).resolve(), payload=Path(request.payload).resolve())


def container_spec(request: LaunchRequest, image: str | None = None, *, host_env: dict[str, str] | None = None,
                   cwd: Path | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for `client.containers.create(**spec)`: everything the container gets, in one dict.
    `image` defaults to the request's."""
    request = _resolved(request)
    cwd = (cwd or Path.cwd()).resolve()
    cmd = torchrun_command(request)
    device = request.device
    return {
        "image": image or request.image,
        "entrypoint": ["python3"],  # the image's interpreter (its virtualenv's, first on the image's PATH)
        "command": cmd[1:],         # torchrun's arguments, minus the host's sys.executable
        "environment": container_env(request, host_env),
        "volumes": mounts(request, cwd),
        "working_dir": str(cwd),
        "user": f"{os.getuid()}:{os.getgid()}",
        "device_requests": device_requests(device, host_env),
        "shm_size": SHM_SIZE,
        "ulimits": GPU_ULIMITS if device == "cuda" else STACK,
        "init": True,  # a real PID 1 reaps the ranks and forwards the stop signal
        "labels": {LABEL: "container", "io.github.suite.cell": request.label, **_env_labels(host_env),
                   **(labels or {})},  # run_cell adds the runner's (container_watch.runner_labels)
        "detach": True,
    }


def _env_labels(host_env: dict[str, str] | None) -> dict[str, str]:
    """Extra labels from SUITE_CONTAINER_LABELS="k=v,k2=v2" (tests tag what they create, to check cleanup)."""
    text = (os.environ if host_env is None else host_env).get("SUITE_CONTAINER_LABELS", "")
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


def _to_sdk(spec: dict[str, Any]) -> dict[str, Any]:
    docker = _docker()
    out = dict(spec)
    out["device_requests"] = [docker.types.DeviceRequest(driver=r["Driver"], count=r.get("Count", 0),
                                                         device_ids=r.get("DeviceIDs"),
                                                         capabilities=r["Capabilities"])
                              for r in spec["device_requests"]]
    out["ulimits"] = [docker.types.Ulimit(name=n, soft=s, hard=h) for n, (s, h) in spec["ulimits"].items()]
    return out


def _stream_logs(container, log_path: Path) -> threading.Thread:
    def pump():
        with open(log_path, "ab") as log:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                log.write(chunk)
                log.flush()
    thread = threading.Thread(target=pump, name=f"logs-{container.short_id}", daemon=True)
    thread.start()
    return thread


class ContainerHandle:
    """A started container (supervise.Handle): signals go to its PID 1 (init), which forwards them to torchrun."""

    def __init__(self, container):
        self.container = container

    def poll(self) -> int | None:
        return self.wait() if not self.running() else None

    def running(self) -> bool:
        self.container.reload()
        return self.container.status not in ("exited", "dead")

    def _signal(self, sig: str) -> None:
        try:
            self.container.kill(signal=sig)
        except _docker().errors.APIError:
            if self.running():  # "is not running" (it exited meanwhile) is what a stop is for; anything else is not
                raise

    def terminate(self) -> None:
        self._signal("SIGTERM")  # no pids to report: the container's processes are the daemon's, not ours

    def kill(self) -> None:
        if self.running():
            self._signal("SIGKILL")

    def wait(self) -> int | None:
        return self.container.wait()["StatusCode"]


def run_cell(request: LaunchRequest, *, stop: threading.Event, on_poll: Callable[[], None] | None = None,
             grace_s: float = GRACE_S, docker_client=None) -> LaunchResult:
    """The torchrun command in a fresh container of `request.image` (else $SUITE_IMAGE); never left behind."""
    image = request.image or os.environ.get("SUITE_IMAGE")
    request = _resolved(request)
    log_path = request.workdir / "launcher.log"
    result = LaunchResult(launcher="container", log_path=log_path)
    if not image:
        result.error = "the container launcher needs an image (suite run --image IMAGE, or SUITE_IMAGE)"
        return result
    if request.nodes > 1:
        result.error = (f"nodes {request.nodes} > 1: a per-cell container is one node; run multi-node cells on the "
                        f"compose Ray cluster (compose/ray.yaml)")
        return result
    spec = container_spec(request, image)
    result.extra.update(image=image, command=spec["command"])
    container = watchdog = None
    try:
        try:  # a launch that cannot start is a failed cell with a reason, not a crashed run
            c = docker_client or client()
            result.extra["image"], result.extra["image_digest"] = image_identity(image, c)
            swept = container_watch.sweep_orphans(c, LABEL)  # left by runners killed hard
            if swept:
                result.extra["orphans_removed"] = swept
            spec["labels"].update(container_watch.runner_labels())
            container = c.containers.create(**_to_sdk(spec))
            result.extra["container"] = container.short_id
            watchdog = container_watch.start_watchdog(container.id, log_path)
            result.started = time.time()
            container.start()
        except (RuntimeError, _docker().errors.DockerException) as exc:
            result.error = f"container launch failed: {exc}"
            result.ended = time.time()
            return result
        logs = _stream_logs(container, log_path)
        result.take(supervise(ContainerHandle(container), timeout_s=request.timeout_s, stop=stop,
                              on_poll=on_poll, grace_s=grace_s))
        logs.join(timeout=10)
    finally:
        if watchdog is not None:
            container_watch.stop_watchdog(watchdog)
        if container is not None:
            container.remove(force=True)  # also on Ctrl-C (KeyboardInterrupt) and on errors above
    result.error = outcome_error(result, request.timeout_s, log_path)
    return result
