"""The parity test: does a lever make training worse, by more than a margin stated in advance?

Design (the method section states it before any number):
  * paired: each seed trains the lever and its reference stage from the same initial weights on the
    same data order, so everything but the lever cancels in their difference;
  * `evidence.parity_seeds` seeds; the decision rests on the mean paired difference (lever minus
    reference, first runs) in two losses: the held-out loss (text the runs never train on) and the
    final training loss;
  * both stages run a second time at the first `evidence.parity_noise_seeds` seeds (every seed where it is
    not set): those repeat pairs measure the noise of one paired difference (a compiled or FP8 step need not be bitwise repeatable, where an eager one may be: see
    reports/probes/parity-h100-2026-11-25), which the interval never undercuts;
  * rule (non-inferiority, the lever may not be worse): with a one-sided `confidence` bound (Student's t
    over the seeds) on each mean difference,
      holds      every upper bound lies at or below +margin;
      worse      a lower bound lies above +margin;
      undecided  otherwise;
    only "holds" lets a stage be adopted. A lever that lowers the loss is not failed for it;
  * futility, the one early stop, looked at twice (lib/run/parity_runs.py runs the seeds in three rounds: the first
    runs of the noise seeds, their repeats, the other seeds). A test stops, undecided, where all `parity_seeds`
    seeds could not detect the margin with `power`, judged
      by its spread, after the first round: where even the lower one-sided `confidence` bound (chi-square) on the
        standard deviation of the paired differences so far makes the detectable difference at the full
        `parity_seeds` larger than the margin. The seeds' spread carries the run-to-run noise and more: an FP8
        form's runs of one seed in two processes agreed within 0.01 nats on an H100 while its paired differences
        spread by 0.04 from seed to seed (reports/h100, a345013), and its five seeds then could not decide;
      by its noise, after the second: where the repeat pairs' noise alone does the same.
    And, at either look, by its trend (evidence.parity_futility_trend): where, were the mean and spread of a loss's
    paired differences so far to hold, all `parity_seeds` seeds would still leave its upper bound above the margin.
    On an H100 the FP8 lm_head's first three seeds differed by +0.011, +0.003 and +0.031 nats (a spread too small
    for the spread stop), needed about 25 seeds at that trend, and its five seeds then came back undecided in both
    sittings of 3c6c130 after eight FP8 processes a side. This stop costs some power (a lever whose first seeds
    are unlucky is left undecided) and never adopts or rejects one as worse;
    A lever with no effect at all would then hold less than `power` of the time: the rest of the seeds could not
    make the test decisive, only spend device time. Stopping for futility never adopts a lever, and it needs at
    least `parity_futility_pairs` pairs (paired seeds for the spread, repeat pairs for the noise): a spread
    estimated from two has two degrees of freedom and can be off by a factor of three either way (two sittings of
    the same FP8 lm_head test on an H200 measured a noise of 0.0110 and 0.0209 nats; the first went on and held,
    the second stopped);
  * a parity run of the earlier method (records without a seed: one long run of the lever, the reference once or
    twice) is judged by the rule it was measured under, never dropped or left to decide nothing: the lever's
    training loss (5-step average) within parity_earlier.EARLIER_TOLERANCE of the envelope of the reference's runs at every step,
    and its held-out loss within it of their range (earlier_check). Where a stage also has a paired test, that one
    decides; the earlier run is still listed with every run;
  * a test decides only once it is complete: every one of the `parity_seeds` seeds has run both stages, the
    first `parity_noise_seeds` of them twice (a run that failed counts as run). Until then it is "incomplete" and decides nothing either
    way, so a run cut off in the middle of a test never rejects (or adopts) a lever on part of its seeds.
    Every seed's paired difference already carries the run-to-run noise, so the interval needs the repeats only
    as a floor under a few seeds that agree by luck: two seeds' repeat pairs set it, and the other seeds run
    once each (a repeat is a whole training run; on a GPU report the parity runs are its longest evidence).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from lib.core import config, stages
from lib.core.params import Evidence
from lib.core.record import Status
from lib.results import parity_earlier, sequential
from lib.results.parity_futility import futile, noise_seeds, spread_floor, spread_futile, trend_futile

HOLDS, WORSE, UNDECIDED, INCOMPLETE = "holds", "worse", "undecided", "incomplete"
# The params of the test (params/default.yaml, evidence): a folder measured before they existed is
# judged with today's values (loader.load), as a new report would be.
RULE_KEYS = ("parity_seeds", "parity_passes", "parity_margin", "parity_confidence", "parity_power")
METRICS = {"held_out": "held-out loss", "final": "final training loss"}
# The most paired seeds a report would propose to decide one lever: past it the test is out of reach at this horizon and
# margin, and says so (a mean past the margin never comes within it, however many seeds).
MOST_SEEDS = 100


def interval(diffs: list[float], confidence: float, noise_sd: float = 0.0) -> dict:
    """Mean of the paired differences and its one-sided `confidence` bounds over the seeds (lo: the
    lower bound, hi: the upper; together a two-sided interval at 2 x confidence - 1). The spread used is
    the larger of the differences' own standard deviation and `noise_sd` (a few seeds can agree by luck
    more closely than the measured noise of one paired difference allows)."""
    d = np.asarray(diffs, dtype=float)
    mean = float(d.mean())
    if d.size < 2:
        return {"n": int(d.size), "mean": mean, "lo": -math.inf, "hi": math.inf, "sd": None}
    sd = max(float(d.std(ddof=1)), noise_sd)
    half = sequential.t_quantile(confidence, d.size - 1) * sd / math.sqrt(d.size)
    return {"n": int(d.size), "mean": mean, "lo": mean - half, "hi": mean + half, "sd": sd}


def verdict(intervals: dict, margin: float) -> str:
    """The rule of the module docstring, on the bounds of every metric."""
    if any(i["lo"] > margin for i in intervals.values()):
        return WORSE
    if all(i["hi"] <= margin for i in intervals.values()):
        return HOLDS
    return UNDECIDED


def _metric(rec: dict, name: str) -> float:
    return rec["held_out_loss"] if name == "held_out" else rec["final_loss"]


def _diffs(seeds: dict, refs: dict, used: list[int]) -> dict:
    """Each loss's paired differences (lever minus reference, first runs) at the seeds `used`."""
    return {m: [_metric(seeds[s][0], m) - _metric(refs[s][0], m) for s in used] for m in METRICS}


