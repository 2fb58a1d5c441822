"""The quality verdict a lever rests on, as data: its parity test with the horizon, seeds and bounds it speaks for
(and the adopted stack's check against the canonical reference), else the matrix's divergence check."""

from __future__ import annotations

from lib.core import stages
from lib.core.params import Params
from lib.results import parity


def of(key: str, checks: dict, df, params: Params) -> dict | None:
    """The quality verdict a lever rests on and what it speaks for: its parity test (verdict, held-out difference
    with its interval, seeds, steps, tokens, passes, margin) where it had one, else the matrix's divergence check, a
    divergence check of the timed steps against the stage's reference (its steps and tolerance)."""
    c = checks.get(key)
    if c:
        held = (c.get("intervals") or {}).get("held_out") or {}
        batch = c["batch_size"]
        return {
            "test": "parity",
            "verdict": c["verdict"],
            "reference": c["reference"],
            # set against its own stack (the lever alone), or against the canonical reference (its whole stack)
            "own_stack": c["reference"] == stages.own_stack(key),
            "batch": batch,
            "reference_micro_steps": c.get("micro_steps", 1),
            "steps": c.get("steps"),
            "tokens": c["steps"] * batch * params.run.seq_len if c.get("steps") else None,
            "passes": c.get("passes"),
            "seeds": len(c["seeds"]) or None,
            "margin": c["margin"],
            "confidence": c["confidence"],
            "held_out": {k: held.get(k) for k in ("mean", "lo", "hi")} if held else None,
            "final": _bounds(c, "final"),
            "looks": c["looks"],
            "critical_value": c["critical_value"],
            "detectable": c.get("detectable"),
            "reference_held_out": c.get("reference_held_out"),
            "to_decide": parity.to_decide(c),
            # no number of seeds up to this would decide it at its mean and spread (None where some would, or it held)
            "out_of_reach": {"seeds_beyond": parity.MOST_SEEDS} if parity.out_of_reach(c) else None,
            # the adopted stack against the canonical reference, where that check ran
            "canonical": _canonical(c.get("canonical")),
            "standing": parity.standing(c),
        }
    rows = df[(df["stage"] == key) & df["loss_verdict"].notna()]
    if rows.empty:
        return None
    return {
        "test": "divergence check",
        # 'within noise': beyond the tolerance by less than the run-to-run drift of a repeated configuration
        "verdict": "failed"
        if not all(v is True for v in rows["loss_within_tolerance"])
        else "passed within noise"
        if (rows["loss_verdict"] == "within noise").any()
        else "passed",
        "reference": rows["loss_ref"].iloc[0],
        "steps": params.run.warmup_steps + params.run.timed_steps,
        "batches": sorted(int(b) for b in rows["batch_size"]),
        "tolerance": params.run.loss_tolerance,
        "gap": float(rows["loss_gap"].max()),  # the largest 5-step-average gap to the reference after warm-up
        "drift": float(df.attrs.get("loss_noise", 0.0)),  # what a gap may pass the tolerance by: run-to-run drift
    }


def _bounds(c: dict, metric: str) -> dict | None:
    i = (c.get("intervals") or {}).get(metric)
    return {k: i.get(k) for k in ("mean", "lo", "hi")} if i else None


def _canonical(c: dict | None) -> dict | None:
    """The full stack's check against the canonical reference: verdict, reference, seeds, both losses' bounds."""
    if not c:
        return None
    return {
        "verdict": c["verdict"],
        "reference": c["reference"],
        "seeds": len(c["seeds"]),
        "held_out": _bounds(c, "held_out"),
        "final": _bounds(c, "final"),
    }


def whole_stack(q: dict | None) -> dict | None:
    """The verdict of a stage's whole stack against the canonical reference, from its quality: its own parity test
    where that was set against the canonical reference, else the full stack's check beside it; None without one."""
    if not q or q["test"] != "parity":
        return None
    if not q["own_stack"]:
        return {"verdict": q["verdict"], "reference": q["reference"]}
    c = q.get("canonical")
    return {"verdict": c["verdict"], "reference": c["reference"]} if c else None


def cover_by_stack(rows: list[dict], recipe_stage: str, lineage: list[str]) -> None:
    """A lever of the recipe added after the canonical reference (compile, fused AdamW, the BF16 residual stream)
    with no parity test of its own is in the recipe's whole-stack test: its quality gets that verdict as `stack`
    (with the stage whose test it is), beside its divergence check, so page 1 does not read a 30-step divergence
    check as all that speaks for a lever the recipe's held-out test covers. Levers up to the canonical reference
    are that reference's own: the whole-stack test says nothing of them."""
    top = next((r for r in rows if r["stage"] == recipe_stage), None)
    whole = whole_stack(top["quality"]) if top else None
    if whole is None or whole["reference"] not in lineage:
        return
    after = set(lineage[lineage.index(whole["reference"]) + 1 :])
    for r in rows:
        q = r["quality"]
        if r["in_recipe"] and r["stage"] != recipe_stage and r["stage"] in after and q and q["test"] != "parity":
            q["stack"] = {**whole, "via": recipe_stage}


def cover_by_long_stack(rows: list[dict], recipe: dict, lineage: list[str]) -> None:
    """The recipe's whole-stack long test (recipe['long'], against the canonical trainer's stage) speaks for each
    lever of the recipe the canonical trainer lacks, the recipe's own stage included: its `stack` becomes that
    verdict in time to the same loss (a training run's evidence), in place of the short whole-stack test's."""
    v, canonical = recipe.get("long"), (recipe.get("canonical") or {}).get("stage")
    if not v or canonical not in lineage:
        return
    after = set(lineage[lineage.index(canonical) + 1 :])
    for r in rows:
        if r["in_recipe"] and r["stage"] in after and r["quality"]:
            r["quality"]["stack"] = {
                "verdict": v["decision"],
                "reference": canonical,
                "via": recipe["stage"],
                "long": True,
            }
