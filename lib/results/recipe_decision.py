"""The recipe a report decides, as data: the configuration a team trains with (stage, micro-batch, accumulation and
GPUs at the global batch), what it buys against the canonical trainer of the same sitting, and what training the token
budget costs with each of them (hours, GPU-hours, money at the stated price). decisions.compute calls it first."""

from __future__ import annotations

from lib.core import config, record, stages
from lib.core.params import Params
from lib.results import decide, noise, stats


ROLES = ("recommended", "baseline-harness", "baseline")  # the recipe's sides, in the order a table lists them


def recipe_sides(recipe: list[dict], params: Params) -> dict:
    """role -> {stage, batch, micro_steps, median, lo, hi, n} of each side of the recipe at the global batch: the
    recommendation ('recommended'), the canonical trainer in the plain loop ('baseline') and, at full depth, in this
    harness ('baseline-harness'). Every side's tokens/s come from its mean step, one statistic on both sides of the
    ratio: the plain loop's wall-clock mean, as nanoGPT times it, and a harness side's mean CUDA-event step (a token
    budget takes the mean step's time, not the median's)."""
    out = {}
    for role in ROLES:
        if role == "baseline-harness" and not config.runs_evidence(params, "recipe_harness"):
            continue  # left to DEPTH=full: a record of it is another run's, not this one's
        runs = [r for r in recipe if r.get("variant") == f"recipe: {role}" and r.get("status") == record.Status.OK]
        if runs:
            s = noise.spread([mean_tokens_per_s(r) for r in runs])
            out[role] = {
                "stage": runs[0]["stage"],
                "batch": runs[0]["batch_size"],
                "micro_steps": runs[0].get("micro_steps", 1),
                "final_loss": runs[0].get("final_loss"),  # what a DDP job of the same batches is held to
                **{k: s[k] for k in ("median", "lo", "hi", "n")},
            }
    return out


def side_rows(recipe: dict | None) -> list[dict]:
    """One row per side of decisions.json's recipe (recipe_sides), in ROLES' order: its role and its side, with its
    tokens/s range also as min and max."""
    sides = (recipe or {}).get("sides") or {}
    return [
        {"role": role, **sides[role], "min": sides[role]["lo"], "max": sides[role]["hi"]}
        for role in ROLES
        if role in sides
    ]


def mean_tokens_per_s(r: dict) -> float:
    """A record's tokens/s over its mean step: a harness record's from its mean CUDA-event step (its tokens_per_s is
    the median's), the plain loop's as it is (its wall-clock mean already)."""
    if r.get("mean_ms") and r.get("median_ms"):
        return r["tokens_per_s"] * r["median_ms"] / r["mean_ms"]
    return r["tokens_per_s"]


def _mfu_bf16(params: Params, rec: dict, tokens_per_s: float) -> float | None:
    """The MFU of `rec`'s configuration at `tokens_per_s`, against the bf16 dense peak (every stage on one scale)."""
    mfu = stats.mfu_bf16_of(params, rec.get("mfu"), rec.get("peak_precision"))
    return mfu * tokens_per_s / rec["tokens_per_s"] if mfu and rec.get("tokens_per_s") else None


def make_recipe(
    records: list[dict],
    evidence: dict,
    params: Params,
    env: dict,
    price: dict | None,
    checks: dict | None = None,
    best: dict | None = None,
) -> dict | None:
    """The recipe (decide.recommended) with what it buys: its tokens/s at the global batch where measured (else its
    micro-batch's own), × the canonical trainer in the same sitting with the range over every pair of processes, MFU,
    memory, the hours, GPU-hours and cost of evidence.token_budget for it and for the canonical trainer (`price`:
    prices.stated, {usd, source}), the levers it has on, the tie rule's call and a memory-saving micro-batch that ties
    with it, and DDP over the host's GPUs where measured."""
    best = best or decide.recommended(records, params, checks=checks)  # the caller's, where it found it already
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
    usd = (price or {}).get("usd")
    ddp = [
        {
            "gpus": int(r["world_size"]),
            "micro_batch": r["batch_size"],
            "accumulation": r.get("micro_steps") or 1,
            "tokens_per_s": r["tokens_per_s"],
            "processes": r.get("processes"),  # {n, median, lo, hi} over the processes that timed the job
            "efficiency": r.get("scaling_efficiency"),
            "allreduce_share": r.get("allreduce_share"),
            "reference_tokens_per_s": r.get("single_gpu_tokens_per_s"),
            "mfu_bf16": _mfu_bf16(params, best, r["tokens_per_s"] / int(r["world_size"])),  # a GPU's, as the recipe's
            "mem_device_peak_bytes": r.get("mem_device_sampled_peak_bytes"),  # NVML's, sampled, where the job kept it
            "mem_device_after_bytes": r.get("mem_device_bytes"),  # else the device in use after the steps
            "steps": {"warmup": r.get("warmup_steps"), "timed": r.get("timed_steps")},
            **_time(budget, r["tokens_per_s"], int(r["world_size"]), usd),
        }
        for r in records_multi_gpu(evidence.get("matrix") or [])
    ]
    saver = decide.memory_saver(records, params, best, checks)
    spent, theirs = _time(budget, tps, 1, usd), _time(budget, canon["median"], 1, usd) if canon else None
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
        # every side timed at the global batch (the canonical trainer in this harness too, at full depth), for the
        # views that set them side by side: one statistic, decided here
        "sides": sides,
        # the canonical trainer on the same budget: what the recipe saves, in the units a team decides in
        "canonical_time": {
            **_time(budget, canon["median"], 1, usd),
            "mfu_bf16": _mfu_bf16(params, best, canon["median"]),
        }
        if canon
        else None,
        "levers_on": decide.lineage(best["stage"])[1:],  # every stage after the baseline is a lever it has on
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
        **spent,
        # what the recipe saves on the token budget against the canonical trainer (only where timed as trained)
        "saves": {k: theirs[k] - spent[k] if theirs[k] and spent[k] else None for k in ("gpu_hours", "cost")}
        if theirs and mine
        else None,
        "price_per_gpu_hour": usd,
        "price_source": (price or {}).get("source"),
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


def price_break_even(first: dict, other: dict) -> dict | None:
    """Which of two recipes (decisions' recipe of two reports) trains a token for less: `ratio`, the other's tokens/s
    per GPU over the first's, is the price ratio per GPU-hour at which the other stops paying; `prices`, the stated
    prices' ratio where both are known, and `cheaper` (which recipe costs less for the token budget at those prices).
    Each recipe on one GPU, as page 1's first row."""
    if not (first and other and first.get("tokens_per_s") and other.get("tokens_per_s")):
        return None
    a, b = first.get("price_per_gpu_hour"), other.get("price_per_gpu_hour")
    return {
        "ratio": other["tokens_per_s"] / first["tokens_per_s"],
        "prices": b / a if a and b else None,
        "cheaper": None
        if not (first.get("cost") and other.get("cost"))
        else ("other" if other["cost"] < first["cost"] else "first"),
    }
