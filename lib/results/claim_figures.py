"""*What the claims' verdicts read*: the figures behind each claim of params/claims.yaml, with no
verdict word (lib/results/claim_kinds.py judges them). A stage pair's figure per batch size, every FP8 form and
model size, the padding under torch.compile, the attention kernel that ran and its worth against
FlashAttention-2, a lever's worth on top of the recommendation. `facts` gathers what a report folder
holds beyond its stage matrix as plain data, so a test can write it by hand."""

from __future__ import annotations

import re

import pandas as pd

from lib.core import stages
from lib.core.config import preset_of
from lib.core.kernel_categories import kernel_label
from lib.core.params import Params
from lib.core.record import TIMED as OK
from lib.results import decide, parity, size_sweep, time_to_loss
from lib.results.claim_judge import signed_pct

LAYERS = {
    "tensors": "mem_tensors_bytes",
    "allocator": "mem_allocator_bytes",
    "device": "mem_device_bytes",
    "device_sampled": "mem_device_sampled_peak_bytes",
}
# Why a memory layer can be missing where both stages ran.
NO_LAYER = {
    "device_sampled": "device memory was not sampled during the step in this report's records "
    "(records older than the sampling, or NVML unavailable)"
}
# FlashAttention-3's own kernels (FlashAttn*Sm90), and its class: kernels built for Hopper's warpgroup MMA (wgmma,
# sm90), as cuDNN's Hopper flash attention is. A claim that names FlashAttention-3 is judged on its own kernels only
# (params/claims.yaml states the rule); one of its class is another implementation, named beside.
FA3_OWN = re.compile(r"flashattn\w*sm90", re.IGNORECASE)
FA3_CLASS = re.compile(r"sm90\w*wgmma|wgmma\w*sm90|" + FA3_OWN.pattern, re.IGNORECASE)


# what a long test that did not adopt a lever says of it, where a claim would rest on the lever
LONG_NOT_HELD = {
    time_to_loss.NOT_YET: "its long test has not yet decided whether it reaches the same loss sooner",
    time_to_loss.SKIP: "its long test found it later to the same loss",
}


def facts(
    evidence: dict,
    params: Params,
    env: dict,
    recipe: dict | None,
    checks: dict,
    loo: tuple,
    left: list,
    floor,
    long: dict | None = None,
) -> dict:
    """What the verdicts read from a report folder beyond its stage matrix and its GEMM sweep (decisions.compute's:
    `evidence` with the matrix's records under 'matrix', the recipe, parity.checks, the leave-one-out, the levers
    this depth left untested, the noise floor, and {stage: its long test's decision} where one ran: a long test
    speaks for a training run, so it replaces the short test's word on a lever it judged)."""
    full, rows = loo
    long = long or {}
    sizes = evidence.get("size") or []
    rejected = parity.rejected(checks)
    return {
        # whether the recipe's stage is compiled: the stack a padding claim is judged on (None: no recipe)
        "compiled": recipe and stages.get(recipe["stage"]).compile,
        "variants": evidence.get("variants") or [],
        "stages": params.stages,
        "not_run": params.not_run or [],
        "model": preset_of(params),
        "cublas": env.get("cublas"),
        "profiles": [
            r
            for r in evidence.get("matrix") or []
            if r.get("kernel_profile") and r["status"] in OK and not stages.is_multi_gpu(r["stage"])
        ],
        "leave_one_out": full
        and {"stage": full["stage"], "batch_size": full["batch_size"], "rows": {row["lever"]: row for row in rows}},
        # stages whose parity test did not hold (found worse or undecided): a claim that a lever pays for training
        # does not rest on them
        "not_held": {
            k: f"its parity test {'could not decide' if c['verdict'] == parity.UNDECIDED else 'found it worse'}"
            for k, c in rejected.items()
            if k not in long
        }
        # a lever this depth left untested (decisions' left_to_full_depth) is not yet one to train with either
        | {k: "its quality is not tested at this depth" for k in left or [] if k not in long}
        | {k: LONG_NOT_HELD[v] for k, v in long.items() if v in LONG_NOT_HELD},
        "undecided": {k for k, c in rejected.items() if c["verdict"] != parity.WORSE and k not in long}
        | {k for k in left or [] if k not in long}
        | {k for k, v in long.items() if v == time_to_loss.NOT_YET},
        "sizes": size_sweep.points(sizes)
        and {"series": size_sweep.speedups(sizes), "bands": size_sweep.bands(sizes, floor)},
    }