def seed_of(rec: dict) -> int:
    return int(rec.get("seed_offset") or 0)


def _mean_square_repeat(runs_by_seed: dict, seeds: list[int], metric: str) -> float | None:
    """The mean square of (second run - first run) of one stage over the seeds where it ran twice."""
    pairs = [_metric(r[1], metric) - _metric(r[0], metric) for r in (runs_by_seed[s] for s in seeds) if len(r) > 1]
    return float(np.mean(np.square(pairs))) if pairs else None


def runs(records: list[dict], ok_only: bool = True) -> dict:
    """(stage, batch) -> seed -> [its parity runs in replicate order] (completed runs only, unless not ok_only)."""
    out: dict = {}
    for r in sorted(
        (r for r in records if r.get("kind") == "parity" and (r.get("status") == Status.OK or not ok_only)),
        key=lambda r: r.get("replicate", 0),
    ):
        out.setdefault((r["stage"], r["batch_size"]), {}).setdefault(seed_of(r), []).append(r)
    return out


def seeds_run(attempted: dict, key: tuple, ref_key: tuple, evidence: Evidence) -> list[int]:
    """The seeds at which both stages have run as often as the rule asks (twice at the first noise_seeds
    seeds, once after them; failed runs included): the test's progress."""
    lever, ref, twice = attempted.get(key, {}), attempted.get(ref_key, {}), noise_seeds(evidence)
    return sorted(s for s in lever if min(len(lever[s]), len(ref.get(s, []))) >= (2 if s < twice else 1))


