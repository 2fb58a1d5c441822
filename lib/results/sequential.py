"""The sequential design of the parity test: paired seeds are added in rounds, and after each round (a look) the test
decides or goes on, with error rates that hold for the whole design, not for one look.

At a look with n paired seeds, for each loss the statistic is t = (mean - margin) / (sd / sqrt(n)), sd the seeds'
own standard deviation. The lever holds where every loss has t <= -c, is worse where one has t >= +c, and the test
goes on to the next look otherwise; after the last look it is undecided. One critical value c serves every look (a
Pocock boundary). It is found by simulation, not from a table: normal paired differences whose true mean is exactly
the margin (the hardest case; t does not depend on their spread) are put through the same looks, and c is the
smallest value for which "holds" is declared at any look in at most alpha of them. By symmetry "worse" is then
declared in at most alpha of the differences whose true mean is the margin, and less often the farther below it.
A fixed sample of 400,000 simulated tests (seeded) makes c a function of the looks and alpha alone, the same on
every machine. A stop for futility (parity.py) only ever ends a test undecided, so it never raises these rates.
"""

from __future__ import annotations

import functools
import math

import numpy as np

SIMULATIONS = 400_000
SIM_SEED = 20261127


def _t_paths(looks: tuple[int, ...], sims: int, seed: int, shift: float = 0.0) -> np.ndarray:
    """(sims, len(looks)) t statistics of standard normal paired differences (mean `shift`, in units of their sd)
    against a margin of 0, at each look's number of seeds."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((sims, looks[-1])) + shift
    out = np.empty((sims, len(looks)))
    for k, n in enumerate(looks):
        head = x[:, :n]
        out[:, k] = head.mean(axis=1) / (head.std(axis=1, ddof=1) / math.sqrt(n))
    return out


@functools.lru_cache(maxsize=32)
def critical_value(looks: tuple[int, ...], alpha: float) -> float:
    """The one critical value of the module docstring for these looks (cumulative seeds, each at least 2) and alpha."""
    _check(looks)
    worst = np.min(_t_paths(looks, SIMULATIONS, SIM_SEED), axis=1)  # the lowest t over the looks: "holds" at c if <= -c
    return float(-np.quantile(worst, alpha))


def error_rates(looks: tuple[int, ...], alpha: float, shift: float, sims: int = 100_000, seed: int = 1) -> dict:
    """In simulated tests whose true mean difference is `shift` sd from the margin (0: at it; negative: below it),
    how often each outcome comes, and the mean number of seeds spent: for the tests and the method section."""
    c = critical_value(looks, alpha)
    t = _t_paths(looks, sims, seed, shift)
    holds_at = np.where((t <= -c).any(axis=1), (t <= -c).argmax(axis=1), len(looks))
    worse_at = np.where((t >= c).any(axis=1), (t >= c).argmax(axis=1), len(looks))
    first = np.minimum(holds_at, worse_at)
    holds = (holds_at < worse_at) & (holds_at < len(looks))
    worse = (worse_at < holds_at) & (worse_at < len(looks))
    spent = np.asarray(looks)[np.minimum(first, len(looks) - 1)]
    return {"holds": float(holds.mean()), "worse": float(worse.mean()), "mean_seeds": float(spent.mean())}


def bound(diffs: list[float], c: float) -> dict:
    """Mean of the paired differences and its bounds at critical value `c` (no noise floor: the design's error rates
    are found with the seeds' own spread); no bounds below two seeds."""
    d = np.asarray(diffs, dtype=float)
    mean = float(d.mean()) if d.size else math.nan
    if d.size < 2:
        return {"n": int(d.size), "mean": mean, "lo": -math.inf, "hi": math.inf, "sd": None}
    sd = float(d.std(ddof=1))
    half = c * sd / math.sqrt(d.size)
    return {"n": int(d.size), "mean": mean, "lo": mean - half, "hi": mean + half, "sd": sd}


def cannot_hold(intervals: dict, c: float, last: int, margin: float) -> bool:
    """Were a loss's mean and spread at this look to hold, the last look (`last` seeds) would leave its upper bound
    above the margin: the test could not hold, only spend device time. Stopping it undecided never raises an error
    rate of the design."""
    return any(i["sd"] is not None and i["mean"] + c * i["sd"] / math.sqrt(last) > margin for i in intervals.values())


def t_quantile(q: float, df: int) -> float:
    """Student's t quantile. scipy.special is imported here, not at the top: every measuring process and
    every chapter notebook imports this module (through results); scipy.stats would cost most of a second."""
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def detectable(
    sd: float | None, n: int, confidence: float, power: float, critical: float | None = None
) -> float | None:
    """The smallest true mean difference the test tells from none with probability `power` (one-sided
    at `confidence`, or at the sequential design's `critical` value where given), given the spread of one paired
    difference and n seeds; None below two seeds."""
    if sd is None or n < 2:
        return None
    return float(((critical or t_quantile(confidence, n - 1)) + t_quantile(power, n - 1)) * sd / math.sqrt(n))


def _check(looks: tuple[int, ...]) -> None:
    if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:])):
        raise ValueError(f"parity looks must be rising seed counts of at least 2, got {list(looks)}")