def per_batch(df: pd.DataFrame, claim: dict) -> pd.Series:
    """The claim's figure at every batch size where both stages have a valid timing (and, for a
    memory claim, the layer)."""
    ok = df[df["status"] == "ok"]
    a = ok[ok["stage"] == claim["stage"]].set_index("batch_size")
    b = ok[ok["stage"] == claim["versus"]].set_index("batch_size")
    common = sorted(set(a.index) & set(b.index))
    # step times by the median over processes (decide.table's tokens/s: one batch, one tokens-per-step)
    tps = "tokens_per_s"
    if claim["metric"] == "speedup":
        vals = {n: a.at[n, tps] / b.at[n, tps] for n in common}
    elif claim["metric"] == "time_change":
        vals = {n: b.at[n, tps] / a.at[n, tps] - 1 for n in common}
    else:
        col = LAYERS[claim["layer"]]
        vals = {
            n: a.at[n, col] / b.at[n, col] - 1
            for n in common
            if not pd.isna(a.at[n, col]) and not pd.isna(b.at[n, col]) and b.at[n, col]
        }
    return pd.Series(vals, dtype=float)


def title(key: str) -> str:
    """A stage as a reader knows it: its title, never its key (a reviewer found fp8_torchao in the PDF)."""
    return stages.get(key).title


def pair_text(stage: str, versus: str) -> str:
    return f"{title(stage)} vs {title(versus)}"


def form_names(keys: list[str]) -> dict[str, str]:
    """Each FP8 form's name: its stage title, followed by its implementation (its package, else hand-written) where
    the title alone would read as another form's (FP8 linear layers beside FP8 linear layers (torchao))."""
    titles = {k: title(k) for k in keys}
    base = {k: re.sub(r" \([^)]*\)$", "", t) for k, t in titles.items()}
    clash = {k for k in keys if titles[k] == base[k] and list(base.values()).count(base[k]) > 1}
    return {k: f"{t} ({stages.get(k).package or 'hand-written'})" if k in clash else t for k, t in titles.items()}


def why_unmeasured(df: pd.DataFrame, claim: dict) -> str:
    ok = df[df["status"] == "ok"]
    timed = [set(ok[ok["stage"] == s]["batch_size"]) for s in (claim["stage"], claim["versus"])]
    a, b = title(claim["stage"]), title(claim["versus"])
    if timed[0] & timed[1]:
        if claim["metric"] == "loss_gate":
            return f"no divergence check of {a} against {b} was computed"
        return NO_LAYER.get(claim.get("layer"), f"the {claim.get('layer')} memory layer was not recorded")
    other = df[df["stage"].isin([claim["stage"], claim["versus"]]) & (df["status"] != "ok")]
    return f"no batch size where both {a} and {b} have a timing" + "".join(
        f"; {title(r.stage)} at B={r.batch_size}: {str(r.status).replace('_', ' ')}" for r in other.itertuples()
    )


def _left_out(facts: dict | None, key: str) -> str | None:
    """Why stage or chapter `key` is not measured, in words that start "not measured", where the report did not run
    it: what the default depth leaves to DEPTH=full (lib/core/config.py not_run), with the command that runs it."""
    left = next((n for n in (facts or {}).get("not_run", []) if n["key"] == key), None)
    if left:
        to = "" if left.get("kind") == "chapter" else ", left to DEPTH=full"
        return f"not measured at the default depth{to} ({left['command']})"
    if key in (facts or {}).get("stages", [key]) or key == "size_sweep":
        return None
    return "not measured, not among this report's stages"


