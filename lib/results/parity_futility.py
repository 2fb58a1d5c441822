"""The fixed design's futility stops (lib/results/parity.py's docstring): a test of a fixed number of seeds, measured
before the sequential design, stops undecided where its spread, its own noise or its trend say all its seeds could not
detect the margin. Kept to judge the folders measured under it by the rule they ran under."""

from __future__ import annotations

import math

import numpy as np

from lib.core.params import Evidence
from lib.results.sequential import detectable, t_quantile


def futile(noise_sd: float | None, done: list[int], evidence: Evidence) -> bool:
    """The futility stop of the module docstring: the noise seeds have all run twice, and with the noise they
    measured even the full test could not detect the margin. Fewer of them than evidence.parity_futility_pairs:
    never (a folder measured before that key stopped after its noise seeds, whatever their number, and is judged
    by the rule it ran under)."""
    if noise_sd is None or noise_seeds(evidence) < (futility_pairs(evidence) or 0):
        return False
    if not set(range(noise_seeds(evidence))) <= set(done):
        return False
    return _beyond_reach(noise_sd, evidence)


def _beyond_reach(sd: float, evidence: Evidence) -> bool:
    """Whether, with one paired difference spread by `sd`, all evidence.parity_seeds seeds could not detect the margin
    with evidence.parity_power: what makes a test futile."""
    reach = detectable(sd, evidence.parity_seeds, evidence.parity_confidence, evidence.parity_power)
    return reach is not None and reach > evidence.parity_margin


def spread_floor(diffs: dict, confidence: float) -> float | None:
    """The lower one-sided `confidence` bound on the standard deviation of one paired difference, from the seeds'
    own spread (chi-square with n - 1 degrees of freedom), the larger of the two metrics'; None below two seeds."""
    from scipy.special import chdtri  # the upper-tail inverse: chdtri(df, 1 - q) is the q quantile

    n = min(len(v) for v in diffs.values())
    if n < 2:
        return None
    return max(
        float(np.std(v, ddof=1)) * math.sqrt((n - 1) / float(chdtri(n - 1, 1 - confidence))) for v in diffs.values()
    )


def spread_futile(floor: float | None, pairs: int, evidence: Evidence) -> bool:
    """The futility stop by spread (module docstring): at least evidence.parity_futility_pairs paired seeds, and even
    their spread's lower bound keeps the full test from detecting the margin. Never for a folder measured before
    that key (it ran under the noise stop alone)."""
    if floor is None or futility_pairs(evidence) is None or pairs < futility_pairs(evidence):
        return False
    return _beyond_reach(floor, evidence)


def projected_bound(i: dict, seeds: int, confidence: float) -> float | None:
    """The upper bound one metric's interval `i` would reach at `seeds` seeds were its mean and spread to hold."""
    return None if i["sd"] is None else i["mean"] + t_quantile(confidence, seeds - 1) * i["sd"] / math.sqrt(seeds)


def trend_futile(intervals: dict, pairs: int, evidence: Evidence) -> bool:
    """The futility stop by trend (module docstring): at least evidence.parity_futility_pairs paired seeds, and were
    the mean and spread of a loss's paired differences so far to hold, all evidence.parity_seeds seeds would leave
    its upper bound above the margin: the test could not hold, only spend device time. Only for folders measured
    with evidence.parity_futility_trend (the rule is stated before the numbers)."""
    needed = futility_pairs(evidence)
    if not getattr(evidence, "parity_futility_trend", False) or needed is None or pairs < needed:
        return False
    bounds = [projected_bound(i, evidence.parity_seeds, evidence.parity_confidence) for i in intervals.values()]
    return any(b is not None and b > evidence.parity_margin for b in bounds)


def noise_seeds(evidence: Evidence) -> int:
    """How many of the seeds (the first ones) run both stages a second time: evidence.parity_noise_seeds, every
    seed where it is not set (a report measured before it existed)."""
    if getattr(evidence, "parity_looks", None):  # the sequential design: the seeds' own spread is the test's noise
        return 0
    n = getattr(evidence, "parity_noise_seeds", None)
    return evidence.parity_seeds if n is None else min(n, evidence.parity_seeds)


def futility_pairs(evidence: Evidence) -> int | None:
    """The repeat pairs a futility stop needs; None for a folder measured before the key (its noise seeds)."""
    return getattr(evidence, "parity_futility_pairs", None)
