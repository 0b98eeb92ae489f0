"""noise.judge, compare's timing verdicts, on hand-made values: the three methods, their boundaries worked out
by hand, and their false-alarm and detection rates under simulated run-to-run noise (seeded)."""

from __future__ import annotations

import math
import random

import pytest

from suite.compare.noise import judge
from suite.stats import t_ppf

T95_4 = 2.131847  # t(0.95, df=4): 3 + 3 repeats


def test_repeats_boundary_is_threshold_plus_t_times_se():
    # 3 a side: nothing trimmed, so Yuen's test is Welch's t test on the logs
    base, cur = [0.100, 0.102, 0.098], [0.130, 0.128, 0.133]
    j = judge([base], cur, threshold=0.05, alpha=0.05)
    lb, lc = [math.log(v) for v in base], [math.log(v) for v in cur]
    mb, mc = sum(lb) / 3, sum(lc) / 3
    vb, vc = (sum((x - mb) ** 2 for x in lb) / 2 / 3, sum((x - mc) ** 2 for x in lc) / 2 / 3)
    df = (vb + vc) ** 2 / (vb ** 2 / 2 + vc ** 2 / 2)
    boundary = math.log(1.05) + t_ppf(0.95, df) * math.sqrt(vb + vc)
    assert j.method == "repeats" and j.verdict == "worse" and 2 <= df <= 4
    assert j.change == pytest.approx(math.exp(mc - mb) - 1)
    assert j.detectable == pytest.approx(math.expm1(boundary))
    assert j.noise == pytest.approx(math.expm1(math.sqrt(3 * (vb + vc) / 2)))
    assert "run-to-run sd" in j.noise_text and "3+3" in j.noise_text
    assert j.p_value < 0.05 and (j.n_baseline, j.n_current) == (3, 3)


def test_five_repeats_trim_the_extreme_launch():
    # one fast launch in the baseline (a mode of the machine, not the code): trimmed, it moves nothing
    base, cur = [0.100, 0.101, 0.099, 0.102, 0.070], [0.101, 0.100, 0.102, 0.099, 0.100]
    j = judge([base], cur, 0.05, 0.05)
    assert j.verdict == "same" and abs(j.change) < 0.01
    assert j.baseline == pytest.approx(math.exp(sum(math.log(v) for v in (0.100, 0.101, 0.099)) / 3))


def test_three_against_three_can_fire_at_alpha_005():
    # Mann-Whitney on 3 vs 3 medians could not: its smallest one-sided p is 1/C(6,3) = 0.05
    j = judge([[1.00, 1.01, 0.99]], [1.20, 1.21, 1.19], 0.05, 0.05)
    assert j.verdict == "worse" and j.p_value < 0.01


def test_a_big_change_inside_big_noise_is_not_flagged():
    j = judge([[0.10, 0.14, 0.08]], [0.12, 0.09, 0.15], 0.05, 0.05)
    assert j.verdict == "same" and j.change > 0.05 and j.detectable > 0.3 and j.p_value > 0.05


def test_one_slow_repeat_widens_the_band_instead_of_firing():
    j = judge([[1.0, 1.001, 0.999]], [1.0, 1.002, 1.3], 0.05, 0.05)
    assert j.verdict == "same" and j.change > 0.05


def test_history_band_and_verdicts():
    nights = [[0.100], [0.103], [0.097], [0.101], [0.099]]
    inside, slow = judge(nights, [0.104], 0.05, 0.05), judge(nights, [0.135], 0.05, 0.05)
    assert inside.method == slow.method == "history" and inside.n_baseline == 5
    assert inside.verdict == "same" and slow.verdict == "worse"
    assert inside.baseline == pytest.approx(0.100)  # the median night
    lo, hi = inside.band
    assert lo < 0.097 and hi > 0.103
    logs = sorted(math.log(v[0]) for v in nights)
    mad = sorted(abs(x - logs[2]) for x in logs)[2] * 1.4826 * 1.206  # 1.206: the small-sample factor at n=5
    reach = t_ppf(0.95, 2) * mad * math.sqrt(1 + math.pi / 10)  # (n - 1) / 2 = 2 degrees of freedom
    assert hi == pytest.approx(0.100 * math.exp(reach)) and slow.detectable == pytest.approx(
        math.expm1(math.log(1.05) + reach))
    assert "night-to-night sd" in slow.noise_text and "history of 5 runs" in slow.noise_text


def test_one_broken_night_does_not_blind_the_history():
    nights = [[0.100], [0.101], [0.099], [0.100], [0.200]]  # one night ran on a busy node
    j = judge(nights, [0.125], 0.05, 0.05)
    assert j.verdict == "worse" and j.baseline == pytest.approx(0.100) and j.detectable < 0.15