def checks(records: list[dict], evidence: Evidence) -> dict:
    """stage -> its parity test against its reference stage at the batch it ran: the paired
    differences per seed, the noise pairs, the interval of each metric, the detectable difference
    and the verdict (evidence: parity_margin, parity_confidence, parity_power)."""
    earlier = [r for r in records if r.get("kind") == "parity" and "seed_offset" not in r]
    records = [r for r in records if not (r.get("kind") == "parity" and "seed_offset" not in r)]
    by, attempted = runs(records), runs(records, ok_only=False)
    tests, own_stack = {}, bool(getattr(evidence, "parity_looks", None))
    for (key, batch), seeds in by.items():
        canonical = stages.get(key).reference if key in stages.STAGES else key
        ref_key = stages.own_stack(key) if own_stack and key in stages.STAGES else canonical
        if ref_key == key or not by.get((ref_key, batch)):
            ref_key = canonical  # the canonical reference alone where the lever's own stack has not run
        refs = by.get((ref_key, batch), {})
        if ref_key == key or not refs:
            continue
        test = tests[(key, batch)] = _test(key, ref_key, batch, seeds, refs, attempted, evidence)
        if ref_key != canonical and by.get((canonical, batch)):  # the full stack against the canonical reference
            test["canonical"] = _test(key, canonical, batch, seeds, by[(canonical, batch)], attempted, evidence)
    # One test a stage: where a history left tests of a stage at several batches (a run resumed after the
    # recommendation moved), the one that decided, else the one with more seeds run, else the larger batch;
    # the others are named beside it (and every run stays listed in the report's parity history).
    chosen: dict = {}
    for (key, batch), c in sorted(
        tests.items(), key=lambda kv: (kv[1]["verdict"] != INCOMPLETE, kv[1]["seeds_run"], kv[0][1])
    ):
        chosen[key] = c
    for key, c in chosen.items():
        c["other_batches"] = sorted(b for (k, b) in tests if k == key and b != c["batch_size"])
    for key, c in parity_earlier.checks(runs(earlier)).items():
        c["verdict"] = HOLDS if c["ok"] else WORSE
        chosen.setdefault(key, c)  # a paired test of the stage decides where there is one
    return chosen


def paired(records: list[dict], key: str, ref_key: str, batch: int, evidence: Evidence) -> dict | None:
    """The test of stage `key` against `ref_key` at `batch` from the records (None where either side has no run)."""
    by, attempted = runs(records), runs(records, ok_only=False)
    seeds, refs = by.get((key, batch), {}), by.get((ref_key, batch), {})
    return _test(key, ref_key, batch, seeds, refs, attempted, evidence) if seeds and refs else None


def _test(key: str, ref_key: str, batch: int, seeds: dict, refs: dict, attempted: dict, evidence: Evidence) -> dict:
    """One paired test from the two stages' runs by seed (module docstring)."""
    if getattr(evidence, "parity_looks", None):
        return _sequential_test(key, ref_key, batch, seeds, refs, attempted, evidence)
    margin, conf, power = evidence.parity_margin, evidence.parity_confidence, evidence.parity_power
    paired = sorted(s for s in seeds if s in refs)
    # The noise of one paired difference, from the repeat pairs of both stages (their expectation is 0):
    # sqrt((E[lever pair^2] + E[reference pair^2]) / 2), the larger of the two metrics'.
    repeats = {m: (_mean_square_repeat(seeds, paired, m), _mean_square_repeat(refs, paired, m)) for m in METRICS}
    measured = all(v is not None for pair in repeats.values() for v in pair)
    noise_sd = max(math.sqrt((a + b) / 2) for a, b in repeats.values()) if measured else None
    diffs = _diffs(seeds, refs, paired)
    intervals = {m: interval(v, conf, noise_sd or 0.0) for m, v in diffs.items()}
    spread = max((i["sd"] for i in intervals.values() if i["sd"] is not None), default=None)
    out = {
        "stage": key,
        "reference": ref_key,
        "batch_size": batch,
        "seeds": paired,
        "steps": seeds[paired[0]][0]["steps"] if paired else None,
        "micro_steps": refs[paired[0]][0].get("micro_steps", 1) if paired else 1,
        "lever_micro_steps": seeds[paired[0]][0].get("micro_steps", 1) if paired else 1,
        "passes": seeds[paired[0]][0].get("passes") if paired else None,
        "diffs": diffs,
        "noise_sd": noise_sd,
        "intervals": intervals,
        "detectable": sequential.detectable(spread, len(paired), conf, power),
        "margin": margin,
        "confidence": conf,
        "power": power,
        "wanted": evidence.parity_seeds,
        "seeds_run": len(done := seeds_run(attempted, (key, batch), (ref_key, batch), evidence)),
        "noise_seeds": noise_seeds(evidence),
        "verdict": verdict(intervals, margin) if paired else UNDECIDED,
    }
    out["spread_floor"] = spread_floor(diffs, conf)
    out["futile"] = (
        "noise"
        if futile(noise_sd, done, evidence)
        else "spread"
        if spread_futile(out["spread_floor"], len(paired), evidence)
        else "trend"
        if trend_futile(intervals, len(paired), evidence)
        else None
    )
    if out["seeds_run"] < out["wanted"]:
        out["verdict"] = UNDECIDED if out["futile"] else INCOMPLETE
    out["ok"] = out["verdict"] == HOLDS
    return out


