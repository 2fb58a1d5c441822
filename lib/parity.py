"""The parity test: does a lever change what training does, by more than a margin stated in advance?

Design (the method section states it before any number):
  * paired: each seed trains the lever and its reference stage from the same initial weights on the
    same data order, so everything but the lever cancels in their difference;
  * at least `evidence.parity_seeds` seeds; the decision rests on the mean paired difference in two
    losses: the held-out loss (text the runs never train on) and the final training loss;
  * the reference runs a second time at each seed: reference-against-reference pairs measure the
    noise of the test itself (kernels with atomics are not bitwise repeatable), which sets the smallest
    difference the test can detect and a lower bound on the spread its interval uses;
  * rule: with a two-sided `confidence` interval of each mean difference (Student's t over the seeds),
      holds      both intervals lie inside +-margin (an equivalence test: two one-sided tests);
      differs    an interval lies wholly outside +-margin;
      undecided  otherwise, or where the test cannot detect a difference as small as the margin;
    only "holds" lets a stage be adopted.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats as _stats

from . import stages
from .record import Status

HOLDS, DIFFERS, UNDECIDED = "holds", "differs", "undecided"
# The params of the test (params/default.yaml, evidence): a folder measured before they existed is
# judged with today's values (report.load), as a new report would be.
RULE_KEYS = ("parity_seeds", "parity_passes", "parity_margin", "parity_confidence", "parity_power")
METRICS = {"held_out": "held-out loss", "final": "final training loss"}


def interval(diffs: list[float], confidence: float, noise_sd: float = 0.0) -> dict:
    """Mean of the paired differences and its two-sided `confidence` interval over the seeds. The
    spread used is the larger of the differences' own standard deviation and `noise_sd` (three seeds
    can agree by luck more closely than the test's measured noise allows)."""
    d = np.asarray(diffs, dtype=float)
    mean = float(d.mean())
    if d.size < 2:
        return {"n": int(d.size), "mean": mean, "lo": -math.inf, "hi": math.inf, "sd": None}
    sd = max(float(d.std(ddof=1)), noise_sd)
    half = float(_stats.t.ppf(0.5 + confidence / 2, d.size - 1)) * sd / math.sqrt(d.size)
    return {"n": int(d.size), "mean": mean, "lo": mean - half, "hi": mean + half, "sd": sd}


def detectable(noise_sd: float | None, n: int, confidence: float, power: float) -> float | None:
    """The smallest true mean difference the test tells from none with probability `power`, given
    the noise of one paired difference (from reference-against-reference pairs) and n seeds. None
    where the noise was not measured (no second reference run) or fewer than two seeds ran."""
    if noise_sd is None or n < 2:
        return None
    t = _stats.t.ppf(0.5 + confidence / 2, n - 1) + _stats.t.ppf(power, n - 1)
    return float(t * noise_sd / math.sqrt(n))


def verdict(intervals: dict, margin: float, detect: float | None) -> str:
    """The rule of the module docstring, on the intervals of every metric."""
    if any(i["lo"] > margin or i["hi"] < -margin for i in intervals.values()):
        return DIFFERS
    if detect is not None and detect <= margin and all(-margin <= i["lo"] and i["hi"] <= margin
                                                       for i in intervals.values()):
        return HOLDS
    return UNDECIDED


def _metric(rec: dict, name: str) -> float:
    return rec["held_out_loss"] if name == "held_out" else rec["final_loss"]


def seed_of(rec: dict) -> int:
    return int(rec.get("seed_offset") or 0)


def runs(records: list[dict]) -> dict:
    """(stage, batch) -> seed -> [its parity runs in replicate order] (completed runs only)."""
    out: dict = {}
    for r in sorted((r for r in records if r.get("kind") == "parity" and r.get("status") == Status.OK),
                    key=lambda r: r.get("replicate", 0)):
        out.setdefault((r["stage"], r["batch_size"]), {}).setdefault(seed_of(r), []).append(r)
    return out


def checks(records: list[dict], evidence: dict) -> dict:
    """stage -> its parity test against its reference stage at the batch it ran: the paired
    differences per seed, the noise pairs, the interval of each metric, the detectable difference
    and the verdict (evidence: parity_margin, parity_confidence, parity_power)."""
    margin, conf, power = evidence["parity_margin"], evidence["parity_confidence"], evidence["parity_power"]
    by = runs(records)
    out = {}
    for (key, batch), seeds in by.items():
        ref_key = stages.get(key).reference if key in stages.STAGES else key
        refs = by.get((ref_key, batch), {})
        if ref_key == key or not refs:
            continue
        paired = sorted(s for s in seeds if s in refs)
        noise = [refs[s][1] for s in paired if len(refs[s]) > 1]
        noise_diffs = {m: [_metric(refs[s][1], m) - _metric(refs[s][0], m) for s in paired if len(refs[s]) > 1]
                       for m in METRICS}
        # The noise of one paired difference: the RMS of the reference-against-reference differences
        # (their expectation is 0), the larger of the two metrics'.
        noise_sd = (max(math.sqrt(float(np.mean(np.square(v)))) for v in noise_diffs.values()) if noise else None)
        diffs = {m: [_metric(seeds[s][0], m) - _metric(refs[s][0], m) for s in paired] for m in METRICS}
        intervals = {m: interval(v, conf, noise_sd or 0.0) for m, v in diffs.items()}
        detect = detectable(noise_sd, len(paired), conf, power)
        out[key] = {"stage": key, "reference": ref_key, "batch_size": batch, "seeds": paired,
                    "steps": seeds[paired[0]][0]["steps"] if paired else None,
                    "micro_steps": refs[paired[0]][0].get("micro_steps", 1) if paired else 1,
                    "passes": seeds[paired[0]][0].get("passes") if paired else None,
                    "diffs": diffs, "noise_diffs": noise_diffs, "noise_sd": noise_sd, "intervals": intervals,
                    "detectable": detect, "margin": margin, "confidence": conf, "power": power, "wanted": evidence["parity_seeds"],
                    "verdict": verdict(intervals, margin, detect) if paired else UNDECIDED}
        out[key]["ok"] = out[key]["verdict"] == HOLDS
    return out


def seeds_needed(check: dict) -> int | None:
    """How many seeds would bring the detectable difference within the margin at the noise this test
    measured (what an undecided test would need); None where no noise was measured."""
    if check["noise_sd"] is None:
        return None
    if check["noise_sd"] == 0:
        return 2
    return next((n for n in range(2, 200) if detectable(check["noise_sd"], n, check["confidence"], check["power"])
                 <= check["margin"]), None)
