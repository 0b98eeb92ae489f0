"""The machine a timing was measured on (suite/machine/): the sampler sees a planted neighbour and not the
launch's own processes, NVML's answers become typed state, the quiet policy waits / warns / refuses, and compare
says "machine state differs" instead of calling a busy machine a regression."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.compare.check import Side, quiet_history
from suite.compare.comparison import compare
from suite.console import EXIT_ENVIRONMENT
from suite.machine import nvml, proc
from suite.machine.policy import QuietPolicy, Thresholds, busy, differences, wait_until_quiet
from suite.machine.sampler import Sampler
from suite.machine.state import Competitor, GpuState, MachineState, Snapshot
from suite.results.reader import load_runs
from suite.results.schema import Gate
from suite.runner import cell as cell_mod, session as session_mod
from suite.testing.busy import BusyLoop
from tests.scenario_texts import infeasible

PASS = [Gate(name="match", passed=True, detail="within rtol")]


def state(cpu: float = 0.0, mhz: float = 2600.0, throttle: tuple[str, ...] = (), gpu: str | None = None,
          driver: str = "580") -> MachineState:
    snap = Snapshot(at=0.0, cpu_count=2, cpu_mhz=mhz,
                    gpus=[GpuState(index=0, name=gpu, driver=driver)] if gpu else [])
    who = [Competitor(pid=4242, name="stress", cpu=cpu)] if cpu else []
    return MachineState(window="train", window_s=10.0, interval_s=0.5, samples=20, competing_cpu=cpu,
                        competing_cpu_peak=cpu, competitors=who, cpu_mhz_min=mhz, gpu_throttle=list(throttle),
                        before=snap, after=snap)


# ------------------------------------------------------------------------------------------------ the sampler

def test_proc_reads_this_process_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        procs = proc.processes()
        me = procs[os.getpid()]
        assert me.cpu_s > 0 and me.started > 0
        assert child.pid in proc.descendants(os.getpid(), procs)
        assert proc.loadavg() is not None and proc.cpu_count() >= 1 and proc.mem_available() > 0
    finally:
        child.kill()
        child.wait()


def test_the_sampler_counts_a_planted_neighbour_and_not_the_launchs_own_processes():
    own = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 2.5: pass"])
    with BusyLoop() as neighbour:
        with Sampler(interval=0.25, gpus=False) as sampler:
            time.sleep(2.5)
        own.wait()
    st = sampler.state()
    pids = [c.pid for c in st.competitors]
    assert neighbour.pid in pids and own.pid not in pids, st.competitors
    assert st.competing_cpu >= 0.5 and st.competing_cpu_peak >= st.competing_cpu * 0.5
    assert st.window == "launch" and st.samples >= 5 and st.gpu_note == "no GPU state: not asked for"
    assert busy(st) and "competing CPU load" in busy(st)[0] and f"pid {neighbour.pid}" in busy(st)[0]


def test_a_process_naming_the_work_folder_is_the_launchs_own():
    """A container's or Ray's worker is not the runner's child: its command line naming the work folder marks it."""
    with BusyLoop() as outsider:
        marked = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 2: pass",
                                   "cell-abc-r0-a1"], start_new_session=True)
        with Sampler(mark="cell-abc-r0-a1", interval=0.25, gpus=False, root=1 << 30) as sampler:
            time.sleep(2)
        marked.wait()
    pids = [c.pid for c in sampler.state().competitors]
    assert outsider.pid in pids and marked.pid not in pids


def test_the_window_is_the_timed_steps_when_known():
    with Sampler(interval=0.2, gpus=False) as sampler:
        time.sleep(0.3)
        with BusyLoop():
            began = time.time()
            time.sleep(1.5)
            ended = time.time()
        time.sleep(0.6)
    whole, timed = sampler.state(), sampler.state((began, ended))
    assert timed.window == "train" and abs(timed.window_s - (ended - began)) < 0.01
    assert timed.competing_cpu > whole.competing_cpu  # the quiet edges are left out


# ------------------------------------------------------------------------------------------------------ NVML

