"""The next experiment a report proposes, decided once into decisions.json: the fastest lever not yet decided whose
test a stated number of seeds (or a sitting) could decide, the command that runs it, what it costs and what it would
pay on the recipe's token budget; and the faster levers it passes over because no stated number of seeds would
decide them."""

from __future__ import annotations

import math

from lib.core import long_corpus, stages
from lib.results import time_to_loss
from lib.results.time_to_loss import ADOPT, NOT_YET

# A short test that needs more seeds than this is the wrong tool: the long test decides with fewer (issue 62's probes,
# 8-16 seeds at 700 steps; the H200's FP8 classifier was decided at its first 3), so a pilot of LONG_PILOT_SEEDS is
# proposed instead, whose spread at the horizon then says how many more
LONG_INSTEAD_SEEDS, LONG_PILOT_SEEDS, LONG_BATCH = 16, 3, time_to_loss.BATCH
LONG_RUN_START_S = 40  # a long run's start and held-out evaluations beside its training (the H200's took 203-239 s)


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
    reachable = [r for r in later if _decidable(r, recipe)]
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
    many = q.get("out_of_reach") or ((q.get("to_decide") or {}).get("seeds") or 0) > LONG_INSTEAD_SEEDS
    if tested and many and _pilot_pays(pick, recipe):
        return _long_pilot(pick, recipe, profile, passed)
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


def _decidable(row: dict, recipe: dict | None) -> bool:
    """Whether a not-yet lever's next test can decide it: its long test where it ran (it reaches the same loss sooner,
    so a sitting times it, or a stated number of seeds would decide it), else its short test not out of reach, or a
    long test's first seeds where they cost less than the short test's ceiling of seeds."""
    if row.get("long"):
        return row["long"]["decision"] == ADOPT or bool(row["long"].get("seeds_to_decide"))
    return not (row["quality"] or {}).get("out_of_reach") or _pilot_pays(row, recipe)


def _pilot_pays(row: dict, recipe: dict | None) -> bool:
    """Whether a long test's first seeds cost less than the short test's seeds would (a CPU's long horizon takes
    hours, so a CPU report keeps its short test)."""
    cost = _pilot_cost(row, recipe)
    return cost is not None and cost["gpu_minutes"] < _short_minutes(row["quality"] or {}, recipe)


def _pilot_cost(row: dict, recipe: dict | None) -> dict | None:
    """A long test's first seeds at the horizon the pinned corpus gives (time_to_loss.horizon_steps), each side at
    the recipe's speed (the lever at its own ratio over it), with each run's start; None without the recipe's speed."""
    if not (recipe and recipe.get("tokens_per_s")):
        return None
    per_step = LONG_BATCH * recipe["seq_len"]
    tokens = time_to_loss.horizon_steps(long_corpus.PINNED_TRAIN_TOKENS, per_step) * per_step
    run_s = tokens / recipe["tokens_per_s"] * (1 + 1 / row["over_recipe"]["ratio"]) + 2 * LONG_RUN_START_S
    return {"gpu_minutes": LONG_PILOT_SEEDS * run_s / 60, "seeds": LONG_PILOT_SEEDS, "tokens_a_run": tokens}


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
        + f" --seeds {more or v['n']} --folder reports/{profile}/long"
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


def _short_minutes(q: dict, recipe: dict | None) -> float:
    """What the short test's seeds would cost: those that would decide it, or, out of reach, as many as its ceiling
    (each seed two runs of its tokens at the recipe's speed); infinite where it cannot be priced."""
    if (q.get("to_decide") or {}).get("gpu_minutes"):
        return q["to_decide"]["gpu_minutes"]
    beyond = (q.get("out_of_reach") or {}).get("seeds_beyond")
    tps = (recipe or {}).get("tokens_per_s")
    return beyond * 2 * q["tokens"] / tps / 60 if beyond and tps and q.get("tokens") else math.inf


def _long_pilot(pick: dict, recipe: dict | None, profile: str, passed_over: list) -> dict:
    """The long test's first seeds for a lever whose short test needs more than LONG_INSTEAD_SEEDS (or no stated
    number), at the long test's batch against its own stack: its cost (_pilot_cost), what it pays were it to hold."""
    q = pick["quality"]
    # the micro-steps the report's own tests took at this batch, else the recipe's micro-batch's
    micro = q.get("reference_micro_steps") if q.get("batch") == LONG_BATCH else None
    micro = micro or max(1, LONG_BATCH // ((recipe or {}).get("micro_batch") or LONG_BATCH))
    cost = _pilot_cost(pick, recipe)
    return {
        "stage": pick["stage"],
        "title": pick["title"],
        "kind": "long pilot",
        "command": f"python -m lib.run.long_test {profile} {pick['stage']}"  # at its own batch, LONG_BATCH
        + (f" --micro-steps {micro}" if micro > 1 else "")
        + f" --seeds {LONG_PILOT_SEEDS} --folder reports/{profile}/long",  # the report beside it gives the speed
        "over_recipe": pick["over_recipe"],
        "with": [],
        "tested": True,
        "seeds_run": q["seeds"],
        "seeds": LONG_PILOT_SEEDS,
        "short_seeds": (q.get("to_decide") or {}).get("seeds"),  # what the short test would have needed
        "to_decide": cost,
        "payoff": payoff(pick["over_recipe"]["ratio"], recipe, cost),
        "batch": LONG_BATCH,
        "micro_steps": micro,
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
