"""Decisions from the records: the tidy table every chapter reads, which stages held their loss, and
the recommendation (the fastest verified micro-batch that reaches the global batch: the recipe)."""

from __future__ import annotations

import numpy as np

from lib.core import stages
from lib.core.record import TIMED, TIMING_VARIANTS, Status
from lib.core.params import Params
from lib.results import parity
from lib.results.noise import across_machines, band, decision_floor, spread, within_noise
from lib.results.stats import GATE_FAILS, loss_gap, loss_noise, spike_step


def table(
    records: list[dict],
    stage_order: list[str],
    tolerance: float | None = None,
    noise: float = 0.0,
    processes: dict | None = None,
    steps: dict | None = None,
):
    """Tidy table, one row per configuration, in stage order, with the comparisons every
    reader asks for: speedup over FP32 and over the previous stage at the same batch, and the
    final-loss difference from the stage's reference (FP32 for the classic five, the vocab
    stage for the levers after them) at the same batch, and the loss gate (loss_gap against the
    tolerance; `noise` is loss_noise: a gap beyond the tolerance by less is 'within noise').
    `processes` (throughputs): a configuration timed in several processes enters the speed-ups by
    their median, the figure the recommendation quotes; else by its one process. `steps` (step_times): its p10-p90
    is then of every step those processes timed, so the spread printed beside a median is of the same processes."""
    import pandas as pd

    # a key a record lacks (an older record, another kind) is None in its row
    cols = [
        "stage",
        "stage_title",
        "batch_size",
        "status",
        "reason",
        "median_ms",
        "p10_ms",
        "p90_ms",
        "cv",
        "tokens_per_s",
        "mfu",
        "peak_precision",
        "achieved_tflops",
        "mem_tensors_bytes",
        "mem_allocator_bytes",
        "mem_device_bytes",
        "mem_device_sampled_peak_bytes",
        "final_loss",
        "sdpa_backend",
        "world_size",
        "micro_steps",
        "processes",
        "scaling_efficiency",
        "allreduce_share",
        "per_gpu_tokens_per_s",
        "single_gpu_tokens_per_s",
        "one_rank_tokens_per_s",
        "one_rank_efficiency",
        "efficiency_reference",
        "base_stage",
        "first_step_s",
        "warmup_steps",
    ]
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in records], columns=cols)
    df["joules_per_token"] = [(r.get("energy") or {}).get("joules_per_token") for r in records]
    df["avg_power_w"] = [(r.get("energy") or {}).get("avg_power_w") for r in records]
    df["stage_idx"] = df["stage"].map({s: i for i, s in enumerate(stage_order)})
    df = df.sort_values(["stage_idx", "batch_size"]).reset_index(drop=True)
    ok = df["status"].isin(TIMED)
    timed = [
        float(np.median(processes[(s, b)])) if len((processes or {}).get((s, b)) or []) > 1 else t
        for s, b, t in zip(df["stage"], df["batch_size"], df["tokens_per_s"])
    ]
    # One figure per configuration: where several processes timed it, the row's throughput, its step time and MFU are
    # their median's (the first process's own stay in its record), and p10-p90 those of all their steps pooled (the
    # first process's alone had put a median of processes outside its own p10-p90: reports/h100-x4's TF32 row).
    scale = [t / f if o and t and f else 1.0 for t, f, o in zip(timed, df["tokens_per_s"], ok)]
    df["first_tokens_per_s"] = df["tokens_per_s"]
    df["tokens_per_s"] = [f * k if f is not None else f for f, k in zip(df["tokens_per_s"], scale)]
    for col in ("mfu", "achieved_tflops"):
        df[col] = [v * k if v is not None and not pd.isna(v) else v for v, k in zip(df[col], scale)]
    df["median_ms"] = [v / k if v is not None and not pd.isna(v) else v for v, k in zip(df["median_ms"], scale)]
    pools = {
        k: np.concatenate(v) for k, v in (steps or {}).items() if len(v) > 1 and len((processes or {}).get(k) or []) > 1
    }
    for col, q in (("p10_ms", 10), ("p90_ms", 90)):
        df[col] = [
            float(np.percentile(pools[(s, b)], q)) if o and (s, b) in pools else v
            for s, b, v, o in zip(df["stage"], df["batch_size"], df[col], ok)
        ]
    # and the CV of the same pooled steps (the first process's alone disagreed with the others: reports/h200's FP8
    # lm_head read 2.0 % beside 4.5 % and 3.5 %)
    df["cv"] = [
        float(pools[(s, b)].std(ddof=1) / pools[(s, b)].mean()) if o and (s, b) in pools else v
        for s, b, v, o in zip(df["stage"], df["batch_size"], df["cv"], ok)
    ]
    base = df.assign(timed=timed)[(df["stage"] == stage_order[0]) & ok].set_index("batch_size")
    # Never for the multi-GPU stage: its throughput over one GPU's FP32 is no lever's speed-up.
    df["speedup_vs_baseline"] = [
        t / base["timed"][b] if b in base.index and ok_ and t and not stages.is_multi_gpu(s) else np.nan
        for s, b, t, ok_ in zip(df["stage"], df["batch_size"], timed, ok)
    ]
    losses = {(s, b): f for s, b, f, o in zip(df["stage"], df["batch_size"], df["final_loss"], ok) if o}
    df["loss_ref"] = [stages.get(s).reference if s in stages.STAGES else stage_order[0] for s in df["stage"]]
    # The multi-GPU stage trains with a larger global batch, so its loss is no one's to compare.
    df["loss_delta"] = [
        f - losses[(ref, b)]
        if not stages.is_multi_gpu(s)
        and s != ref
        and f is not None
        and not pd.isna(f)
        and losses.get((ref, b)) is not None
        and not pd.isna(losses[(ref, b)])
        else np.nan
        for s, b, f, ref in zip(df["stage"], df["batch_size"], df["final_loss"], df["loss_ref"])
    ]
    # The loss gate: every step after warm-up, not only the final window (see loss_gap).
    curves = {
        (r["stage"], r["batch_size"]): r.get("losses")
        for r in records
        if r.get("status") in TIMED and r.get("variant") is None
    }
    df["loss_gap"] = [
        loss_gap(curves.get((s, b)), curves.get((ref, b)), int(w or 0))
        if not stages.is_multi_gpu(s) and s != ref
        else np.nan
        for s, b, ref, w in zip(df["stage"], df["batch_size"], df["loss_ref"], df["warmup_steps"])
    ]
    # What a lever buys is judged against the stage right before it in the registry, at the same
    # batch, and only where that stage was measured: a report that skipped stages (STAGES=) must not
    # credit one lever with several. A multi-GPU stage is judged against one GPU at its setting.
    tps = {(s, b): t for s, b, t, o in zip(df["stage"], df["batch_size"], timed, ok) if o}
    df["previous_stage"] = [previous_stage(s) for s in df["stage"]]
    df["speedup_vs_previous"] = [
        t / tps[(p, b)] if o and t and (p, b) in tps else np.nan
        for t, p, b, o in zip(timed, df["previous_stage"], df["batch_size"], ok)
    ]
    df["lever_effect"] = [
        (w * e if not (pd.isna(w) or pd.isna(e)) else np.nan) if stages.is_multi_gpu(s) else v
        for s, v, w, e in zip(df["stage"], df["speedup_vs_previous"], df["world_size"], df["scaling_efficiency"])
    ]
    if tolerance is not None:
        df["loss_spike_step"] = [
            spike_step(curves[(s, b)], curves[(ref, b)], int(w or 0), tolerance + noise)
            if g > tolerance + noise
            else None
            for s, b, ref, w, g in zip(
                df["stage"], df["batch_size"], df["loss_ref"], df["warmup_steps"], df["loss_gap"]
            )
        ]
        verdicts = [
            None
            if pd.isna(g)
            else "within"
            if g <= tolerance
            else "within noise"
            if g <= tolerance + noise
            else "spike"
            if k is not None
            else "beyond"
            for g, k in zip(df["loss_gap"], df["loss_spike_step"])
        ]
        df["loss_verdict"] = verdicts
        df["loss_within_tolerance"] = pd.Series(
            [None if v is None else v not in GATE_FAILS for v in verdicts], dtype=object
        )
    return df.drop(columns="stage_idx")