def _sequential_test(key, ref_key, batch, seeds: dict, refs: dict, attempted: dict, evidence: Evidence) -> dict:
    """The sequential design (lib/results/sequential.py): the looks in order, each on the first `look` seeds, until a
    bound crosses the margin (holds or worse), the trend says the last look could not hold (undecided), or the last
    look passes undecided. A look whose seeds have not all run both stages leaves the test incomplete, wanting them."""
    margin, conf, power = evidence.parity_margin, evidence.parity_confidence, evidence.parity_power
    looks = tuple(evidence.parity_looks)
    c = sequential.critical_value(looks, 1 - conf)
    lever, ref = attempted.get((key, batch), {}), attempted.get((ref_key, batch), {})
    run_both = next(s for s in itertools.count() if s not in lever or s not in ref)  # seeds run in order, no gap
    verdict_, futile_, at, wanted = INCOMPLETE, None, 0, looks[0]
    for k, look in enumerate(looks):
        if run_both < look:
            wanted = look
            break
        at = look
        verdict_ = verdict(_bounds(seeds, refs, look, c), margin)
        if verdict_ != UNDECIDED:
            break
        if k + 1 < len(looks) and _trend_futile(seeds, refs, look, c, looks[-1], evidence):
            verdict_, futile_ = UNDECIDED, "trend"
            break
        verdict_ = UNDECIDED if k + 1 == len(looks) else INCOMPLETE
    used = [s for s in range(max(at, 1)) if s in seeds and s in refs]  # a failed run leaves its seed out
    diffs = _diffs(seeds, refs, used)
    intervals = {m: sequential.bound(v, c) for m, v in diffs.items()}
    spread = max((i["sd"] for i in intervals.values() if i["sd"] is not None), default=None)
    first = seeds[used[0]][0] if used else {}
    out = {
        "stage": key,
        "reference": ref_key,
        "batch_size": batch,
        "design": "sequential",
        "looks": list(looks),
        "critical_value": c,
        "seeds": used,
        "steps": first.get("steps"),
        "tokens": first.get("steps", 0) * batch * first.get("seq_len", 0) or None,
        "micro_steps": refs[used[0]][0].get("micro_steps", 1) if used else 1,
        "lever_micro_steps": first.get("micro_steps", 1),
        "passes": first.get("passes"),
        "diffs": diffs,
        "noise_sd": None,
        "intervals": intervals,
        "detectable": sequential.detectable(spread, len(used), conf, power, critical=c),
        "margin": margin,
        "confidence": conf,
        "power": power,
        "wanted": wanted if verdict_ == INCOMPLETE else at,
        "seeds_run": run_both,
        "noise_seeds": 0,
        "verdict": verdict_,
        "futile": futile_,
        "spread_floor": None,
        "ok": verdict_ == HOLDS,
        "run_s": {side: _mean_wall(runs_) for side, runs_ in (("lever", seeds), ("reference", refs))},
        "reference_held_out": float(np.mean([refs[s][0]["held_out_loss"] for s in used])) if used else None,
    }
    return out


def _bounds(seeds: dict, refs: dict, look: int, c: float) -> dict:
    used = [s for s in range(look) if s in seeds and s in refs]
    return {m: sequential.bound(v, c) for m, v in _diffs(seeds, refs, used).items()}


