"""The run's Ray driver as the runner sees it (suite/launch/ray/session.py), without Ray: a stand-in driver
that speaks the same protocol (ready file, one JSON job per stdin line, WORKDIR/ray_driver.json answers) shows
that one process serves several cells, that a hung job is stopped by the one supervision loop with nothing
left behind, and that a stopped driver is never given another job.  Also: the files channel's start lines and
the phases of a Ray cell."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
from pathlib import Path

import psutil
import pytest

from suite.launch.ray.session import Driver, group_pids, phases
from suite.launch.supervise import supervise

FAKE = textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path
    log, ready = sys.argv[2], sys.argv[3]
    Path(ready).write_text(json.dumps({"pid": os.getpid(), "import_s": 0.1, "connect_s": 0.2}))
    for line in sys.stdin:
        job = json.loads(line)
        if job["env"].get("HANG"):
            time.sleep(600)
        Path(job["workdir"], "ray_driver.json").write_text(json.dumps({"exit_code": int(job["env"].get("CODE", 0)),
                                                                       "pid": os.getpid()}))
    ''')


@pytest.fixture
def fake_driver(tmp_path):
    (tmp_path / "fake_ray_driver.py").write_text(FAKE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    driver = Driver("127.0.0.1:1", env, tmp_path, module="fake_ray_driver")
    yield driver
    driver.stop()


def _job(tmp_path: Path, name: str, **env) -> tuple[dict, Path]:
    workdir = tmp_path / name
    workdir.mkdir()
    return {"cell": "c.json", "workdir": str(workdir), "worker_module": "w", "env": env}, workdir


def test_one_driver_serves_several_cells_and_a_hung_one_is_stopped(tmp_path, fake_driver):
    facts = fake_driver.start()
    assert facts["pid"] == fake_driver.proc.pid and facts["start_s"] > 0
    answers = []
    for name, env in [("a", {}), ("b", {"CODE": "1"})]:
        job, workdir = _job(tmp_path, name, **env)
        out = supervise(fake_driver.submit(job, workdir), timeout_s=60, stop=threading.Event())
        assert not out.timed_out and out.stray_killed is None
        answers.append((out.returncode, json.loads((workdir / "ray_driver.json").read_text())["pid"]))
    assert answers == [(0, facts["pid"]), (1, facts["pid"])]  # the same process, each job's own exit code
    assert fake_driver.usable("127.0.0.1:1") and not fake_driver.usable("127.0.0.1:2")

    job, workdir = _job(tmp_path, "hung", HANG="1")
    out = supervise(fake_driver.submit(job, workdir), timeout_s=1.0, stop=threading.Event(), grace_s=5)
    assert out.timed_out and facts["pid"] in out.killed_pids
    assert not (workdir / "ray_driver.json").exists()
    assert not fake_driver.usable("127.0.0.1:1")  # stopped: the next cell gets a fresh driver
    assert not psutil.pid_exists(facts["pid"]) or psutil.Process(facts["pid"]).status() == psutil.STATUS_ZOMBIE
    assert group_pids(facts["pid"]) == []


def test_a_driver_that_cannot_connect_is_an_error_naming_its_log(tmp_path):
    (tmp_path / "dead_driver.py").write_text("import sys; sys.exit(3)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    driver = Driver("127.0.0.1:1", env, tmp_path, module="dead_driver")
    with pytest.raises(RuntimeError, match=r"did not connect to 127.0.0.1:1 \(exit code 3.*ray_driver.log"):
        driver.start()


def test_files_channel_start_files_group_by_attempt(tmp_path):
    pytest.importorskip("ray")
    from suite.launch.ray import rank_files
    from suite.launch.ray.rank_files import note_start

    (tmp_path / "cell.json").write_text("{}")
    facts = {"node_id": "n", "node_ip": "1.2.3.4", "hostname": "h", "pid": 1}
    assert [note_start(tmp_path, r, {**facts, "pid": 10 + r}, 2.0 + r) for r in (1, 0)] == [0, 0]
    assert note_start(tmp_path, 0, {**facts, "pid": 20}, 9.0) == 1  # the restarted group's rank 0 ...
    assert note_start(tmp_path, 1, {**facts, "pid": 21}, 9.5) == 1
    groups = rank_files.group_starts(rank_files.read_events(tmp_path))
    assert [[r["pid"] for r in g] for g in groups] == [[10, 11], [20, 21]]
    got = rank_files.from_events(tmp_path, fit_started=1.0, fit_returned=None)
    assert got["attempts"] == 2 and got["restarts"] == 1 and got["worker_group_setup_s"] == pytest.approx(1.0)


def test_phases_add_up_to_the_wall_and_one_time_costs_stay_out(tmp_path):
    (tmp_path / "rank0.json").write_text(json.dumps({"setup_s": {"total": 1.5}, "train_s": 3.0,
                                                     "extra": {"ray": {"checkpoint_save_s": 1.0}}}))
    facts = {"wait_nodes_s": 0.1, "worker_group_setup_s": 9.0, "teardown_s": 0.5, "best": {"restore_s": 0.4}}
    first = phases(facts, {"started_by": "this cell", "start_s": 5.0}, {"started_by": "this cell", "start_s": 4.0},
                   tmp_path, wall_s=15.0)
    assert first["train"] == pytest.approx(2.0) and first["checkpoint"] == pytest.approx(1.0)
    assert (first["cluster_start"], first["driver_start"]) == (5.0, 4.0)
    inside = [v for k, v in first.items() if k not in ("cluster_start", "driver_start", "wall")]
    assert sum(inside) == pytest.approx(15.0) and first["other"] == pytest.approx(0.5)
    later = phases(facts, {"started_by": "an earlier cell of this run", "start_s": None},
                   {"started_by": "an earlier cell of this run"}, tmp_path, wall_s=15.0)
    assert (later["cluster_start"], later["driver_start"]) == (0.0, 0.0)


def test_a_job_for_a_driver_that_died_is_a_clean_error(tmp_path, fake_driver):
    fake_driver.start()
    fake_driver.proc.kill()
    fake_driver.proc.wait()
    job, workdir = _job(tmp_path, "late")
    with pytest.raises(RuntimeError, match=r"the Ray driver \(pid \d+\) is gone.*ray_driver.log"):
        for _ in range(3):  # the first write may still land in the pipe's buffer
            fake_driver.submit(job, workdir)
    assert not fake_driver.usable("127.0.0.1:1")


def test_ctrl_c_while_the_driver_starts_stops_it(tmp_path):
    from suite.launch.ray.session import Interrupted

    (tmp_path / "slow_driver.py").write_text("import time; time.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    driver = Driver("127.0.0.1:1", env, tmp_path, module="slow_driver")
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    with pytest.raises(Interrupted):
        driver.start(stop)
    assert driver.proc.poll() is not None and not driver.usable("127.0.0.1:1")
