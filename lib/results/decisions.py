"""What a report decides, as data computed once from its records: the recipe a team trains with (stage, micro-batch,
accumulation and GPUs at the global batch), each lever adopted, neutral, skipped or not yet with its worth and its
quality verdict and the horizon that verdict speaks for, the cumulative speed-up lever by lever, and the next
experiment. lib/run writes it to decisions.json after measuring and on every render; the report lays it out,
recommended.json hands it on, a comparison sets two side by side. No sentence is made here."""

from __future__ import annotations

import numpy as np

from lib.core import config, record, stages
from lib.core.params import Params
from lib.results import decide, noise, parity, quality, stats
from lib.results.leave_one_out import leave_one_out
from lib.results.waterfall import beyond_canonical, waterfall
from lib.results.stats import loss_noise

FILE = "decisions.json"
SCHEMA = 1
ADOPT, NEUTRAL, SKIP, NOT_YET, NOT_APPLICABLE, NOT_MEASURED = (
    "adopt",
    "neutral",
    "skip",
    "not yet",
    "not applicable",
    "not measured",
)
# The order page 1 lists levers in: what to turn on first, what to leave for later last.
DECISION_ORDER = (ADOPT, NEUTRAL, NOT_YET, SKIP, NOT_APPLICABLE, NOT_MEASURED)


def recipe_sides(recipe: list[dict], params: Params) -> dict:
    """role -> {stage, batch, micro_steps, median, lo, hi, n} of each side of the recipe at the global batch: the
    recommendation ('recommended'), the canonical trainer in the plain loop ('baseline') and, at full depth, in this
    harness ('baseline-harness'). A harness side's tokens/s come from its median step, the plain loop's from its
    wall-clock mean, as nanoGPT times it."""
    out = {}
    for role in ("recommended", "baseline-harness", "baseline"):
        if role == "baseline-harness" and not config.runs_evidence(params, "recipe_harness"):
            continue  # left to DEPTH=full: a record of it is another run's, not this one's
        runs = [r for r in recipe if r.get("variant") == f"recipe: {role}" and r.get("status") == record.Status.OK]
        if runs:
            s = noise.spread([r["tokens_per_s"] for r in runs])
            out[role] = {
                "stage": runs[0]["stage"],
                "batch": runs[0]["batch_size"],
                "micro_steps": runs[0].get("micro_steps", 1),
                **{k: s[k] for k in ("median", "lo", "hi", "n")},
            }
    return out


def _mfu_bf16(params: Params, rec: dict, tokens_per_s: float) -> float | None:
    """The MFU of `rec`'s configuration at `tokens_per_s`, against the bf16 dense peak (every stage on one scale)."""
    mfu = stats.mfu_bf16_of(params, rec.get("mfu"), rec.get("peak_precision"))
    return mfu * tokens_per_s / rec["tokens_per_s"] if mfu and rec.get("tokens_per_s") else None