class FakeNvml:
    """NVML's bindings as nvml.py calls them: one H200 held down by a thermal slowdown, one process not ours."""

    class NVMLError(Exception):
        pass

    def __init__(self, unsupported=()):
        self.unsupported = set(unsupported)

    def __getattr__(self, name):
        raise AttributeError(name)

    def _call(self, name, value):
        if name in self.unsupported:
            raise self.NVMLError(name)
        return value

    def nvmlDeviceGetCount(self): return 1
    def nvmlSystemGetDriverVersion(self): return b"580.159.04"
    def nvmlDeviceGetHandleByIndex(self, i): return "h0"
    def nvmlDeviceGetName(self, h): return "NVIDIA H200"
    def nvmlDeviceGetClockInfo(self, h, kind): return self._call("clock", 1980 if kind == nvml.NVML_CLOCK_SM else 3201)
    def nvmlDeviceGetMaxClockInfo(self, h, kind): return 1980
    def nvmlDeviceGetPowerUsage(self, h): return self._call("power", 75_500)
    def nvmlDeviceGetEnforcedPowerLimit(self, h): return 700_000
    def nvmlDeviceGetTemperature(self, h, kind): return 26
    def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=97, memory=40)
    def nvmlDeviceGetCurrentClocksEventReasons(self, h): return 0x1 | 0x20  # idle (ignored) + sw thermal
    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter): return self._call("ecc", 0)
    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=1), SimpleNamespace(pid=1, usedGpuMemory=1)]

    def nvmlShutdown(self):
        self.shut = True