def _trend_futile(seeds: dict, refs: dict, look: int, c: float, last: int, evidence: Evidence) -> bool:
    """The trend's futility stop (sequential.cannot_hold), where the params ask for it."""
    return bool(getattr(evidence, "parity_futility_trend", False)) and sequential.cannot_hold(
        _bounds(seeds, refs, look, c), c, last, evidence.parity_margin
    )


def _mean_wall(by_seed: dict) -> float | None:
    walls = [r[0].get("wall_s") for r in by_seed.values() if r and r[0].get("wall_s")]
    return float(np.mean(walls)) if walls else None


def rejected(checks: dict) -> dict:
    """stage -> its check, for the tests that did not let their stage stand (worse or undecided, its own or the
    full stack's against the canonical reference; an incomplete one decides nothing yet). The stage that takes over is
    measured and tested at such a test's batch size."""
    return {k: c for k, c in checks.items() if standing(c) in (WORSE, UNDECIDED)}


def fallbacks(checks: dict) -> dict:
    """own stack -> the lever whose test against it did not let the lever stand: the stack the default depth
    recommends in the lever's place (checked against the canonical reference alone)."""
    return {
        c["reference"]: k
        for k, c in checks.items()
        if c.get("design") == "sequential"
        and c["reference"] == stages.own_stack(k)
        and standing(c) in (WORSE, UNDECIDED)
    }


def left_to_full_depth(checks: dict, params) -> list[str]:
    """The levers this depth leaves untested (config DEPTH_EVIDENCE 'parity_alternatives'; none at full depth): those
    added to a stack the report fell back to, beside the lever that did not hold there (the FP8 lm_head beside the FP8
    classifier on the loss-only forward)."""
    if config.runs_evidence(params, "parity_alternatives"):
        return []
    back = fallbacks(checks)
    return [
        k
        for k in params.stages
        if k in stages.STAGES and k not in checks and k not in back and stages.own_stack(k) in back
    ]


def standing(check: dict) -> str:
    """What a stage's tests say together: worse or undecided where either its own test or its full stack's check
    against the canonical reference says so; holds where its own holds and the check, if run, holds too."""
    verdicts = [check["verdict"]] + ([check["canonical"]["verdict"]] if check.get("canonical") else [])
    for v in (WORSE, UNDECIDED, INCOMPLETE):
        if v in verdicts:
            return v
    return HOLDS


def to_decide(check: dict) -> dict | None:
    """What an undecided test would need to decide, were its mean and spread to hold: the seeds in all (seeds_needed),
    the seeds more than it ran, and the device minutes of the probe that runs them afresh in one look, at its runs'
    mean length (both sides). None where no number of seeds up to MOST_SEEDS would bring its bound within the margin
    (out_of_reach)."""
    n = seeds_needed(check)
    if n is None or check["verdict"] != UNDECIDED:
        return None
    more = max(0, n - len(check["seeds"]))
    walls = [w for w in (check.get("run_s") or {}).values() if w]
    return {"seeds": n, "more": more, "gpu_minutes": n * sum(walls) / 60 if len(walls) == 2 else None}


def out_of_reach(check: dict) -> bool:
    """An undecided test that no number of seeds up to MOST_SEEDS would decide at its mean and spread: the lever stays
    "not yet", and the next experiment passes it over for one that a stated number of seeds could decide."""
    return check["verdict"] == UNDECIDED and bool(check.get("intervals")) and seeds_needed(check) is None


def seeds_needed(check: dict) -> int | None:
    """How many fresh seeds would let the test hold with the rule's power (parity_power, 80 %) were the true difference
    the mean measured and its spread the same: judged as the probe the report proposes judges them, one look, Student's
    t at n - 1 degrees of freedom (the sequential design's critical value is set for its own few looks and would
    overstate the need). Without the power term the bound would only reach the margin, a coin flip to hold. None where
    that takes more than MOST_SEEDS or never comes."""
    i = max(check["intervals"].values(), key=lambda i: i["hi"])
    if i["sd"] is None or i["mean"] >= check["margin"]:
        return None
    power = check["power"]

    def bound(n):
        z = sequential.t_quantile(check["confidence"], n - 1) + sequential.t_quantile(power, n - 1)
        return i["mean"] + z * i["sd"] / math.sqrt(n)

    return next((n for n in range(2, MOST_SEEDS + 1) if bound(n) <= check["margin"]), None)