def make_recipe(records: list[dict], evidence: dict, params: Params, env: dict, price: float | None) -> dict | None:
    """The recipe (decide.recommended) with what it buys: its tokens/s at the global batch where measured (else its
    micro-batch's own), × the canonical trainer in the same sitting with the range over every pair of processes, MFU,
    memory, the hours and cost of evidence.token_budget, the tie rule's call and a memory-saving micro-batch that
    ties with it, and DDP over the host's GPUs where measured."""
    best = decide.recommended(records, params)
    if best is None:
        return None
    sides = recipe_sides(evidence.get("recipe") or [], params)
    mine, canon = sides.get("recommended"), sides.get("baseline")
    if mine and (mine["stage"], mine["batch"]) != (best["stage"], best["batch_size"]):
        mine = None  # measured for another configuration (an earlier rule): not this recipe's figure
    tps = mine["median"] if mine else best["processes"]["median"]
    own = [
        r.get("mem_device_sampled_peak_bytes") or r.get("mem_device_bytes")
        for r in evidence.get("recipe") or []
        if r.get("variant") == "recipe: recommended"
        and mine
        and (r["stage"], r["batch_size"]) == (mine["stage"], mine["batch"])
    ]
    budget, dev = params.evidence.token_budget, (env or {}).get("device") or {}
    ddp = [
        {
            "gpus": int(r["world_size"]),
            "micro_batch": r["batch_size"],
            "accumulation": r.get("micro_steps") or 1,
            "tokens_per_s": r["tokens_per_s"],
            "efficiency": r.get("scaling_efficiency"),
            "allreduce_share": r.get("allreduce_share"),
            "reference_tokens_per_s": r.get("single_gpu_tokens_per_s"),
            "mfu_bf16": _mfu_bf16(params, best, r["tokens_per_s"] / int(r["world_size"])),  # a GPU's, as the recipe's
            "mem_device_peak_bytes": r.get("mem_device_sampled_peak_bytes"),  # NVML's, sampled, where the job kept it
            "mem_device_after_bytes": r.get("mem_device_bytes"),  # else the device in use after the steps
            "steps": {"warmup": r.get("warmup_steps"), "timed": r.get("timed_steps")},
            **_time(budget, r["tokens_per_s"], int(r["world_size"]), price),
        }
        for r in records_multi_gpu(evidence.get("matrix") or [])
    ]
    saver = decide.memory_saver(records, params, best)
    return {
        "stage": best["stage"],
        "title": stages.get(best["stage"]).title,
        "micro_batch": best["batch_size"],
        "accumulation": params.micro_steps(best["batch_size"]),
        "seq_len": params.run.seq_len,
        "global_batch_tokens": params.evidence.global_batch_tokens,
        "tokens_per_s": tps,
        "measured_as_trained": mine is not None,
        "recipe": mine,
        "micro_batch_alone": best["processes"],
        "canonical": canon,
        "ratio": tps / canon["median"] if canon and mine else None,
        "ratio_range": [mine["lo"] / canon["hi"], mine["hi"] / canon["lo"]] if canon and mine else None,
        "mfu_bf16": _mfu_bf16(params, best, tps),
        "mem_allocator_bytes": best.get("mem_allocator_bytes"),
        # the device's peak (NVML, sampled) in the recipe's own processes, else in its micro-batch's
        "mem_device_peak_bytes": max((m for m in own if m), default=None)
        or best.get("mem_device_sampled_peak_bytes")
        or best.get("mem_device_bytes"),
        "recipe_steps": {"warmup": params.evidence.recipe_warmup_steps, "timed": params.evidence.recipe_timed_steps},
        "device_memory_bytes": dev.get("memory_bytes"),
        "token_budget": budget,
        "gpus": 1,  # the recipe on one GPU; `ddp` holds it on the host's GPUs, `host` the widest of them
        **_time(budget, tps, 1, price),
        "price_per_gpu_hour": price,
        "against": best.get("against"),
        "memory_saver": saver,
        "ddp": ddp,
        "host": ddp[-1] if ddp else None,
    }


def _time(budget: int | None, tokens_per_s: float, gpus: int, price: float | None) -> dict:
    """What training `budget` tokens takes at `tokens_per_s` on `gpus` GPUs: hours, GPU-hours, and cost at `price`."""
    hours = budget / tokens_per_s / 3600 if budget and tokens_per_s else None
    return {
        "hours": hours,
        "gpu_hours": hours * gpus if hours else None,
        "cost": hours * gpus * price if hours and price else None,
    }


def records_multi_gpu(matrix: list[dict]) -> list[dict]:
    """The timed multi-GPU records of one node, one per GPU count (the later file wins), fewest GPUs first. A job of
    several nodes (or two rehearsed on one host) is the DDP chapter's: it is no recipe a team runs on this host, and
    keyed by its world size alone it would take the place of the one-node job of as many GPUs."""
    by = {
        int(r["world_size"]): r
        for r in matrix
        if stages.is_multi_gpu(r.get("stage"))
        and r.get("status") == record.Status.OK
        and (r.get("world_size") or 0) > 1
        and (r.get("nnodes") or 1) == 1
    }
    return [by[g] for g in sorted(by)]


def _matrix_worth(key: str, df, tps: dict, records: list[dict]) -> dict | None:
    """A lever's speed-up over its own stack (the same configuration without it, the stage its quality test sets it
    against: the FP8 classifier over the loss-only forward, not the FP8 lm_head it follows in the matrix), else over
    the stage it is added to, at the largest batch both ran, judged against the noise."""
    own = stages.own_stack(key)
    timed = df[df["tokens_per_s"].notna()]
    mine_rows = timed[timed["stage"] == key]
    own_rows = timed[timed["stage"] == own]
    both = sorted(set(mine_rows["batch_size"]) & set(own_rows["batch_size"])) if own != key else []
    if both:
        b, prev = int(both[-1]), own
        ratio = float(
            mine_rows[mine_rows["batch_size"] == b]["tokens_per_s"].iloc[0]
            / own_rows[own_rows["batch_size"] == b]["tokens_per_s"].iloc[0]
        )
    else:
        rows = df[(df["stage"] == key) & df["speedup_vs_previous"].notna()]
        if rows.empty:
            return None
        row = rows.loc[rows["batch_size"].idxmax()]
        b, prev, ratio = int(row["batch_size"]), row["previous_stage"], float(row["speedup_vs_previous"])
    floor, across = noise.decision_floor(records, tps), noise.across_machines(records)
    mine = tps.get((key, b)) or list(mine_rows[mine_rows["batch_size"] == b]["tokens_per_s"])
    theirs = tps.get((prev, b)) or []
    return {
        "basis": "matrix",
        "ratio": ratio,
        "batch": b,
        "against": prev,
        "within_noise": noise.within_noise(mine, theirs, floor, across) if theirs else None,
    }


