"""The long quality test judged in time to the same loss (lib/results/time_to_loss.py): the horizon rule, a loss cost
priced in steps on a synthetic power-law curve, net worth, the decision and its stated error rate in simulation."""

from __future__ import annotations

import numpy as np
import pytest

from lib.results import time_to_loss as ttl

A, B, C = 3.0, 10.0, 0.5  # a synthetic loss curve L(s) = A + B s^-C


def loss(s):
    return A + B * np.asarray(s, dtype=float) ** -C


def step_at(value):
    """The step at which L reaches `value` (the power law inverted)."""
    return ((value - A) / B) ** (-1 / C)


def curve(end=1000, every=1):
    steps = np.arange(every, end + 1, every)
    return steps, loss(steps)


# --- the horizon rule


@pytest.mark.parametrize("tokens, per_step", [(25_000_000, 131_072), (100_000_000, 131_072), (3_000_000, 4_096)])
def test_the_horizon_is_the_most_steps_within_four_passes(tokens, per_step):
    steps = ttl.horizon_steps(tokens, per_step)
    assert steps * per_step <= 4 * tokens < (steps + 1) * per_step
    assert steps >= ttl.MIN_STEPS


def test_the_horizon_is_refused_short_of_the_minimum():
    with pytest.raises(ValueError, match="early transient"):
        ttl.horizon_steps(1_400_000, 131_072)  # a small corpus at a large batch: 42 steps in four passes
    at_floor = ttl.MIN_STEPS * 131_072 // 4
    assert ttl.horizon_steps(at_floor, 131_072) == ttl.MIN_STEPS
    with pytest.raises(ValueError, match="at least"):
        ttl.horizon_steps(at_floor - 1, 131_072)
    assert ttl.horizon_steps(1_400_000, 131_072, min_steps=40) == 42  # the floor is the caller's to state
    assert ttl.horizon_steps(1_400_000, 131_072, max_passes=2.0, min_steps=1) == 21


def test_the_rule_is_one_sentence_stated_before_any_number():
    rule = ttl.horizon_rule()
    assert "at most 4 times" in rule and f"fewer than {ttl.MIN_STEPS} steps" in rule and rule.count(".") == 1


# --- a loss cost priced in steps


@pytest.mark.parametrize("cost", [0.002, 0.01, 0.05])
def test_a_loss_cost_becomes_the_steps_the_power_law_says(cost):
    steps, losses = curve()
    h = 1000
    expected = step_at(loss(h) + cost) / h
    progress = ttl.steps_behind(steps, losses, h, cost)
    assert progress == pytest.approx(expected, rel=1e-4) and progress < 1
    assert h / progress - h == pytest.approx(h / expected - h, rel=1e-3)  # the extra steps to the same loss


def test_a_lever_that_lowers_the_loss_makes_more_progress_understated_not_overstated():
    steps, losses = curve()
    h = 1000
    for gain in (0.001, 0.005):
        progress = ttl.steps_behind(steps, losses, h, -gain)
        exact = step_at(loss(h) - gain) / h
        assert 1 < progress <= exact  # the straight line past the curve's end reaches the target sooner
        assert progress == pytest.approx(exact, rel=0.02)
    # where the reference ran past the horizon, its own curve prices the gain
    longer = curve(2000)
    assert ttl.steps_behind(*longer, h, -0.005) == pytest.approx(step_at(loss(h) - 0.005) / h, rel=1e-4)


def test_a_noisy_curve_is_smoothed_without_pulling_its_horizon_down():
    rng = np.random.default_rng(11)
    steps, losses = curve()
    noisy = losses + rng.normal(0, 0.02, steps.size)  # per-step training loss noise larger than the cost priced
    h = 1000
    expected = step_at(loss(h) + 0.01) / h
    assert ttl.steps_behind(steps, noisy, h, 0.01) == pytest.approx(expected, abs=0.03)
    running_min = np.minimum.accumulate(noisy)
    assert running_min[-1] < loss(h) - 0.03  # why not a running minimum: it hugs the luckiest batches
    with pytest.raises(ValueError, match="does not fall"):
        ttl.steps_behind(steps, np.linspace(3, 4, steps.size), h, 0.01)
    with pytest.raises(ValueError, match="short of the horizon"):
        ttl.steps_behind(steps[::20], losses[::20], h, 0.01)  # steps 1 to 981: the loss at 1000 is not measured


# --- net worth


def test_five_percent_faster_for_three_percent_fewer_effective_steps_is_worth_one_point_eight_five():
    assert ttl.net_worth(1.05, 0.97) == pytest.approx(0.0185)
    assert ttl.net_worth(1.0, 1.0) == 0.0 and ttl.net_worth(1.05, 1 / 1.05) == pytest.approx(0.0)


def test_the_same_loss_cost_late_on_the_flat_curve_turns_the_verdict():
    early_h, late_h = 1000, 16000
    cost = float(loss(0.97 * early_h) - loss(early_h))  # 3 % fewer effective steps at the early horizon
    diffs = cost + np.array([-2e-5, -1e-5, 0, 1e-5, 2e-5, 0])  # a tight, well measured cost
    early = ttl.judge(1.05, 0.005, *curve(early_h), early_h, diffs)
    assert ttl.steps_behind(*curve(early_h), early_h, cost) == pytest.approx(0.97, abs=1e-4)
    assert early.net_worth == pytest.approx(0.0185, abs=2e-4) and early.decision == ttl.ADOPT
    late = ttl.judge(1.05, 0.005, *curve(late_h, every=16), late_h, diffs)
    assert late.net_worth < -0.05 and late.decision == ttl.SKIP
    assert (
        late.extra_steps > 4 * early.extra_steps / early_h * late_h
    )  # as a share of its horizon, over four times the steps