def forms(keys: list[str], df: pd.DataFrame, facts: dict | None) -> tuple[list[dict], list[str]]:
    """Each FP8 form (a stage) against the stage it is added to at the report's model, in the claim's order:
    [{stage, versus, name (form_names), values: its speed-up per batch size}], and for each form without a figure,
    why. Which one a verdict rests on is claim_kinds.forms's."""
    measured, missing, names = [], [], form_names(keys)
    for key in keys:
        pair = {"metric": "speedup", "stage": key, "versus": decide.previous_stage(key)}
        values = per_batch(df, pair)
        if values.empty:
            missing.append(f"{names[key]}: " + (_left_out(facts, key) or f"not measured, {why_unmeasured(df, pair)}"))
        else:
            measured.append({**pair, "name": names[key], "values": values})
    return measured, missing


def sizes(facts: dict | None, names: dict | None = None) -> str:
    """The size sweep's FP8 forms (variants by stage title; `names`: {title: the form's name}), each over the same
    size without FP8, and from which size each is faster beyond its size's noise (size_sweep.crossover)."""
    s = (facts or {}).get("sizes")
    if not s:
        return "the size sweep: " + (_left_out(facts, "size_sweep") or "not measured, no record of it in this report")
    out = []
    for form, series in s["series"].items():
        form = (names or {}).get(form, form)
        if all(r is None for _, r, _ in series):
            out.append(f"{form} not measured at any size ({series[0][2]})")
            continue
        pts = ", ".join(f"{p} {r:.2f}×" if r is not None else f"{p} not measured ({why})" for p, r, why in series)
        start = size_sweep.crossover(series, s["bands"])["from"]
        out.append(
            f"{form} {pts} ({f'faster beyond noise from {start} up' if start else 'faster beyond noise at no size'})"
        )
    return "the size sweep, each form over the same size without FP8: " + "; ".join(out)


def compiled_padding(df: pd.DataFrame, facts: dict | None, variant: str) -> tuple[float, int] | str:
    """The padding's speed-up under torch.compile: the compile stage at the unpadded vocabulary (the
    evidence record `variant`) over the compile stage at the same batch; else why it is missing."""
    var = next((r for r in (facts or {}).get("variants", []) if r.get("variant") == variant), None)
    if var is None or var["status"] != "ok":
        return "not measured, " + (f"its run ended {var['status']}" if var else "no record of it in this report")
    padded = df[(df["stage"] == var["stage"]) & (df["batch_size"] == var["batch_size"]) & (df["status"] == "ok")]
    if padded.empty:
        return f"not measured, no {title(var['stage'])} timing at B={var['batch_size']}"
    return var["median_ms"] / float(padded["median_ms"].iloc[0]), var["batch_size"]


def on_top(facts: dict | None, lever: str) -> dict:
    """A lever's worth on top of the recommendation's other levers, its leave-one-out row: {text, value}."""
    loo, what = (facts or {}).get("leave_one_out"), "on top of the recommendation's other levers (leave-one-out"
    if not loo:
        return {"text": f"{what}): not measured, no leave-one-out run in this report", "value": None}
    row, where = loo["rows"].get(lever), f"{what} at {stages.get(loo['stage']).title}, B={loo['batch_size']})"
    if not row or row["worth"] is None:
        rec = (row or {}).get("record") or {}
        return {
            "text": f"{where}: not measured, {rec.get('reason') or rec.get('status', 'no such row')}",
            "value": None,
        }
    judged = {True: " (within noise)", None: " (not judged against noise: another machine, offset not measured)"}
    return {
        "text": f"{where}: {signed_pct(row['worth'])}{judged.get(row.get('within_noise'), '')}",
        "value": row["worth"],
    }