def previous_stage(key: str) -> str | None:
    """The stage a lever is added to: its `base`, else the one right before it in the registry
    (none for the first stage and for a multi-GPU stage, which replicates the best single-GPU
    configuration)."""
    if key not in stages.STAGES or stages.is_multi_gpu(key):
        return None
    if stages.STAGES[key].base:
        return stages.STAGES[key].base
    i = stages.ORDER.index(key)
    return stages.ORDER[i - 1] if i else None


def lineage(key: str) -> list[str]:
    """The stages from the first to `key`, each the one the next is added to: the levers a
    configuration of `key` has, in the order they were added."""
    chain = [key]
    while previous_stage(chain[-1]):
        chain.append(previous_stage(chain[-1]))
    return chain[::-1]


def median_of(processes: dict, stage: str, batch: int, first: float) -> float:
    """A configuration's tokens/s as every ratio of a report takes it: the median over the processes that timed
    it (throughputs), its one process's figure where only one did."""
    runs = processes.get((stage, batch)) or []
    return float(np.median(runs)) if len(runs) > 1 else first


def lever_effect(df, key: str) -> dict:
    """What one lever buys in a report, computed once for every view (report, chapters, comparison):
    its effect per batch size (speed-up over the stage right before it; for a multi-GPU stage,
    its throughput over one GPU's), their median, and whether that previous stage was measured."""
    rows = df[(df["stage"] == key) & df["status"].isin(TIMED)]
    values = rows.set_index("batch_size")["lever_effect"].dropna()
    prev = previous_stage(key)
    return {
        "key": key,
        "previous": prev,
        "values": values,
        "median": float(np.median(values)) if len(values) else None,
        "previous_measured": prev is None or bool((df["stage"] == prev).any()),
    }