def _not_run(key: str, df) -> tuple[str, str] | None:
    """(decision, reason) for a stage with no timed record: not applicable here (its reason), or not measured."""
    rows = df[df["stage"] == key]
    if rows["status"].isin(record.TIMED).any():
        return None
    if rows.empty:
        return NOT_MEASURED, "no record"
    na = rows[rows["status"] == record.Status.NOT_APPLICABLE]
    if not na.empty:
        return NOT_APPLICABLE, str(na["reason"].iloc[0] or "")
    return NOT_MEASURED, str(rows["status"].iloc[0])


def lever_rows(records: list[dict], df, params: Params, recipe: dict | None, loo: tuple, checks: dict) -> list[dict]:
    """One row per single-GPU lever of the report (every stage after the first): its decision, worth and quality.
    In the recipe: adopt where leaving it out costs beyond noise or does not fit, skip where the recipe is faster
    without it beyond noise, else neutral (kept as the recipe has it). Outside it: skip where slower, no faster
    beyond noise, or its quality failed; not yet where faster beyond noise and its quality undecided or untested."""
    tps = decide.throughputs(records)
    in_recipe = set(decide.lineage(recipe["stage"])[1:]) if recipe else set()
    full, rows = loo
    by_stage = {r["stage"]: r for r in rows if r.get("stage")}
    out = []
    for key in stages.single_gpu(params.stages)[1:]:
        st = stages.get(key)
        row = {"stage": key, "title": st.title, "in_recipe": key in in_recipe, "reason": None}
        row["quality"] = quality.of(key, checks, df, params)
        row["matrix"] = _matrix_worth(key, df, tps, records)
        off = by_stage.get(key)
        row["leave_one_out"] = (
            {
                "worth": off["worth"],
                "batch": full["batch_size"],
                "within_noise": off.get("within_noise"),
                "cannot_fit": record.cannot_fit(off["record"]),
                "predicted": record.is_predicted_oom(off["record"]),
                "status": off["record"].get("status"),
                "removed_with": off["lever"],
            }
            if off and full
            else None
        )
        row["over_recipe"] = _over(tps, key, recipe["stage"]) if recipe and key not in in_recipe else None
        row["decision"], row["reason"] = _decide(row, _not_run(key, df))
        out.append(row)
    if recipe:
        quality.cover_by_stack(out, recipe["stage"], decide.lineage(recipe["stage"]))
    return out


def _over(tps: dict, key: str, recipe_stage: str) -> dict | None:
    """A stage's median tokens/s over the recipe's stage at the largest batch both were timed at: what turning the
    lever on would add to the recipe, as far as the matrix shows."""
    common = sorted(b for (k, b) in tps if k == key and (recipe_stage, b) in tps)
    if not common:
        return None
    b = common[-1]
    return {"ratio": float(np.median(tps[(key, b)])) / float(np.median(tps[(recipe_stage, b)])), "batch": b}


def _decide(row: dict, not_run: tuple | None) -> tuple[str, str | None]:
    if not_run:
        return not_run
    q, m, loo = row["quality"] or {}, row["matrix"], row["leave_one_out"]
    failed = q.get("verdict") in (parity.WORSE, "failed")
    if row["in_recipe"]:
        if loo and (
            loo["cannot_fit"] or (loo["worth"] is not None and loo["worth"] > 0 and loo["within_noise"] is False)
        ):
            return ADOPT, "needed to fit" if loo["cannot_fit"] else "pays"
        if loo is None and m and m["ratio"] > 1 and m["within_noise"] is False:
            return ADOPT, "pays in the matrix"
        if loo and loo["worth"] is not None and loo["worth"] < 0 and loo["within_noise"] is False:
            return SKIP, "the recipe is faster without it"
        return NEUTRAL, "within noise" if loo and loo["within_noise"] else "not shown to pay"
    if failed:
        return SKIP, "quality"
    if m is None:
        return NOT_MEASURED, "no speed-up measured"
    if m["ratio"] <= 1 or m["within_noise"]:  # unknown noise (None) leaves a faster lever to be decided
        return SKIP, "slower" if m["ratio"] < 1 and m["within_noise"] is False else "no gain beyond noise"
    if q.get("verdict") == parity.HOLDS:
        return NOT_YET, "faster, held, not on the recipe's path"
    return NOT_YET, "quality undecided" if q.get("test") == "parity" else "quality not tested"