def attention(stage: str, facts: dict | None, sdpa: list | None, versus: str) -> dict:
    """The attention kernel that ran (the largest of a profiled SDPA stage: `stage` at the batch the
    backends were forced at if it has one) and, where SDPA's backends were forced, what it is worth
    against backend `versus` (FlashAttention-2): {"kernel", "record", "fa3": of FA3's class, "own": FA3's own
    kernel} with "step", the step-
    time ratio, and "kernels", the attention kernels' time ratio, estimated as the profiled attention
    time plus the forced steps' difference; or {"why"}."""
    forced = {r.get("variant", "").removeprefix("SDPA "): r for r in sdpa or [] if r.get("status") in OK}
    batch = next(iter(forced.values()), {}).get("batch_size")
    ran = [
        r
        for r in (facts or {}).get("profiles", [])
        if stages.get(r["stage"]).attention == "sdpa"
        and any(k["category"] == "attention" for k in r["kernel_profile"]["kernels"])
    ]
    if not ran:
        return {
            "why": "the report has no kernel profile of a stage that runs SDPA, so which attention kernel ran is unknown"
        }
    rec = max(ran, key=lambda r: (r["stage"] == stage, r["batch_size"] == batch, r["batch_size"]))
    kernels = [k for k in rec["kernel_profile"]["kernels"] if k["category"] == "attention"]
    fa3 = [k for k in kernels if FA3_CLASS.search(k["name"])]
    name = (fa3 or kernels)[0]["name"]
    out = {"record": rec, "kernel": kernel_label(name, 100), "fa3": bool(fa3), "own": bool(FA3_OWN.search(name))}
    mine = next((r for r in forced.values() if r.get("sdpa_backend") == rec.get("sdpa_backend")), None)
    other = forced.get(versus)
    if mine is None or other is None or rec["batch_size"] != batch:
        return {
            **out,
            "why": f"SDPA's {versus} backend and the one that ran were not both forced at B={rec['batch_size']}",
        }
    att_ms = rec["kernel_profile"]["categories"][
        "attention"
    ]  # a record that listed only its top kernels has the rest here
    return {
        **out,
        "step": other["median_ms"] / mine["median_ms"],
        "batch": batch,
        "step_ms": mine["median_ms"],
        "attention_ms": att_ms,
        "kernels": (att_ms + other["median_ms"] - mine["median_ms"]) / att_ms,
    }


def sdpa_measured(sdpa: list | None) -> str:
    """The flash stage with each of SDPA's backends forced (results/sdpa), fastest first."""
    if not sdpa:
        return "the report forced no SDPA backend (results/sdpa is empty)"
    recs = sorted(sdpa, key=lambda r: -(r.get("tokens_per_s") or 0))
    return f"{title(recs[0]['stage'])} with each SDPA backend forced at B={recs[0]['batch_size']}: " + ", ".join(
        f"{r['variant'].removeprefix('SDPA ')} "
        + (f"{r['tokens_per_s']:,.0f} tok/s" if r["status"] == "ok" else r["status"].replace("_", " "))
        for r in recs
    )


def cause(facts: dict | None, stage: str, versus: str, category: str) -> dict | None:
    """What a timing figure rests on, from the kernel profiles of both stages at the smallest batch size both were
    profiled at: the time in `category` (the kernels the lever changes) and in the rest of the step, each stage's
    (ms); None without such a pair of profiles."""
    cats = {(r["stage"], r["batch_size"]): r["kernel_profile"]["categories"] for r in (facts or {}).get("profiles", [])}
    both = sorted(n for s, n in cats if s == stage and (versus, n) in cats)
    if not both:
        return None
    ms = {k: (cats[(k, both[0])].get(category, 0.0), sum(cats[(k, both[0])].values())) for k in (versus, stage)}
    ms = {k: (mine, total - mine) for k, (mine, total) in ms.items()}
    (a, ra), (b, rb) = ms[versus], ms[stage]
    text = f"kernel profile at B={both[0]}: {category} {a:.0f} → {b:.0f} ms, the rest {ra:.0f} → {rb:.0f} ms"
    return {"batch": both[0], "category": category, "ms": ms, "text": text}
