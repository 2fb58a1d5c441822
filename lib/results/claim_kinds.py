"""How each kind of claim is judged, as data: a stage pair's figure per batch size (eager or under torch.compile, with
what else the report measured beside it), the lm_head GEMM sweep's kernels and alignment, the divergence check, the attention
kernel that ran, every FP8 form. Each returns {check, figure, beside, why, verdict?, pair} (lib/results/claims.py makes
a claim's row of it): `figure` is the one the verdict rests on (claim_judge.figure), `beside` the others, `why` why
there is none, `verdict` a word that is not the figure's own."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from lib.core import stages
from lib.results import claim_figures, gemm_alignment
from lib.results.claim_judge import (
    CONFIRMS,
    CONTRADICTED,
    NOT_APPLICABLE,
    RANK,
    UNDECIDED,
    figure,
    judge,
    per_batch_text,
    range_text,
)
from lib.results import stats


def _no_sweep(gemm: dict | None, what: str) -> str:
    if not gemm:
        return "the lm_head GEMM sweep was not measured for this report"
    if gemm.get("status") != "ok":
        return f"the lm_head GEMM sweep did not complete ({gemm.get('status')}: {gemm.get('reason')})"
    return f"the lm_head GEMM sweep has no {what}"


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", str(v))[:2])


def pair(claim: dict, df: pd.DataFrame, ev: dict) -> dict:
    """A stage pair's figure (claim_figures.per_batch). A padding claim (`compiled`) is judged on the stack the
    recommendation uses: under torch.compile where its stage is compiled, the eager figure beside, else the other way
    round. Beside it also: the lever's leave-one-out worth (`leave_one_out`) and the kernel time it changes and the
    rest's (`explain`), the measured cause of a figure that differs between GPUs of one family."""
    metric, stage, versus, facts = claim["metric"], claim["stage"], claim["versus"], ev["facts"] or {}
    layer = f", {claim['layer'].replace('_', ' ')} memory" if metric == "memory_change" else ""
    check = f"{claim_figures.pair_text(stage, versus)}{layer}: {range_text(metric, claim['expect'])}"
    out = {"check": check, "beside": [], "why": ""}
    values = claim_figures.per_batch(df, claim)  # the pair is the check's, named once
    text = f"{per_batch_text(metric, values)}{layer}" if not values.empty else ""
    noise = ev["band"](stage, versus)
    eager = figure(text, metric, float(np.median(values)), claim["expect"], noise) if text else None
    out["figure"], out["pair"] = eager, (stage, versus) if metric in ("speedup", "time_change") else None
    out["why"] = "" if eager else claim_figures.why_unmeasured(df, claim)
    if claim.get("compiled"):
        got = claim_figures.compiled_padding(df, facts, claim["compiled"])
        where = f"compiled ({claim_figures.title('compile')}, unpadded vs padded"
        compiled = None
        if not isinstance(got, str):
            text = f"{got[0]:.2f}× at B={got[1]} {where})"
            compiled = figure(text, "speedup", got[0], claim["expect"], ev["band"]("compile")) | {"basis": "compiled"}
        eager = eager and eager | {"basis": "eager"}
        if facts.get("compiled"):  # the recommendation trains compiled: the verdict rests on that figure
            out["beside"].append(
                eager | {"text": f"eager: {eager['text']}"} if eager else {"text": f"eager: {out['why']}"}
            )
            out.update(
                figure=compiled, pair=None, why="" if compiled else f"{where}), the recommendation's stack: {got}"
            )
        else:
            out["figure"] = eager
            out["beside"].append(compiled or {"text": f"{where}): {got}"})
    if claim.get("leave_one_out"):
        out["beside"].append(claim_figures.on_top(facts, claim["leave_one_out"]))
    if claim.get("explain") and (why := claim_figures.cause(facts, stage, versus, claim["explain"])):
        out["beside"].append(why)
    return out


