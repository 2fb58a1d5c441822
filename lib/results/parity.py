"""The parity test: does a lever make training worse, by more than a margin stated in advance?

Design (the method section states it before any number; lib/results/sequential.py gives the looks' critical value):
  * paired: each seed trains the lever and its reference from the same initial weights on the same data order, so
    everything but the lever cancels in their difference. The reference is the lever's own stack (the same
    configuration without it, stages.own_stack); the stage adopted is then checked once against the canonical
    reference, the whole stack at once;
  * the decision rests on the mean paired difference (lever minus reference) in two losses: the held-out loss (text
    the runs never train on) and the final training loss;
  * sequential: seeds are added in rounds up to each of `evidence.parity_looks`; at a look, with bounds at the
    design's one critical value,
      holds      every upper bound lies at or below +margin;
      worse      a lower bound lies above +margin;
      and otherwise the test goes on to the next look, or is undecided after the last;
    only "holds" lets a stage be adopted. A lever that lowers the loss is not failed for it;
  * futility (evidence.parity_futility_trend): a test stops undecided at a look where the mean and spread of its
    seeds so far, were they to hold, would leave a bound above the margin at the last look. Stopping never adopts or
    rejects a lever, so it never raises the design's error rates;
  * a test decides only once the seeds of its look have run both sides (a run that failed counts as run). Until then
    it is "incomplete" and decides nothing either way, so a run cut off in the middle of a test never rejects (or
    adopts) a lever on part of its seeds.
Folders measured under an earlier rule (the fixed number of seeds against the canonical reference, or one long run a
stage without seeds) are kept whole under reports/archive/ with their own report.html and report.pdf; the report
layer refuses to redraw them (lib/report/loader.py, refuse_earlier_rule)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from lib.core import config, stages
from lib.core.params import Evidence
from lib.core.record import Status
from lib.results import sequential

HOLDS, WORSE, UNDECIDED, INCOMPLETE = "holds", "worse", "undecided", "incomplete"
METRICS = {"held_out": "held-out loss", "final": "final training loss"}
# The most paired seeds a report would propose to decide one lever: past it the test is out of reach at this horizon and
# margin, and says so (a mean past the margin never comes within it, however many seeds).
MOST_SEEDS = 100


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
    """Each loss's paired differences (lever minus reference) at the seeds `used`."""
    return {m: [_metric(seeds[s][0], m) - _metric(refs[s][0], m) for s in used] for m in METRICS}


def seed_of(rec: dict) -> int:
    return int(rec.get("seed_offset") or 0)


def runs(records: list[dict], ok_only: bool = True) -> dict:
    """(stage, batch) -> seed -> [its parity runs] (completed runs only, unless not ok_only)."""
    out: dict = {}
    for r in sorted(
        (r for r in records if r.get("kind") == "parity" and (r.get("status") == Status.OK or not ok_only)),
        key=lambda r: r.get("replicate", 0),
    ):
        out.setdefault((r["stage"], r["batch_size"]), {}).setdefault(seed_of(r), []).append(r)
    return out


def checks(records: list[dict], evidence: Evidence) -> dict:
    """stage -> its parity test against its own stack at the batch it ran (against the canonical reference where the
    own stack has not run), with the full stack's check against the canonical reference beside it: the paired
    differences per seed, the bounds of each metric, the detectable difference and the verdict (evidence:
    parity_looks, parity_margin, parity_confidence, parity_power)."""
    by, attempted = runs(records), runs(records, ok_only=False)
    tests = {}
    for (key, batch), seeds in by.items():
        canonical = stages.get(key).reference if key in stages.STAGES else key
        ref_key = stages.own_stack(key) if key in stages.STAGES else canonical
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
    return chosen


def paired(records: list[dict], key: str, ref_key: str, batch: int, evidence: Evidence) -> dict | None:
    """The test of stage `key` against `ref_key` at `batch` from the records (None where either side has no run)."""
    by, attempted = runs(records), runs(records, ok_only=False)
    seeds, refs = by.get((key, batch), {}), by.get((ref_key, batch), {})
    return _test(key, ref_key, batch, seeds, refs, attempted, evidence) if seeds and refs else None


def _test(key, ref_key, batch, seeds: dict, refs: dict, attempted: dict, evidence: Evidence) -> dict:
    """One paired test from the two stages' runs by seed (module docstring): the looks in order, each on the first
    `look` seeds, until a bound crosses the margin (holds or worse), the trend says the last look could not hold
    (undecided), or the last look passes undecided. A look whose seeds have not all run both stages leaves the test
    incomplete, wanting them."""
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
    return {
        "stage": key,
        "reference": ref_key,
        "batch_size": batch,
        "looks": list(looks),
        "critical_value": c,
        "seeds": used,
        "steps": first.get("steps"),
        "tokens": first.get("steps", 0) * batch * first.get("seq_len", 0) or None,
        "micro_steps": refs[used[0]][0].get("micro_steps", 1) if used else 1,
        "lever_micro_steps": first.get("micro_steps", 1),
        "passes": first.get("passes"),
        "diffs": diffs,
        "intervals": intervals,
        "detectable": sequential.detectable(spread, len(used), conf, power, critical=c),
        "margin": margin,
        "confidence": conf,
        "power": power,
        "wanted": wanted if verdict_ == INCOMPLETE else at,
        "seeds_run": run_both,
        "verdict": verdict_,
        "futile": futile_,
        "ok": verdict_ == HOLDS,
        "run_s": {side: _mean_wall(runs_) for side, runs_ in (("lever", seeds), ("reference", refs))},
        "reference_held_out": float(np.mean([refs[s][0]["held_out_loss"] for s in used])) if used else None,
    }


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
        if c["reference"] == stages.own_stack(k) and standing(c) in (WORSE, UNDECIDED)
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