def next_experiment(levers_: list[dict], recipe: dict | None, parity_batch: int | None) -> dict | None:
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
    reachable = [r for r in later if not (r["quality"] or {}).get("out_of_reach")]
    pick = reachable[0] if reachable else None
    passed = [
        {
            "stage": r["stage"],
            "title": r["title"],
            "over_recipe": r["over_recipe"],
            "seeds_run": r["quality"]["seeds"],
            "seeds_beyond": r["quality"]["out_of_reach"]["seeds_beyond"],
        }
        for r in later
        if r not in reachable and (pick is None or r["over_recipe"]["ratio"] > pick["over_recipe"]["ratio"])
    ]
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
    return {
        "stage": pick["stage"],
        "title": pick["title"],
        "over_recipe": pick["over_recipe"],
        "with": [stages.get(k).title for k in with_],
        "tested": tested,
        "seeds_run": q.get("seeds") if tested else 0,
        # the seeds the probe should run: those that would decide it, else the sequential test's own looks (None)
        "seeds": (q.get("to_decide") or {}).get("seeds"),
        "to_decide": q.get("to_decide"),
        "payoff": payoff(pick["over_recipe"]["ratio"], recipe, q.get("to_decide")),
        "batch": q.get("batch") if tested else parity_batch,
        "micro_steps": micro,
        "passed_over": passed,
    }


def payoff(ratio: float, recipe: dict | None, to_decide: dict | None) -> dict | None:
    """What deciding a faster lever would pay, were it to hold: the GPU-hours it saves on the recipe's token budget
    (the recipe's own GPU-hours less those at `ratio` times its speed), and the budget at which those savings repay
    the test's own GPU-hours (None where the test's cost is not known)."""
    if not recipe or not recipe.get("gpu_hours") or ratio <= 1:
        return None
    saved = recipe["gpu_hours"] * (1 - 1 / ratio)
    test = (to_decide or {}).get("gpu_minutes")
    return {
        "tokens": recipe["token_budget"],
        "gpu_hours_saved": saved,
        "test_gpu_hours": test / 60 if test else None,
        "break_even_tokens": recipe["token_budget"] * test / 60 / saved if test else None,
    }


def compute(records: list[dict], evidence: dict, params: Params, env: dict, price: float | None = None) -> dict:
    """Every decision of a report folder (records: store.decision_records; evidence: store.load_evidence with the
    matrix's records under 'matrix')."""
    order = params.stages
    matrix = [r for r in evidence.get("matrix") or [] if r.get("stage") in order]
    drift = loss_noise(records)
    df = decide.table(
        matrix, order, params.run.loss_tolerance, drift, decide.throughputs(records), decide.step_times(records)
    )
    df.attrs["loss_noise"] = drift
    recipe = make_recipe(records, evidence, params, env, price)
    loo = leave_one_out(records, evidence.get("ablation") or [])
    checks = parity.checks(records, params.evidence)
    levers_ = lever_rows(records, df, params, recipe, loo, checks)
    wf = waterfall(df, recipe, order[0])
    full = loo[0]
    left = parity.left_to_full_depth(checks, params)
    return {
        "schema": SCHEMA,
        "profile": params.name,
        "backend": params.backend,
        "recipe": recipe,
        "levers": sorted(levers_, key=lambda r: DECISION_ORDER.index(r["decision"])),
        "leave_one_out_batch": full["batch_size"] if full else None,
        "waterfall": wf,
        "beyond_canonical": beyond_canonical(wf, recipe),
        "next": next_experiment(levers_, recipe, params.evidence.parity_batch or (recipe or {}).get("micro_batch")),
        "noise_floor": noise.decision_floor(records, decide.throughputs(records)),
        # the levers whose quality test this depth left to DEPTH=full, and the lever that did not hold beside them
        "left_to_full_depth": left,
        "fell_back_from": sorted(parity.fallbacks(checks).values()) if left else [],
    }