def gemm_pair(claim: dict, ev: dict) -> dict:
    """The real width against the padded one in the GEMM sweep. `kernels` (a claimed fallback kernel):
    the unaligned width must run different kernels *and* take the claimed multiple of the time; the
    same kernels contradict it. `misalignment` (a claim about a newer cuBLAS): the time alone, judged
    where the report's cuBLAS is at least the claim's `cublas`."""
    dt, (real, padded), masks = claim["dtype"], claim["widths"], claim["metric"] == "misalignment"
    gemm, have = ev["gemm"], (ev["facts"] or {}).get("cublas")
    out = {
        "check": f"{dt} lm_head GEMM, forward + backward, n={real} vs n={padded}: "
        f"{'' if masks else 'different kernels and '}{range_text(claim['metric'], claim['expect'])} the time"
        + (f", with cuBLAS {claim['cublas']} or newer" if masks else ""),
        "figure": None,
        "beside": [],
    }
    if masks and have is not None and _version(have) < _version(claim["cublas"]):
        return {
            **out,
            "why": f"this report's cuBLAS is {have}, older than {claim['cublas']}",
            "verdict": NOT_APPLICABLE,
        }
    pts = {(p["dtype"], p["n"]): p for p in (gemm or {}).get("points", []) if p.get("total_ms")}
    kernels = (gemm or {}).get("kernels", {}).get(dt, {})
    if (dt, real) not in pts or (dt, padded) not in pts or str(real) not in kernels or str(padded) not in kernels:
        return {**out, "why": _no_sweep(gemm, f"{dt} timing and kernels at n={real} and n={padded}")}
    if masks and have is None:
        return {**out, "why": "the report's cuBLAS version is not recorded"}
    ratio = pts[(dt, real)]["total_ms"] / pts[(dt, padded)]["total_ms"]
    ka, kb = kernels[str(real)], kernels[str(padded)]
    differ = [ph for ph in ("fwd", "bwd") if ka.get(ph) != kb.get(ph)]
    text = (
        f"{ratio:.2f}× the time"
        + (f" with cuBLAS {have}" if masks else "")
        + "; kernels "
        + (f"differ in the {' and '.join(differ)} pass" if differ else "identical")
        + f" (forward at {real}: {gemm_alignment.kernel_name(ka.get('fwd'))};"
        f" at {padded}: {gemm_alignment.kernel_name(kb.get('fwd'))})"
    )
    word = judge(claim["metric"], ratio, claim["expect"]) if differ or masks else CONTRADICTED
    return {**out, "figure": {"text": text, "value": ratio, "word": word, "note": "", "kernels_differ": bool(differ)}}


def alignment(claim: dict, df: pd.DataFrame, ev: dict) -> dict:
    """Whether widths that are multiples of `multiple` run faster than the other multiples of 8
    (gemm_alignment.alignment_groups: a width that is not a multiple of 8 is in neither group). Its
    noise is the width-to-width scatter: no change while the multiples' median lies inside the
    range of the others (the vocab chapter's "about as fast")."""
    dt, mult = claim["dtype"], claim["multiple"]
    out = {
        "check": f"{dt} lm_head GEMM sweep, forward + backward: the other multiples of 8 take "
        f"{range_text('alignment', claim['expect'])} the time of the multiples of {mult} (medians)",
        "figure": None,
        "beside": [],
    }
    aligned, other = gemm_alignment.alignment_groups(ev["gemm"], dt, mult)
    if not aligned or not other:
        return {
            **out,
            "why": _no_sweep(ev["gemm"], f"{dt} timing at a multiple of {mult} and at another multiple of 8"),
        }
    ms = [p["total_ms"] for p in other]
    mine, theirs = float(np.median([p["total_ms"] for p in aligned])), float(np.median(ms))
    ratio = theirs / mine
    # the scatter: how far the others' median lies from the end of their range on the ratio's side, so that the
    # ratio is within it while the multiples' median lies inside the others' range
    noise = theirs / min(ms) - 1 if ratio >= 1 else 1 - theirs / max(ms)
    edge = "above the fastest" if ratio >= 1 else "below the slowest"
    odd = sorted({p["n"] for p in ev["gemm"].get("points", []) if p["dtype"] == dt and p["n"] % 8})
    out["figure"] = figure(
        f"{ratio:.2f}× the time ({len(other)} other multiples of 8 against {len(aligned)} multiples of {mult}"
        + (f"; n={', '.join(map(str, odd))}, not a multiple of 8, in neither" if odd else "")
        + ")",
        "alignment",
        ratio,
        claim["expect"],
        noise,
        "the width-to-width scatter",
        band=f"the other multiples of 8 take {min(ms):.2f} to {max(ms):.2f} ms, their median of {theirs:.2f} ms lying "
        f"{noise * 100:.1f} % {edge} of them; the median of the multiples of {mult}, {mine:.2f} ms, lies inside that "
        "range",
    )
    if claim.get("compiled"):  # context only: a whole step cannot tell a multiple of 128 from one of 8
        got = claim_figures.compiled_padding(df, ev["facts"], claim["compiled"])
        step = f"{got[0]:.2f}× at B={got[1]}, a step that cannot tell 128 from 8" if not isinstance(got, str) else got
        out["beside"].append({"text": f"compiled, unpadded vs padded: {step}"})
    return out