# --- the decision


def _diffs(mean, n=8, sd=0.01):
    pattern = np.random.default_rng(5).standard_normal(n)
    return mean + sd * (pattern - pattern.mean()) / pattern.std(ddof=1)


def test_the_decision_moves_from_adopt_through_not_yet_to_skip_as_the_cost_grows():
    steps, losses = curve()
    h, decisions, wanted = 1000, [], []
    for mean in (0.0, 0.003, 0.008, 0.016):
        v = ttl.judge(1.05, 0.01, steps, losses, h, _diffs(mean, sd=0.005), horizon_tokens=h * 131_072)
        decisions.append(v.decision)
        assert v.net_worth_interval[0] < v.net_worth < v.net_worth_interval[1]
        assert v.extra_steps_interval[0] < v.extra_steps < v.extra_steps_interval[1]
        assert v.diff_interval[0] < v.mean_diff < v.diff_interval[1] and v.mean_diff == pytest.approx(mean)
        assert "1000 steps, 131.1M tokens" in v.covers and "not beyond it" in v.covers and v.n == 8
        wanted.append(v.seeds_to_decide)
    assert decisions == [ttl.ADOPT, ttl.NOT_YET, ttl.NOT_YET, ttl.SKIP]
    # 0.003 nats: more seeds would adopt it; 0.008: its mean net worth lies within the speed noise, none would
    assert wanted[0] is None and 8 < wanted[1] <= 64 and wanted[2] is None and wanted[3] is None


def test_not_yet_names_the_seeds_that_would_decide_it_or_none_within_the_noise():
    steps, losses = curve()
    h = 1000
    v = ttl.judge(1.05, 0.01, steps, losses, h, _diffs(0.003, n=4, sd=0.005))
    assert v.decision == ttl.NOT_YET and 4 < v.seeds_to_decide <= 64
    # at that many seeds, a test whose true mean and spread are those measured adopts in about 80 % of cases
    rng, coarse = np.random.default_rng(3), curve(1000, every=20)
    draws = 0.003 + 0.005 * rng.standard_normal((300, v.seeds_to_decide))
    adopted = np.mean([ttl.judge(1.05, 0.01, *coarse, h, d).decision == ttl.ADOPT for d in draws])
    assert 0.7 < adopted < 0.92
    # a mean net worth within the speed noise: no number of seeds decides it
    within = float(loss(h / 1.05) - loss(h))  # net worth 0 at the mean
    assert ttl.judge(1.05, 0.01, steps, losses, h, _diffs(within)).seeds_to_decide is None
    one = ttl.judge(1.05, 0.01, steps, losses, h, [0.0])
    assert one.decision == ttl.NOT_YET and one.seeds_to_decide is None and one.diff_interval == (-np.inf, np.inf)


def _boundary_cost(steps, losses, h, worth):
    """The loss cost whose net worth at speedup 1.05 is exactly `worth` (bisection on the rule's own pricing)."""
    lo, hi = -0.05, 0.2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ttl.net_worth(1.05, ttl.steps_behind(steps, losses, h, mid)) > worth else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("side", [ttl.ADOPT, ttl.SKIP])
def test_at_the_boundary_the_rule_keeps_its_stated_error_rate(side):
    """2,000 simulated tests of 8 seeds whose true net worth is exactly +speed_noise (adopt) or -speed_noise (skip):
    that decision comes in about (1 - confidence)/2 of them, as the interval's one tail says."""
    steps, losses = curve(1000, every=10)
    h, noise, confidence = 1000, 0.01, 0.95
    cost = _boundary_cost(steps, losses, h, noise if side == ttl.ADOPT else -noise)
    rng = np.random.default_rng(20261127)
    draws = cost + 0.02 * rng.standard_normal((2000, 8))
    rate = np.mean([ttl.judge(1.05, noise, steps, losses, h, d, confidence).decision == side for d in draws])
    assert rate == pytest.approx((1 - confidence) / 2, abs=0.012)


def test_a_zero_loss_cost_is_the_horizon_itself_also_where_the_reference_stopped_improving():
    """On the CPU default's long test the reference's held-out loss rose after a third of its run (a tiny model
    overfitting its text); the smoothed curve ended in one flat block, and a lever with no loss cost at all was
    priced at that block's middle step (progress 0.6, a net worth of -37 %). A zero cost is now the horizon itself,
    and a small cost on a flat end only moves the lever back to where the curve last had that loss."""
    steps = np.arange(1, 11) * 100.0
    loss = np.array([6.2, 5.2, 5.18, 5.35, 5.41, 5.51, 5.56, 5.63, 5.69, 5.71])  # falls, then rises
    assert ttl.steps_behind(steps, loss, 1000, 0.0) == pytest.approx(1.0)
    assert 0.0 < ttl.steps_behind(steps, loss, 1000, 0.01) < 1.0
    assert ttl.steps_behind(steps, loss, 1000, -0.01) > 1.0  # a lever that lowers the loss gets there sooner