def test_repeats_of_history_runs_are_averaged_per_run():
    nights = [[0.1, 0.11, 0.1], [0.2], [0.1], [0.105], [0.1]]  # a run's repeats are one night's evidence
    j = judge(nights, [0.1], 0.05, 0.05)
    assert j.n_baseline == 5 and "their repeats: 1/3, current: 1" in j.noise_text
    assert judge(nights[:4], [0.1], 0.05, 0.05).method == "threshold"  # 4 runs are no history: the latest run


def test_a_spread_of_exactly_zero_is_no_noise_estimate():
    j = judge([[0.1, 0.1, 0.1]], [0.106, 0.106, 0.106], 0.05, 0.05)
    assert j.method == "threshold" and j.verdict == "worse" and j.p_value is None
    assert "spread of exactly 0" in j.noise_text
    assert judge([[0.1]] * 5, [0.104], 0.05, 0.05).method == "threshold"


def test_without_noise_estimate_only_the_threshold_counts():
    j = judge([[0.100]], [0.106], 0.05, 0.05)
    assert (j.method, j.verdict, j.p_value, j.noise) == ("threshold", "worse", None, None)
    assert j.detectable == pytest.approx(0.05) and "no noise estimate" in j.noise_text
    assert judge([[0.100, 0.1]], [0.104, 0.1, 0.1], 0.05, 0.05).method == "threshold"  # 2 repeats: too few
    assert judge([[0.100]], [0.104], 0.05, 0.05).verdict == "same"


def test_throughput_lower_is_worse():
    j = judge([[1000.0, 1010.0, 990.0]], [700.0, 705.0, 695.0], 0.05, 0.05, higher_is_worse=False)
    assert j.verdict == "worse" and j.change == pytest.approx(-0.3, abs=0.01)
    assert 0.05 < j.detectable < 0.3
    assert judge([[1000.0]], [1300.0], 0.05, 0.05, higher_is_worse=False).verdict == "better"


def test_bad_values_are_errors():
    with pytest.raises(ValueError, match="positive"):
        judge([[0.1]], [0.0], 0.05, 0.05)
    with pytest.raises(ValueError, match="both sides"):
        judge([], [0.1], 0.05, 0.05)


def _simulate(n: int, sd: float, factor: float, trials: int, seed: int, history: bool = False):
    """Flag rate and median detectable of `trials` comparisons with lognormal run-to-run noise `sd`."""
    rng = random.Random(seed)
    draw = lambda k, f: [f * math.exp(rng.gauss(0, sd)) for _ in range(k)]  # noqa: E731
    flags, detect = 0, []
    for _ in range(trials):
        base = [draw(1, 1.0) for _ in range(5)] if history else [draw(n, 1.0)]
        j = judge(base, draw(n, factor), 0.05, 0.05)
        flags += j.verdict == "worse"
        detect.append(j.detectable)
    return flags / trials, sorted(detect)[trials // 2]


@pytest.mark.parametrize("n", [3, 5])
def test_simulated_false_alarms_and_detection(n):
    # identical code with 5% run-to-run noise (as large as the threshold): false alarms far below alpha (the
    # threshold is a margin the change must clear with confidence, not a bar the point estimate must pass)
    assert _simulate(n, 0.05, 1.0, 2000, seed=1)[0] < 0.05 / 5
    rate30, detectable = _simulate(n, 0.03, 1.3, 500, seed=2)
    assert rate30 > 0.99 and detectable < 0.3
    # a true change equal to the median stated detectable change is flagged about half the time
    rate, _ = _simulate(n, 0.03, 1 + detectable, 1000, seed=3)
    assert 0.3 < rate < 0.7, (rate, detectable)
    # a true change exactly at the threshold is flagged at most alpha of the time (+3 sd of a 500-trial rate)
    assert _simulate(n, 0.03, 1.05, 500, seed=4)[0] < 0.05 + 3 * math.sqrt(0.05 * 0.95 / 500)


def test_simulated_history():
    assert _simulate(1, 0.03, 1.0, 2000, seed=5, history=True)[0] < 0.05 / 5
    assert _simulate(1, 0.03, 1.3, 500, seed=6, history=True)[0] > 0.95


@pytest.mark.parametrize("n", [5, 8])
def test_history_is_calibrated_at_the_threshold(n):
    # a true change exactly at the threshold is flagged alpha of the time (the MAD's (n-1)/2 degrees of
    # freedom; with n - 1 it was 7.7% at n = 5); below the threshold, less
    rng = random.Random(n)
    flagged = 0
    for _ in range(4000):
        nights = [[math.exp(rng.gauss(0, 0.1))] for _ in range(n)]
        flagged += judge(nights, [1.05 * math.exp(rng.gauss(0, 0.1))], 0.05, 0.05).verdict == "worse"
    assert 0.035 < flagged / 4000 < 0.065