def loss_gate(claim: dict, df: pd.DataFrame, tolerance: float | None) -> dict:
    """The report's divergence check of the claim's stage against its loss reference (decide.table) at each batch size it
    was computed at, named in the check (a reviewer read "every batch size" where TF32 ran at one): failed at any
    contradicts "no measurable impact"; held at each leaves it undecided, since the check catches only a broken lever
    (a reviewer found "confirmed" resting on it); where the stage did not run, and why, follows."""
    tol = f" of {tolerance:g} nats" if tolerance is not None else ""
    gated = df[(df["stage"] == claim["stage"]) & (df["status"] == "ok")]
    gated = gated[gated["loss_verdict"].notna()] if "loss_verdict" in df else gated.iloc[:0]
    at = f"B={', '.join(map(str, gated['batch_size']))}" if len(gated) else "each batch size both ran"
    out = {
        "check": f"{claim_figures.pair_text(claim['stage'], claim['versus'])}: the divergence check holds at {at} (5-step "
        f"average of the loss difference after warm-up within the report's tolerance{tol})",
        "figure": None,
        "beside": [],
    }
    if gated.empty:
        return {**out, "why": claim_figures.why_unmeasured(df, claim)}
    worst = gated.loc[gated["loss_gap"].idxmax()]
    failed = list(gated[gated["loss_verdict"].isin(stats.GATE_FAILS)]["batch_size"])
    skipped = df[(df["stage"] == claim["stage"]) & (df["status"] != "ok")]  # where it ran no gate
    text = (
        f"largest gap {worst.loss_gap:.4f} nats (B={worst.batch_size}); the check "
        + (f"failed at B={', '.join(map(str, failed))}" if failed else f"held at {at}")
        + "".join(
            f" ({claim_figures.title(r.stage)} at B={r.batch_size}: {str(r.status).replace('_', ' ')})"
            for r in skipped.itertuples()
        )
    )
    note = "" if failed else "; the check catches only a broken lever: no quality test of this lever decides it"
    word = CONTRADICTED if failed else UNDECIDED
    return {**out, "figure": {"text": text + note, "value": float(worst.loss_gap), "word": word, "note": ""}}


def attention(claim: dict, ev: dict) -> dict:
    """A claim that names FlashAttention-3, by the attention kernel that ran (claim_figures.attention). Only its own
    kernel carries a figure: what it is worth against SDPA's FlashAttention-2 forced, in a step (`figure: step`) or
    in attention time (`figure: kernels`, estimated). Any other kernel leaves it not measured, the kernel named in
    `ran` and its own worth against FlashAttention-2 beside."""
    versus, step = claim["versus_backend"], claim["figure"] == "step"
    fa2 = f"SDPA's {versus} backend (FlashAttention-2) forced"
    out = {
        "check": "FlashAttention-3's own kernel ran (kernel profile); "
        + (
            f"the step with it over the step with {fa2}"
            if step
            else f"the attention time of {fa2} over its own, estimated as its profiled attention time plus the "
            "difference of the two backends' forced step times"
        )
        + f": {range_text('speedup', claim['expect'])}",
        "figure": None,
        "beside": [],
    }
    a = claim_figures.attention(claim["stage"], ev["facts"], ev["sdpa"], versus)
    if "kernel" not in a:
        return {**out, "why": f"{a['why']}; {claim_figures.sdpa_measured(ev['sdpa'])}"}
    rec = a["record"]
    ran = f"{stages.get(rec['stage']).title} at B={rec['batch_size']} ran {a['kernel']} ({rec.get('sdpa_backend') or 'SDPA'})"
    out["ran"] = {
        "kernel": a["kernel"],
        "implementation": rec.get("sdpa_backend"),
        "own": a["own"],
        "fa3_class": a["fa3"],
    }
    if "step" in a:
        value = a["step"] if step else a["kernels"]
        band = ev["band"](claim["stage"])  # the forced backends are processes of this stage, in the same run
        noise = band if step or band is None else band * a["step_ms"] / a["attention_ms"]  # on attention time
        what = (
            f"the step {value:.2f}× as fast as with {fa2} (B={a['batch']})"
            if step
            else f"with {fa2}, attention takes about {value:.2f}× its {a['attention_ms']:.2f} ms (B={a['batch']}, estimated)"
        )
        got = figure(what, "speedup", value, claim["expect"], noise)
    else:
        got = {"text": f"its worth against FlashAttention-2 not measured: {a['why']}"}
    if a["own"]:  # FlashAttention-3 itself: its figure carries the verdict
        mine = {**got, "text": f"{ran}; {got['text']}"}
        return {**out, "figure": mine, "why": ""} if "word" in got else {**out, "why": mine["text"]}
    kind = "another implementation of its class (Hopper warpgroup MMA)" if a["fa3"] else "not of its class"
    return {
        **out,
        "why": f"no FlashAttention-3 kernel ran: {ran}, {kind}",
        # the word that kernel's figure would earn is data (`earns`), not shown: it is not FlashAttention-3's
        "beside": [
            {k: v for k, v in got.items() if k != "word"}
            | {"text": f"that kernel: {got['text']}", "earns": got.get("word")}
        ],
    }