def verified_stages(df, reference_stages=("fp32",)) -> dict:
    """stage -> whether its loss held: True when every comparison with its reference was within
    tolerance (and there was at least one), False when any was not, None when none was possible.
    A reference stage is verified by definition. `df` is table(..., tolerance)."""
    out = {}
    for s, g in df.groupby("stage", sort=False):
        checks = [v for v in g["loss_within_tolerance"] if v is not None]
        out[s] = True if s in reference_stages else (all(checks) if checks else None)
    return out


def _by_process(records: list[dict], field: str) -> dict:
    """(stage, batch) -> `field` of every single-GPU process that timed it (matrix, sweep, repeats)."""
    out: dict = {}
    for r in records:
        if (
            r.get("status") == Status.OK
            and r.get("variant") in TIMING_VARIANTS
            and not stages.is_multi_gpu(r.get("stage"))
            and r.get(field) is not None
        ):
            out.setdefault((r["stage"], r["batch_size"]), []).append(r[field])
    return out


def step_times(records: list[dict]) -> dict:
    """(stage, batch) -> the timed steps (ms) of every process that timed it, as throughputs counts them."""
    return {k: [np.asarray(v, dtype=float) for v in vs] for k, vs in _by_process(records, "step_ms").items()}


def throughputs(records: list[dict]) -> dict:
    """(stage, batch) -> tokens/s of every process that timed it (matrix, sweep, repeats)."""
    return _by_process(records, "tokens_per_s")


def ranked_configs(records: list[dict], params: Params, eligible=None, checks: dict | None = None) -> list[dict]:
    """Single-GPU configurations (matrix and batch sweep) of stages whose loss held against
    their reference wherever it could be compared (verified_stages), fastest first by the
    median over every process that timed them. Batch size is not a numerical lever: a stage
    verified at some batch sizes is trusted at the others. `eligible(record)`, if given,
    further limits the candidates (not the verification). `checks`: parity.checks of these records, where the caller
    has them already (a report judges them once a render)."""
    single = [
        r
        for r in records
        if not stages.is_multi_gpu(r.get("stage"))
        and r.get("status") == Status.OK
        and r.get("variant") in (None, "batch sweep")
        and (eligible is None or eligible(r))
    ]
    if not single:
        return []
    order = stages.single_gpu(params.stages)
    # Verification reads the matrix only (sweep points have no reference at their batch size).
    df = table(
        [r for r in records if r.get("stage") in order and r.get("variant") is None],
        order,
        params.run.loss_tolerance,
        loss_noise(records),
    )
    verified = verified_stages(df, (order[0],))
    checks = parity.checks(records, params.evidence) if checks is None else checks
    for key, check in checks.items():
        for test in (check, check.get("canonical")):
            if test and test["verdict"] != parity.INCOMPLETE:  # a test cut off part-way decides nothing yet
                verified[key] = verified.get(key) and test["ok"]  # only tests that hold let a tested stage be adopted
    for key in parity.left_to_full_depth(checks, params):  # untested at this depth: never the recommendation
        verified[key] = False
    tps = throughputs(records)
    good = [r for r in single if verified.get(r["stage"])]
    return sorted(good, key=lambda r: -float(np.median(tps[(r["stage"], r["batch_size"])])))


