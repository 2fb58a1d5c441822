"""Which levers the long quality test admits to the recipe, and the recipe chosen with them.

A lever outside the recipe is kept out while its short quality test is undecided; where its long test (lib/run/
long_test.py, read by store.load_evidence as 'long' and 'long_pairs') reaches the reference's loss sooner at its
measured speed-up over the recipe (time_to_loss: adopt), it is admitted: the long test speaks for a training run, the
short one for its first few dozen steps. A sitting chooses its recipe with the long tests its folder holds (the run
phase calls `choose` too), so the recipe it times as trained is the one a render finds. A long test that came after the
sitting's recipe was timed does not move that recipe at render: the recipe on page 1 is always one measured as
trained, and the admitted lever reads 'not yet' until the next sitting times the recipe with it."""

from __future__ import annotations

import numpy as np

from lib.core import record, stages
from lib.core.params import Params
from lib.results import decide, long_quality, noise, parity, time_to_loss
from lib.results.recipe_decision import recipe_sides

# What the chooser sees for an admitted lever in place of its short test's undecided verdict (decide.ranked_configs
# reads 'verdict' and 'ok'); the views read the short test itself, never this
ADMITTED = "adopt (long test)"


def over(tps: dict, key: str, recipe_stage: str) -> dict | None:
    """A stage's median tokens/s over the recipe's stage at the largest batch both were timed at: what turning the
    lever on would add to the recipe, as far as the matrix shows."""
    common = sorted(b for (k, b) in tps if k == key and (recipe_stage, b) in tps)
    if not common:
        return None
    b = common[-1]
    return {"ratio": float(np.median(tps[(key, b)])) / float(np.median(tps[(recipe_stage, b)])), "batch": b}


def admitted(records: list[dict], params: Params, evidence: dict, base: dict | None) -> list[str]:
    """The levers outside `base` (the recipe the short tests allow) whose long test says adopt at their speed-up
    over it, judged against the speed noise of these records."""
    long_records, pairs = evidence.get("long") or [], evidence.get("long_pairs") or []
    if base is None or not long_records or not pairs:
        return []
    tps, out = decide.throughputs(records), []
    floor = noise.decision_floor(records, tps) or 0.0
    in_base = set(decide.lineage(base["stage"]))
    for lever, reference in pairs:
        ran = [r for r in long_records if r.get("stage") == lever and r.get("status") == record.Status.OK]
        speed = over(tps, lever, base["stage"])
        if lever in in_base or not ran or speed is None:
            continue
        v = long_quality.verdict(long_records, lever, reference, ran[0]["batch_size"], speed["ratio"], floor)
        if v and v["decision"] == time_to_loss.ADOPT:
            out.append(lever)
    return sorted(out)


def chooser_checks(checks: dict, levers: list[str]) -> dict:
    """The short tests' checks with each admitted lever's replaced by its long test's adopt, for choosing only."""
    return {
        **checks,
        **{
            k: {
                "reference": stages.own_stack(k),
                **checks.get(k, {}),
                "verdict": ADMITTED,
                "ok": True,
                "canonical": None,
            }
            for k in levers
        },
    }


def choose(
    records: list[dict],
    params: Params,
    evidence: dict,
    checks: dict | None = None,
    eligible=None,
    keep_timed: bool = True,
) -> tuple[dict | None, dict]:
    """The recipe's configuration (decide.recommended) with the long tests' admitted levers, and the checks it was
    chosen with. With `keep_timed` (a render), the short tests' pick where the sitting timed that one as trained and the
    long test came after; the run phase (keep_timed False) re-chooses, and so times the recipe with the lever."""
    checks = parity.checks(records, params.evidence) if checks is None else checks
    base = decide.recommended(records, params, eligible, checks)
    levers = admitted(records, params, evidence, base)
    if not levers:
        return base, checks
    wider = chooser_checks(checks, levers)
    best = decide.recommended(records, params, eligible, wider)
    timed = recipe_sides(evidence.get("recipe") or [], params).get("recommended")
    timed_as = (timed["stage"], timed["batch"]) if timed else None
    if (
        keep_timed
        and best
        and base
        and timed_as == (base["stage"], base["batch_size"]) != (best["stage"], best["batch_size"])
    ):
        return base, checks  # timed before the long test admitted a lever: that lever waits for the next sitting
    return best, wider
