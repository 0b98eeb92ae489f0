"""The sweep's ledger (suite/sweep/ledger.py): what starts where under each schedule, who shared a node, retries."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from suite.sweep.ledger import ALL_NODES, Ledger, Want, queue_order

TWO_SMALL = {"n1": {"CPU": 1.0}, "n2": {"CPU": 1.0}}
TWO_BIG = {"n1": {"CPU": 4.0}, "n2": {"CPU": 4.0}}


def wants(*sizes: float) -> list[Want]:
    return [Want(f"c{i}-r0", {"CPU": float(s)}) for i, s in enumerate(sizes)]


def test_pack_starts_a_job_wherever_its_cpus_are_free_and_the_next_when_one_ends():
    ledger = Ledger("pack", wants(1, 1, 1))
    assert ledger.assign(TWO_SMALL) == [("c0-r0", "n1"), ("c1-r0", "n2")]
    assert ledger.assign(TWO_SMALL) == []  # both nodes full
    ledger.begin("c1-r0", "n2")
    ledger.end("c1-r0")
    assert ledger.assign(TWO_SMALL) == [("c2-r0", "n2")]


def test_pack_fills_a_node_with_several_jobs_and_smaller_ones_fill_what_a_larger_leaves():
    ledger = Ledger("pack", wants(3, 2, 1, 1))
    assert ledger.assign(TWO_BIG) == [("c0-r0", "n1"), ("c1-r0", "n2"), ("c2-r0", "n1"), ("c3-r0", "n2")]
    assert ledger.free(TWO_BIG) == {"n1": {"CPU": 0.0}, "n2": {"CPU": 1.0}}


def test_node_runs_at_most_one_job_per_node_even_where_resources_would_allow_more():
    ledger = Ledger("node", wants(1, 1, 1))
    assert ledger.assign(TWO_BIG) == [("c0-r0", "n1"), ("c1-r0", "n2")]
    assert ledger.assign(TWO_BIG) == []


def test_serial_runs_one_job_at_a_time_in_the_whole_cluster():
    ledger = Ledger("serial", wants(1, 1))
    assert ledger.assign(TWO_BIG) == [("c0-r0", "n1")]
    assert ledger.assign(TWO_BIG) == []
    ledger.end("c0-r0")
    assert ledger.assign(TWO_BIG) == [("c1-r0", "n1")]


def test_an_exclusive_job_waits_for_an_empty_cluster_and_nothing_passes_it():
    queue = [Want("a-r0", {"CPU": 1.0}), Want("ray-r0", {"CPU": 2.0}, exclusive=True), Want("b-r0", {"CPU": 1.0})]
    ledger = Ledger("pack", queue)
    assert ledger.assign(TWO_BIG) == [("a-r0", "n1")]  # the exclusive job now waits at the head
    assert ledger.assign(TWO_BIG) == []
    ledger.end("a-r0")
    assert ledger.assign(TWO_BIG) == [("ray-r0", ALL_NODES)]
    assert ledger.assign(TWO_BIG) == []  # it has the whole cluster
    ledger.end("ray-r0")
    assert ledger.assign(TWO_BIG) == [("b-r0", "n1")]


def test_a_job_no_node_can_hold_is_named_with_the_numbers():
    ledger = Ledger("pack", wants(2, 1))
    [(key, why)] = ledger.unplaceable(TWO_SMALL)
    assert key == "c0-r0" and "CPU 2" in why and "largest alive node has CPU 1" in why and "2 node(s)" in why
    assert ledger.assign(TWO_SMALL) == [("c1-r0", "n1")]


def test_an_exclusive_job_over_more_nodes_than_the_cluster_has_is_named():
    ledger = Ledger("pack", [Want("ray-r0", {"CPU": 2.0}, exclusive=True, nodes=2)])
    [(key, why)] = ledger.unplaceable({"n1": {"CPU": 4.0}})
    assert key == "ray-r0" and "spreads over 2 nodes; the cluster has 1 alive" in why
    assert not ledger.queue


def test_queue_order_is_largest_first_within_a_round_and_keeps_the_run_order_among_equals():
    keys = [("ref-r0", 0, 1), ("big-r0", 0, 4), ("b-r0", 0, 1), ("ref-r1", 1, 1), ("big-r1", 1, 4)]
    assert queue_order(keys) == ["big-r0", "ref-r0", "b-r0", "big-r1", "ref-r1"]


def test_neighbours_are_other_jobs_on_the_same_node_during_the_timed_steps():
    ledger = Ledger("pack", wants(1, 1, 1, 1))
    ledger.begin("c0-r0", "n1", at=0.0)
    ledger.timed("c0-r0", (10.0, 20.0))
    ledger.end("c0-r0", at=21.0)
    ledger.begin("c1-r0", "n1", at=15.0)  # same node, inside c0's timed steps
    ledger.end("c1-r0", at=30.0)
    ledger.begin("c2-r0", "n2", at=11.0)  # another node
    ledger.end("c2-r0", at=19.0)
    ledger.begin("c3-r0", "n1", at=0.0)  # same node, but ended before c0's timed steps began
    ledger.end("c3-r0", at=9.0)
    assert ledger.shared_with("c0-r0") == ["c1-r0"]
    assert ledger.shared_with("c2-r0") == []
    record = ledger.record("c0-r0")
    assert record == {"mode": "pack", "node": "n1", "attempts": 1, "lost_on": [], "shared_with": ["c1-r0"]}


def test_an_exclusive_job_shares_every_node():
    ledger = Ledger("pack", [Want("ray-r0", {"CPU": 2.0}, exclusive=True), *wants(1)])
    ledger.begin("ray-r0", ALL_NODES, at=0.0)
    ledger.end("ray-r0", at=10.0)
    ledger.begin("c0-r0", "n2", at=5.0)
    ledger.timed("c0-r0", (6.0, 8.0))
    assert ledger.shared_with("c0-r0") == ["ray-r0"]


def test_a_lost_attempt_goes_back_to_the_front_and_the_tries_are_bounded():
    ledger = Ledger("pack", wants(1, 1, 1), max_attempts=2)
    assert ledger.assign(TWO_SMALL) == [("c0-r0", "n1"), ("c1-r0", "n2")]
    ledger.begin("c1-r0", "n2", at=1.0)
    assert ledger.lost("c1-r0", at=2.0) is True
    alive = {"n1": {"CPU": 1.0}}
    ledger.end("c0-r0")
    assert ledger.assign(alive) == [("c1-r0", "n1")]  # before c2, which waited longer in the queue
    assert ledger.begin("c1-r0", "n1", at=3.0) == 2
    assert ledger.record("c1-r0")["lost_on"] == ["n2"] and ledger.record("c1-r0")["attempts"] == 2
    assert ledger.lost("c1-r0") is False  # a third try would exceed max_attempts
    assert [w.key for w in ledger.queue] == ["c2-r0"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["pack", "node", "serial"]), st.lists(st.integers(1, 4), min_size=1, max_size=12),
       st.lists(st.integers(1, 4), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_no_schedule_oversubscribes_a_node_and_node_never_doubles_up(mode, sizes, node_cpus, rnd):
    nodes = {f"n{i}": {"CPU": float(c)} for i, c in enumerate(node_cpus)}
    ledger = Ledger(mode, wants(*sizes))
    ledger.unplaceable(nodes)
    running: dict[str, str] = {}
    for _ in range(100):
        for key, node in ledger.assign(nodes):
            running[key] = node
        used: dict[str, float] = {}
        for key, node in running.items():
            used[node] = used.get(node, 0.0) + ledger.needs[key].resources["CPU"]
        assert all(used[n] <= nodes[n]["CPU"] for n in used)
        if mode == "node":
            assert len(set(running.values())) == len(running)
        if mode == "serial":
            assert len(running) <= 1
        if not running:
            break
        done = rnd.choice(sorted(running))
        ledger.end(done)
        running.pop(done)
    assert not ledger.queue and not running


def test_two_one_gpu_cells_on_a_one_gpu_node_are_serialised_by_the_gpu_even_under_pack():
    node = {"gpu-node": {"CPU": 16.0, "GPU": 1.0}}
    ledger = Ledger("pack", [Want("a-r0", {"GPU": 1.0, "CPU": 1.0}), Want("b-r0", {"GPU": 1.0, "CPU": 1.0})])
    assert ledger.assign(node) == [("a-r0", "gpu-node")]
    assert ledger.assign(node) == []  # 15 CPUs free, no GPU: b waits
    ledger.begin("a-r0", "gpu-node", at=0.0)
    ledger.end("a-r0", at=5.0)
    assert ledger.assign(node) == [("b-r0", "gpu-node")]
    ledger.begin("b-r0", "gpu-node", at=5.5)
    ledger.end("b-r0", at=9.0)
    assert ledger.shared_with("a-r0") == [] and ledger.shared_with("b-r0") == []
