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


def _check(looks: tuple[int, ...]) -> None:
    if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:])):
        raise ValueError(f"parity looks must be rising seed counts of at least 2, got {list(looks)}")
