"""The next experiment a report proposes, decided once into decisions.json: the fastest lever not yet decided whose
test a stated number of seeds (or a sitting) could decide, the command that runs it, what it costs and what it would
pay on the recipe's token budget; and the faster levers it passes over because no stated number of seeds would
decide them."""

from __future__ import annotations

from lib.core import stages
from lib.results.time_to_loss import ADOPT, NOT_YET


def next_experiment(
    levers_: list[dict],
    recipe: dict | None,
    parity_batch: int | None,
    profile: str = "cpu",
    sitting_gpu_s: float | None = None,
) -> dict | None:
    """What to measure next: the fastest lever not yet decided whose quality test a stated number of seeds could
    decide, or that no test has tried (its test with the seeds its spread asks for, else the sequential test's looks),
    and the faster levers it passes over because their test is out of reach (parity.out_of_reach). None where no lever
    is not yet."""
    later = sorted(
        (r for r in levers_ if r["decision"] == NOT_YET and r["over_recipe"]),
        key=lambda r: r["over_recipe"]["ratio"],
        reverse=True,
    )
    if not later:
        return None
    reachable = [r for r in later if _decidable(r)]
    pick = reachable[0] if reachable else None
    passed = [
        {
            "stage": r["stage"],
            "title": r["title"],
            "over_recipe": r["over_recipe"],
            # a long test's seeds where it ran (no number up to time_to_loss.judge's most_seeds decides it), else the
            # short test's
            "seeds_run": r["long"]["n"] if r.get("long") else r["quality"]["seeds"],
            "seeds_beyond": LONG_MOST_SEEDS if r.get("long") else r["quality"]["out_of_reach"]["seeds_beyond"],
        }
        for r in later
        if r not in reachable and (pick is None or r["over_recipe"]["ratio"] > pick["over_recipe"]["ratio"])
    ]
    if pick is not None and pick.get("long"):
        return _next_after_long(pick, recipe, profile, passed, sitting_gpu_s)
    if pick is None:
        return {"stage": None, "passed_over": passed}
    q = pick["quality"] or {}
    tested = q.get("test") == "parity"
    # the other undecided levers its figure over the recipe includes (the FP8 classifier is built on the FP8 lm_head)
    undecided, chain = {r["stage"] for r in later}, [pick["stage"]]
    while stages.own_stack(chain[-1]) != chain[-1]:  # the levers it has (the FP8 classifier replaces the FP8 lm_head)
        chain.append(stages.own_stack(chain[-1]))
    with_ = [k for k in chain[1:] if k in undecided]
    # an untested lever accumulates as the report's other tests at that batch did (the batch may not fit at once)
    micro = q.get("reference_micro_steps") if tested else None
    micro = micro or next(
        (
            r["quality"]["reference_micro_steps"]
            for r in levers_
            if (r["quality"] or {}).get("test") == "parity" and r["quality"]["batch"] == parity_batch
        ),
        1,
    )
    seeds = (q.get("to_decide") or {}).get("seeds")
    batch = q.get("batch") if tested else parity_batch
    return {
        "stage": pick["stage"],
        "title": pick["title"],
        "kind": "parity" if tested else "untested",
        "command": f"python tools/parity_probe.py {profile} {pick['stage']} --batch {batch}"
        + (f" --micro-steps {micro}" if micro > 1 else "")
        + (f" --seeds {seeds}" if seeds else ""),
        "over_recipe": pick["over_recipe"],
        "with": [stages.get(k).title for k in with_],
        "tested": tested,
        "seeds_run": q.get("seeds") if tested else 0,
        # the seeds the probe should run: those that would decide it, else the sequential test's own looks (None)
        "seeds": seeds,
        "to_decide": q.get("to_decide"),
        "payoff": payoff(pick["over_recipe"]["ratio"], recipe, q.get("to_decide")),
        "batch": batch,
        "micro_steps": micro,
        "passed_over": passed,
    }


LONG_MOST_SEEDS = 64  # time_to_loss.judge's most_seeds: a long test no more seeds would decide is passed over


def _decidable(row: dict) -> bool:
    """Whether a not-yet lever's next test can decide it: its long test where it ran (it reaches the same loss sooner,
    so a sitting times it, or a stated number of seeds would decide it), else its short test not out of reach."""
    if row.get("long"):
        return row["long"]["decision"] == ADOPT or bool(row["long"].get("seeds_to_decide"))
    return not (row["quality"] or {}).get("out_of_reach")


def _next_after_long(pick: dict, recipe: dict | None, profile: str, passed_over: list, sitting_gpu_s=None) -> dict:
    """The next experiment for a lever its long test judged: where it reaches the same loss sooner, the sitting that
    times the recipe with it (long_choice admits it there); where undecided, the same long test with the seeds that
    would decide it (its runs so far are kept)."""
    v = pick["long"]
    sitting = v["decision"] == ADOPT
    # a sitting costs what this folder's took; what it pays is the lever's worth once its loss cost is priced
    cost = {"gpu_minutes": sitting_gpu_s / 60} if sitting and sitting_gpu_s else None
    more = None if sitting else v.get("seeds_to_decide")
    command = (
        f"make report GPU={profile}"
        if sitting
        else f"python -m lib.run.long_test {profile} {pick['stage']} --against {v['reference']} --batch {v['batch']}"
        + (f" --micro-steps {v['micro_steps']}" if v.get("micro_steps", 1) > 1 else "")
        + f" --seeds {more or v['n']} --report reports/{profile} --folder reports/{profile}/long"
    )
    return {
        "stage": pick["stage"],
        "title": pick["title"],
        "kind": "sitting" if sitting else "long test",
        "command": command,
        "over_recipe": pick["over_recipe"],
        "with": [],
        "tested": True,
        "seeds_run": v["n"],
        "seeds": more,
        "to_decide": cost,
        "long": {k: v[k] for k in ("decision", "net_worth", "net_worth_interval", "horizon_tokens", "n")},
        "payoff": payoff(1 + v["net_worth"], recipe, cost),
        "batch": v["batch"],
        "micro_steps": v.get("micro_steps", 1),
        "passed_over": passed_over,
    }


def payoff(ratio: float, recipe: dict | None, to_decide: dict | None) -> dict | None:
    """What deciding a faster lever would pay, were it to hold: the GPU-hours it saves on the recipe's token budget
    (the recipe's own GPU-hours less those at `ratio` times its speed), and the budget at which those savings repay
    the test's own GPU-hours (None where the test's cost is not known)."""
    if not recipe or not recipe.get("gpu_hours") or ratio <= 1:
        return None
    saved = recipe["gpu_hours"] * (1 - 1 / ratio)
    test = (to_decide or {}).get("gpu_minutes")
    price = recipe.get("price_per_gpu_hour")
    return {
        "tokens": recipe["token_budget"],
        "gpu_hours_saved": saved,
        "cost_saved": saved * price if price else None,
        "test_gpu_hours": test / 60 if test else None,
        "test_cost": test / 60 * price if test and price else None,
        "break_even_tokens": recipe["token_budget"] * test / 60 / saved if test else None,
    }
