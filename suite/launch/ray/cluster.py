"""A private Ray cluster of N nodes on this machine, started and stopped by pid (tests, and `suite run` alone).

    with LocalCluster(nodes=2, cpus_per_node=1) as cluster:
        ... ray.init(address=cluster.address) / suite run --ray-address cluster.address ...

Each node is one `ray start --block` process: the head (`--head --port=P`) and N-1 workers
(`--address=HEAD`).  They are real Ray nodes - each has its own raylet, object store and resources - that
happen to share a host, so placement across nodes (STRICT_SPREAD, per-node label selectors) behaves as on a
real cluster; that is what the multi-node tests need.

Why `--block`: a blocking `ray start` stays the parent of its node's processes (gcs, raylet, workers) and
kills all of them when it receives SIGTERM, so stopping the cluster is "SIGTERM the N pids we started, wait,
SIGKILL whatever we saw that is left" (suite.launch.supervise.stop_gracefully, as a cell is stopped) -
nothing is killed by name (`ray stop` would kill every Ray process of the machine, other people's included).

Settings every private cluster needs on Ray 2.60 (see ../shared/environment.md):
- RAY_AUTH_MODE=disabled for every Ray process (2.60 turns token authentication on by default and a second
  node does not join a head without it);
- no dashboard (--include-dashboard=false) and no usage reporting (RAY_USAGE_STATS_ENABLED=0): closed
  networks, and nothing leaves the machine;
- a short temp dir (Ray's Unix socket paths must stay under ~107 characters);
- no drain on SIGTERM (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0): stopping took 31 s instead of 1.5 s.
Do not set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: on Linux that *disables* multi-node clusters.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from suite import lifeline
from suite.launch.supervise import alive, stop_gracefully

PRIVATE_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
# A node that gets SIGTERM first asks to be drained and waits up to this long for its leases to end (30 s by
# default); a private cluster's head holds Ray Train's detached helper actors, so it always waited it out.
NODE_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
STOP_GRACE_S = 30.0
WORKERS_FIRST_S = 10.0  # stopping: the worker nodes get this long to exit before the head is stopped
WAIT_POLL_S = 0.1  # starting: how often the head is asked which nodes are up (a GCS client opened, one call)


def ray_executable() -> str:
    """The `ray` CLI of this interpreter's environment (next to python), else the one on PATH."""
    here = Path(sys.executable).parent / "ray"
    found = str(here) if here.exists() else shutil.which("ray")
    if not found:
        raise RuntimeError("the `ray` command is not installed; install suite's ray extra: pip install 'suite[ray]'")
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NodesHandle:
    """A cluster's node launchers as one supervise.Handle, for stop_gracefully: SIGTERM the `ray start --block`
    processes (workers first, head last: each stops its own node's processes), and once they are gone or the
    grace period is over, SIGKILL every process of the cluster ever seen that is still alive."""

    def __init__(self, procs: list[subprocess.Popen], seen: dict[int, psutil.Process]):
        self.procs, self.seen = procs, seen

    def poll(self) -> int | None:
        codes = [p.poll() for p in self.procs]
        return None if None in codes else 0

    def running(self) -> bool:
        return self.poll() is None

    def terminate(self) -> list[int]:
        """Workers first, and the head once they are gone (or after WORKERS_FIRST_S): a worker node whose head
        went away first waits out its reconnection timeout (30 s seen) before it exits."""
        workers = [p for p in self.procs[1:] if p.poll() is None]
        for p in workers:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + WORKERS_FIRST_S
        while time.monotonic() < deadline and any(p.poll() is None for p in workers):
            time.sleep(0.05)
        head = [p for p in self.procs[:1] if p.poll() is None]
        for p in head:
            p.send_signal(signal.SIGTERM)
        return [p.pid for p in workers + head]

    def kill(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.kill()
        for p in self.seen.values():
            if alive(p):
                with contextlib.suppress(psutil.NoSuchProcess):  # it exited since alive() looked
                    p.kill()

    def wait(self) -> int | None:
        for p in reversed(self.procs):
            p.wait()
        psutil.wait_procs([p for p in self.seen.values() if alive(p)], timeout=10)
        return 0


class LocalCluster:
    """N Ray nodes on this host; `start()` returns once every node is up, `stop()` leaves no process behind."""

    def __init__(self, nodes: int = 2, cpus_per_node: float = 1, gpus_per_node: int = 0,
                 env: dict[str, str] | None = None, temp_dir: str | None = None, start_timeout_s: float = 180,
                 lean: bool = False):
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        self.nodes, self.cpus, self.gpus = nodes, cpus_per_node, gpus_per_node
        self.env = {**os.environ, **PRIVATE_ENV, **NODE_ENV, **(env or {})}
        self._own_temp = temp_dir is None
        self.temp_dir = temp_dir or tempfile.mkdtemp(prefix="suite-ray-", dir="/tmp")
        self.start_timeout_s = start_timeout_s
        # lean: no autoscaler monitor (the cluster is fixed) and no log monitor (no driver reads the workers'
        # output), for drivers that run only Ray Core tasks.  The Ray launcher shows its workers' output and Ray
        # Train was never tried without the autoscaler, so clusters with Ray Train cells keep both.  On this 2-core
        # machine: every node up in 3.1 s instead of 4.0-5.8 s, stopped in 0.95 s instead of 1.5-2.1 s.
        self.lean = lean
        self.port = 0
        self.procs: list[subprocess.Popen] = []
        self.seen: dict[int, psutil.Process] = {}  # every process of the cluster observed so far
        self.started_s: float | None = None  # seconds start() took
        self._t0 = 0.0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _node_cmd(self, head: bool) -> list[str]:
        cmd = [ray_executable(), "start", "--block", f"--num-cpus={self.cpus:g}", f"--num-gpus={self.gpus}",
               "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
        if self.lean:
            cmd += ["--include-log-monitor=false"] + (["--no-monitor"] if head else [])
        if head:
            return cmd + ["--head", f"--port={self.port}", "--include-dashboard=false",
                          f"--temp-dir={self.temp_dir}"]
        return cmd + [f"--address={self.address}"]

    def _spawn(self, head: bool, index: int) -> None:
        log = open(Path(self.temp_dir) / f"node{index}.log", "wb")
        # A new session: a Ctrl-C in the terminal goes to the runner/test only, which stops the cluster itself.
        # Tied to this process (lifeline.run_guarded): a runner killed hard takes its private cluster along.
        env = {**self.env, lifeline.PARENT_ENV: str(os.getpid())}
        self.procs.append(subprocess.Popen(lifeline.guarded_command(self._node_cmd(head)), env=env, stdout=log,
                                           stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True))
        log.close()

    def start(self, wait_nodes: int | None = None) -> str:
        """Start the head and the workers; wait until the cluster reports every node alive (`wait_nodes`: only
        that many - a sweep starts work on the head while the other nodes join)."""
        t0 = time.monotonic()
        self.port = free_port()
        try:
            self._spawn(head=True, index=0)
            self._wait(1, t0)
            for i in range(1, self.nodes):
                self._spawn(head=False, index=i)
            self._wait(self.nodes if wait_nodes is None else max(1, min(wait_nodes, self.nodes)), t0)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - t0
        return self.address

    def spawn(self) -> None:
        """Start every node at once and return (the workers retry until the head answers); `wait_up` waits.
        From the thread that will outlive the cluster: the nodes' lifeline fires when their parent thread ends."""
        self.port = free_port()
        self._t0 = time.monotonic()
        try:
            for i in range(self.nodes):
                self._spawn(head=i == 0, index=i)
        except BaseException:
            self.stop()
            raise

    def wait_up(self, nodes: int = 1) -> str:
        """After spawn(): wait until `nodes` nodes are alive; the address."""
        try:
            self._wait(max(1, min(nodes, self.nodes)), self._t0)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - self._t0
        return self.address

    def running_nodes(self) -> int:
        """Nodes whose `ray start` process still runs (those that may still join)."""
        return sum(1 for p in self.procs if p.poll() is None)

    def alive_nodes(self) -> int | None:
        """Alive nodes as the head's GCS sees them (None while the head does not answer)."""
        from ray._raylet import GcsClient  # imported late: ray is an optional extra

        try:
            client = GcsClient(address=self.address)
            nodes = client.get_all_node_info(timeout=5)
        except Exception:  # noqa: BLE001 - any connection error just means "not up yet"; _wait times out
            return None
        return sum(1 for info in nodes.values() if info.state == 0)  # GcsNodeInfo.ALIVE == 0

    def _wait(self, n: int, t0: float) -> None:
        while True:
            self._remember()
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a Ray node exited during start (exit code {dead[0].returncode}); "
                                   f"see {self.temp_dir}/node*.log")
            alive = self.alive_nodes()
            if alive is not None and alive >= n:
                return
            if time.monotonic() - t0 > self.start_timeout_s:
                raise TimeoutError(f"Ray cluster: {alive or 0} of {n} nodes up after {self.start_timeout_s:g} s; "
                                   f"see {self.temp_dir}/node*.log")
            time.sleep(WAIT_POLL_S)

    def _remember(self) -> None:
        for p in self.procs:
            try:
                root = psutil.Process(p.pid)
                self.seen.setdefault(root.pid, root)
                for child in root.children(recursive=True):
                    self.seen.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                continue

    def pids(self) -> list[int]:
        """Pids of every cluster process seen so far (node launchers, gcs, raylets, Ray workers)."""
        self._remember()
        return sorted(self.seen)

    def stop(self) -> list[int]:
        """SIGTERM the node launchers (workers first, head last), SIGKILL leftovers; returns pids still alive
        after that (empty when the cluster is fully gone)."""
        self._remember()
        stop_gracefully(_NodesHandle(self.procs, self.seen), STOP_GRACE_S)
        self.procs = []
        if self._own_temp:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        return sorted(p.pid for p in self.seen.values() if alive(p))

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