def best_config(records: list[dict], params: Params, eligible=None, checks: dict | None = None) -> dict | None:
    """The fastest of ranked_configs, with `processes` (its tokens/s over the processes that timed it) and `against`,
    the tie rule's call against the next-fastest batch of the same stage timed in several processes (how far apart,
    the noise that decides, whether they tie): a tie is stated, and a smaller batch that ties is a memory saver
    (lib/results/decisions.py), never the pick."""
    ranked = ranked_configs(records, params, eligible, checks)
    if not ranked:
        return None
    tps = throughputs(records)
    gain = getattr(params.evidence, "batch_min_gain", None)
    pick = ranked[0]
    rival = next(
        (
            r
            for r in ranked
            if r["stage"] == pick["stage"] and r is not pick and len(tps[(r["stage"], r["batch_size"])]) > 1
        ),
        None,
    )
    mine = (pick["stage"], pick["batch_size"])
    return {
        **pick,
        "processes": spread(tps[mine]),
        "against": None if rival is None else against(records, tps, mine, (rival["stage"], rival["batch_size"]), gain),
    }


def recommendable(params: Params, eligible=None):
    """What can be the recommendation, which is the recipe a team trains with: a micro-batch that reaches the global
    batch by whole accumulation steps (Params.micro_steps), and on a profile that names a check stage (the CPU
    default, whose timings are noise) that stage alone, so every chapter is exercised whatever the noise decides."""
    fixed, tokens = getattr(params.evidence, "check_stage", None), params.evidence.global_batch_tokens

    def fits(r):  # a report measured before the global batch existed (method 1) recommends any batch
        return (
            (tokens is None or params.micro_steps(r["batch_size"]) is not None)
            and (fixed is None or r["stage"] == fixed)
            and (eligible is None or eligible(r))
        )

    return fits


def recommended(records: list[dict], params: Params, eligible=None, checks: dict | None = None) -> dict | None:
    """The recommendation: best_config among the recommendable configurations."""
    return best_config(records, params, recommendable(params, eligible), checks)


def against(records: list[dict], tps: dict, mine: tuple, theirs: tuple, min_gain: float | None = None) -> dict:
    """The tie rule's call between two configurations (stage, batch) timed in several processes: the batch size of
    `theirs`, the ratio of the medians (mine over theirs), the noise it is judged against, the least gain that
    counts (evidence.batch_min_gain) and whether they tie."""
    floor, across = decision_floor(records, tps), across_machines(records)
    a, b = tps[mine], tps[theirs]
    return {
        "batch_size": theirs[1],
        "ratio": float(np.median(a)) / float(np.median(b)),
        "band": band(a, b, floor, across),
        "min_gain": min_gain,
        "tie": ties(a, b, floor, across, min_gain),
    }


def ties(
    a: list[float], b: list[float], floor: float | None, across: float | None, min_gain: float | None
) -> bool | None:
    """The tie rule between two batch sizes' throughputs: within their noise (noise.within_noise), or, with
    `min_gain`, no more than that fraction apart (a gain the next H100 may not repeat). None where the noise is
    unknown."""
    within = within_noise(a, b, floor, across)
    if within is None or within or min_gain is None:
        return within
    return abs(float(np.median(a)) / float(np.median(b)) - 1) <= min_gain


def memory_saver(records: list[dict], params: Params, best: dict, checks: dict | None = None) -> dict | None:
    """A smaller micro-batch of the recipe's stage, dividing the global batch too, that the tie rule puts level with
    it and that needs less memory: listed beside the recipe, never as it."""
    tps = throughputs(records)
    floor, across, gain = (
        decision_floor(records, tps),
        across_machines(records),
        params.evidence.batch_min_gain,
    )
    mine = tps[(best["stage"], best["batch_size"])]
    level = [
        r
        for r in ranked_configs(records, params, lambda r: params.micro_steps(r["batch_size"]) is not None, checks)
        if r["stage"] == best["stage"]
        and r["batch_size"] < best["batch_size"]
        and len(tps[(r["stage"], r["batch_size"])]) > 1
        and ties(mine, tps[(r["stage"], r["batch_size"])], floor, across, gain)
        and (r.get("mem_allocator_bytes") or 0) < (best.get("mem_allocator_bytes") or 0)
    ]
    if not level:
        return None
    r = min(level, key=lambda r: r["batch_size"])
    return {
        "micro_batch": r["batch_size"],
        "accumulation": params.micro_steps(r["batch_size"]),
        "tokens_per_s": float(np.median(tps[(r["stage"], r["batch_size"])])),
        "mem_allocator_bytes": r.get("mem_allocator_bytes"),
    }