def rests_on(form: dict) -> tuple:
    """The order of an FP8 claim's forms, the first the one its verdict rests on (stated once, here; claims.RULES
    and params/claims.yaml `forms` say it in words): the best word, then the largest speed-up over the stage it is
    added to (a tie keeps the claim's order); a form not counted has no word and comes after."""
    return RANK.get(form.get("word"), len(RANK)), -round(form["value"], 9)


def forms(claim: dict, df: pd.DataFrame, ev: dict) -> dict:
    """A claim about FP8 on every FP8 form and size the report measured (params/claims.yaml states the rule): a form
    its parity test found worse is not counted; each other earns a word by its figure, a confirming one becoming
    undecided where its parity test could not decide; the verdict rests on the first form by rests_on. The other
    forms, the ones not measured and the size sweep are beside it. Each form is named as claim_figures.form_names."""
    metric, facts, names = claim["metric"], ev["facts"] or {}, claim_figures.form_names(claim["forms"])
    out = {"check": f"each FP8 form over the stage it is added to: {range_text(metric, claim['expect'])}"}
    out.update(figure=None, pair=None)
    measured, missing = claim_figures.forms(claim["forms"], df, facts)
    not_held, undecided, judged = facts.get("not_held") or {}, facts.get("undecided") or set(), []
    for f in measured:
        text = f"{f['name']} over {claim_figures.title(f['versus'])}: {per_batch_text(metric, f['values'])}"
        value = float(np.median(f["values"]))
        if f["stage"] in not_held and f["stage"] not in undecided:  # found worse: not one to train with
            text = f"{text}, not counted: {not_held[f['stage']]}"
            judged.append({"text": text, "form": f["stage"], "value": value, "counted": False})
            continue
        got = figure(text, metric, value, claim["expect"], ev["band"](f["stage"], f["versus"]))
        if f["stage"] in undecided:  # its loss may yet fail: a confirming word waits on it, any other stands
            why = not_held.get(f["stage"], "its parity test could not decide")
            got.update(text=f"{text}, {why}", word=UNDECIDED if got["word"] in CONFIRMS else got["word"])
        judged.append({**got, "form": f["stage"], "versus": f["versus"]})
    judged.sort(key=rests_on)
    best = judged[0] if judged and "word" in judged[0] else None
    if best:
        out.update(figure=best, pair=(best["form"], best["versus"]))
    # the other forms' figures, each with the word it earns as data (`earns`), not shown
    beside = [{k: v for k, v in f.items() if k != "word"} | {"earns": f["word"]} if "word" in f else f for f in judged]
    names_by_title = {claim_figures.title(k): n for k, n in names.items()}
    return {
        **out,
        "beside": beside[1 if best else 0 :]
        + [{"text": m} for m in missing]
        + [{"text": claim_figures.sizes(facts, names_by_title)}],
        "why": "" if best else "every FP8 form measured was found worse" if measured else "no FP8 form has a figure",
    }