def test_a_sampled_gpu_state_reaches_the_result_and_nvml_is_closed(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setattr(nvml, "open_nvml", lambda: (fake, None))
    with Sampler(interval=0.1) as sampler:
        time.sleep(0.35)
    st = sampler.state()
    assert st.gpu_throttle == ["sw_thermal"] and [o.pid for o in st.gpu_others] == [1]
    assert st.gpu_sm_clock_min_mhz == 1980 and st.before.gpus[0].name == "NVIDIA H200" and st.gpu_note is None
    assert getattr(fake, "shut", False)
    gpu_reasons = [why for why in busy(st) if not why.startswith("competing CPU")]  # the CPU: whatever else runs
    assert gpu_reasons == ["GPU throttled: sw_thermal", f"other processes on the GPU: {st.gpu_others[0].name} (pid 1)"]


def test_nvml_answers_become_typed_state_and_unsupported_queries_none():
    g, = nvml.gpu_states(FakeNvml(unsupported={"power", "ecc"}), ours=lambda pid: pid == os.getpid())
    assert (g.name, g.driver, g.sm_clock_mhz, g.max_sm_clock_mhz, g.mem_clock_mhz) == ("NVIDIA H200", "580.159.04",
                                                                                        1980, 1980, 3201)
    assert g.power_w is None and g.ecc_errors is None and g.power_limit_w == 700.0 and g.utilization_pct == 97
    assert g.throttle_reasons == ["sw_thermal"] and [p.pid for p in g.other_processes] == [1]


def test_without_the_bindings_the_state_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert nvml.open_nvml() == (None, "no GPU state: NVML's bindings are not installed (pip install nvidia-ml-py)")


def test_a_gpu_throttled_or_shared_is_busy():
    st = state().model_copy(update={"gpu_throttle": ["hw_thermal"],
                                    "gpu_others": [Competitor(pid=7, name="other-train", cpu=0.0)]})
    assert busy(st) == ["GPU throttled: hw_thermal", "other processes on the GPU: other-train (pid 7)"]
    assert busy(st, Thresholds(gpu_throttle=False, gpu_others=False)) == []


# ---------------------------------------------------------------------------------------- policy and compare

def test_differences_name_what_differed_and_by_how_much():
    assert differences(state(), state()) == []
    assert differences(None, state()) is None
    said = differences(state(), state(cpu=1.02, mhz=1800.0, gpu="NVIDIA H100"))
    assert said[0].startswith("current: competing CPU load 1.02 CPUs > 0.50") and "stress (pid 4242) 1.02" in said[0]
    assert "CPU clock 2,600 -> 1,800 MHz (-31%)" in said
    assert differences(state(gpu="NVIDIA H200"), state(gpu="NVIDIA H100")) == ["GPU model NVIDIA H200 -> NVIDIA H100"]


def test_the_quiet_policy_waits_warns_or_refuses():
    looks = iter([state(cpu=1.0), state(cpu=1.0), state()])
    notes: list[str] = []
    go, reasons, _ = wait_until_quiet(QuietPolicy(mode="wait", probe_s=0.01), notes.append, lambda s: next(looks))
    assert go and reasons == [] and len(notes) == 2 and notes[0].startswith("waiting for a quiet machine")
    go, reasons, _ = wait_until_quiet(QuietPolicy(mode="refuse"), notes.append, lambda s: state(cpu=1.0))
    assert not go and "competing CPU load 1.00" in reasons[0]
    go, _, _ = wait_until_quiet(QuietPolicy(mode="warn"), notes.append, lambda s: state(cpu=1.0))
    assert go and notes[-1].startswith("warning: the machine is busy: competing CPU load")
    started = time.monotonic()
    go, _, _ = wait_until_quiet(QuietPolicy(mode="wait", max_wait_s=0.3, probe_s=0.1), notes.append,
                                lambda s: (time.sleep(s), state(cpu=1.0))[1])
    assert not go and time.monotonic() - started < 2
    looks = iter([state(cpu=1.0)] * 3)  # Ctrl-C during a long wait: no more looks
    go, _, _ = wait_until_quiet(QuietPolicy(mode="wait", max_wait_s=600, probe_s=0.01), notes.append,
                                lambda s: next(looks), stopped=lambda: True)
    assert not go and len(list(looks)) == 2


@pytest.fixture
def cells():
    return make_cells(strategy=["ddp", "zero1"])


def _runs(tmp_path, cells, base_state, cur_state, slow=1.0, name="x"):
    base = write_run(tmp_path / f"{name}-base", make_manifest(), [
        make_result(c, repeat=k, seed=k, gates=PASS, noise=0.01).model_copy(update={"machine": base_state})
        for c in cells for k in range(3)])
    cur = write_run(tmp_path / f"{name}-cur", make_manifest(run_no=2), [
        make_result(c, repeat=k, seed=10 + k, gates=PASS, noise=0.01, step_time_s=0.1 * slow).model_copy(
            update={"machine": cur_state}) for c in cells for k in range(3)])
    return base, cur


def _timing(result):
    return {(f.cell_id, f.metric): f for f in result.findings if f.metric in ("step_time", "tokens_per_s")}


def test_a_busy_side_makes_timing_verdicts_machine_differs_not_regressions(cli, tmp_path, cells):
    base, cur = _runs(tmp_path, cells, state(), state(cpu=1.0), slow=2.5)
    res = compare(load_runs([base]), load_runs([cur]))
    timing = _timing(res)
    assert {f.verdict for f in timing.values()} == {"machine-differs"} and res.regressions == []
    assert all("machine state differs: current: competing CPU load 1.00 CPUs" in f.detail for f in timing.values())
    assert all("the timing alone reads regression" in f.detail for f in timing.values())
    term = cli("compare", base, cur)
    assert term.exit_code == 0, term.output
    assert "4 timing check(s) on machines that differed" in " ".join(term.stdout.split())
    strict = compare(load_runs([base]), load_runs([cur]), strict=True)
    assert {f.verdict for f in _timing(strict).values()} == {"regression"}
    assert all("--strict: judged anyway" in f.detail for f in _timing(strict).values())
    assert cli("compare", base, cur, "--strict").exit_code == 1


def test_quiet_machines_still_catch_a_planted_slowdown_and_compare_clean(tmp_path, cells):
    base, cur = _runs(tmp_path, cells, state(), state(), slow=1.3, name="slow")
    assert {f.verdict for f in _timing(compare(load_runs([base]), load_runs([cur]))).values()} == {"regression"}
    base, cur = _runs(tmp_path, cells, state(), state(), slow=1.0, name="same")
    assert {f.verdict for f in _timing(compare(load_runs([base]), load_runs([cur]))).values()} == {"unchanged"}


def test_results_without_a_state_say_machine_state_unknown(tmp_path, cells):
    base, cur = _runs(tmp_path, cells, None, state(), slow=1.3)
    timing = _timing(compare(load_runs([base]), load_runs([cur])))
    assert {f.verdict for f in timing.values()} == {"regression"}
    assert all(f.detail.endswith("machine state unknown (a result without one)") for f in timing.values())


def test_a_busy_stored_run_is_left_out_of_the_history_band(cells):
    runs = [[make_result(cells[0], seed=k).model_copy(update={"machine": state(cpu=2.0 if k == 1 else 0.0)})]
            for k in range(4)] + [[make_result(cells[0], seed=9).model_copy(update={"machine": state(cpu=2.0)})]]
    side = Side(run=None, results=runs[-1], history=[(None, rs) for rs in runs])
    kept = quiet_history(side)
    assert [rs[0].machine.competing_cpu for rs in kept] == [0.0, 0.0, 0.0, 2.0]  # the latest always stays


# ------------------------------------------------------------------------------------------------ suite run

@pytest.fixture
def scenario(write_scenario, monkeypatch):
    monkeypatch.setattr(session_mod, "torch_info", lambda: {"torch": "x", "cuda": None, "nccl": None, "devices": []})

    def slow_launch(request, *, stop, on_poll):
        time.sleep(1.5)
        raise RuntimeError("no worker here: the machine state is what is looked at")

    monkeypatch.setattr(cell_mod, "launch", slow_launch)
    return write_scenario(infeasible("busy").replace("gpus: 64", "gpus: 2").replace("[ddp, zero1]", "ddp"))


def test_a_launch_records_the_machine_around_it(cli, scenario, tmp_path):
    with BusyLoop() as neighbour:
        assert cli("run", scenario, "--results", tmp_path / "r").exit_code == 1
    run, = load_runs([tmp_path / "r"])
    st = run.results[0].machine
    assert st is not None and st.window == "launch" and st.window_s >= 1.4
    assert st.competing_cpu >= 0.5 and neighbour.pid in [c.pid for c in st.competitors]


def test_require_quiet_waits_then_refuses_a_busy_machine_naming_the_load_and_its_source(cli, scenario, tmp_path):
    with BusyLoop() as neighbour:
        started = time.monotonic()
        result = cli("run", scenario, "--results", tmp_path / "r", "--require-quiet", "wait", "--quiet-wait", "5")
        waited = time.monotonic() - started
    assert result.exit_code == EXIT_ENVIRONMENT, result.stderr
    text = " ".join(result.stderr.split())
    assert "waiting for a quiet machine" in text and "the machine is busy after waiting up to 5 s" in text
    assert "competing CPU load" in text and f"(pid {neighbour.pid})" in text
    assert 3 < waited < 30


def test_machine_command_reports_the_node(cli):
    with BusyLoop() as neighbour:
        busy_now = cli("machine", "--seconds", "1")
    assert busy_now.exit_code == 1 and f"(pid {neighbour.pid})" in busy_now.stdout
    assert "cpus:" in busy_now.stdout and "busy: competing CPU load" in " ".join(busy_now.stdout.split())
    bad = cli("run", "x.yaml", "--require-quiet", "sometimes")
    assert bad.exit_code == 2 and "expected wait, warn or refuse" in bad.stderr


def test_preflight_records_the_node_in_the_manifest(cli, write_scenario, tmp_path, monkeypatch):
    monkeypatch.setattr(session_mod, "torch_info", lambda: {"torch": "x", "cuda": None, "nccl": None, "devices": []})
    path = write_scenario(infeasible("pre"))  # nothing runnable: no all-reduce, only the machine
    result = cli("run", path, "--results", tmp_path / "r", "--preflight")
    assert result.exit_code == 0, result.stderr
    assert "preflight: the machine is" in result.stderr
    run, = load_runs([tmp_path / "r"])
    node = MachineState.model_validate(run.manifest.extra["machine"])
    assert node.before.cpu_count >= 1 and node.window == "launch"


def test_a_different_set_of_packages_is_an_environment_difference(cli, tmp_path, cells):
    from suite.results.env import packages_digest

    digest, count = packages_digest()
    assert len(digest) == 16 and count > 10 and packages_digest() == (digest, count)
    results = [make_result(c, gates=PASS) for c in cells]
    base = write_run(tmp_path / "a", make_manifest(packages_digest="0" * 16), results)
    cur = write_run(tmp_path / "b", make_manifest(run_no=2, packages_digest=digest), results)
    res = compare(load_runs([base]), load_runs([cur]))
    assert [(d.field, d.baseline, d.current) for d in res.env] == [("packages", "0" * 16, digest)]
    refused = cli("compare", base, cur, "--strict")
    assert refused.exit_code == 2 and "differ in packages" in refused.stderr
    assert cli("compare", base, cur, "--strict", "--ignore-env", "packages").exit_code == 0


def test_the_site_shows_the_machine_state_beside_each_point(cli, tmp_path, cells):
    root = tmp_path / "results"
    for n, st in ((1, state()), (2, state(cpu=1.0))):
        write_run(root, make_manifest(run_no=n), [make_result(c, gates=PASS, seed=n).model_copy(update={"machine": st})
                                                   for c in cells])
    site = tmp_path / "site"
    assert cli("publish", root, "--out", site).exit_code == 0
    page = next((site / "s" / "fixture").glob(f"cell-{cells[0].id}.html")).read_text()
    assert "<th>machine state</th>" in page and "quiet (others 0.00 CPUs)" in page
    assert "busy: competing CPU load 1.00 CPUs &gt; 0.50" in page and "machine state differs" in page
