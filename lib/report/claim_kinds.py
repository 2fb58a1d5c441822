"""The verdicts on the claims that one stage pair's figure per batch size cannot judge: the lm_head GEMM
sweep's kernels and alignment, the loss gate, the attention kernel that ran, every FP8 form; and the
padding's figure under torch.compile beside a verdict. Each fills a claim's row (lib/report/claims.py)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from lib.core import stages
from lib.report import claim_figures, gemm_sweep_view
from lib.report.claim_judge import (
    CONFIRMED,
    CONTRADICTED,
    EXCEEDED,
    NOT_APPLICABLE,
    NOT_MEASURED,
    UNDECIDED,
    WITHIN_NOISE,
    judge,
    per_batch_text,
    range_text,
    verdict_word,
)
from lib.results import decide, stats


def _no_sweep(gemm: dict | None, what: str) -> str:
    if not gemm:
        return "the lm_head GEMM sweep was not measured for this report"
    if gemm.get("status") != "ok":
        return f"the lm_head GEMM sweep did not complete ({gemm.get('status')}: {gemm.get('reason')})"
    return f"the lm_head GEMM sweep has no {what}"


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", str(v))[:2])


def gemm_pair_verdict(claim: dict, row: dict, applies: bool, ev: dict) -> dict:
    """The real width against the padded one in the GEMM sweep. `kernels` (a claimed fallback kernel):
    the unaligned width must run different kernels *and* take the claimed multiple of the time; the
    same kernels contradict it. `misalignment` (a claim about a newer cuBLAS): the time alone, judged
    where the report's cuBLAS is at least the claim's `cublas`."""
    dt, (real, padded), masks = claim["dtype"], claim["widths"], claim["metric"] == "misalignment"
    gemm = ev["gemm"]
    row["check"] = (
        f"{dt} lm_head GEMM, forward + backward, n={real} vs n={padded}: {'' if masks else 'different kernels and '}"
        f"{range_text(claim['metric'], claim['expect'])} the time"
        + (f", with cuBLAS {claim['cublas']} or newer" if masks else "")
    )
    have = (ev["facts"] or {}).get("cublas")
    if masks and have is not None and _version(have) < _version(claim["cublas"]):
        return {
            **row,
            "measured": f"this report's cuBLAS is {have}, older than {claim['cublas']}",
            "verdict": NOT_APPLICABLE,
        }
    pts = {(p["dtype"], p["n"]): p for p in (gemm or {}).get("points", []) if p.get("total_ms")}
    kernels = (gemm or {}).get("kernels", {}).get(dt, {})
    if (dt, real) not in pts or (dt, padded) not in pts or str(real) not in kernels or str(padded) not in kernels:
        return {
            **row,
            "measured": _no_sweep(gemm, f"{dt} timing and kernels at n={real} and n={padded}"),
            "verdict": NOT_MEASURED if applies else NOT_APPLICABLE,
        }
    if masks and have is None:
        return {**row, "measured": "the report's cuBLAS version is not recorded", "verdict": NOT_MEASURED}
    ratio = pts[(dt, real)]["total_ms"] / pts[(dt, padded)]["total_ms"]
    ka, kb = kernels[str(real)], kernels[str(padded)]
    differ = [ph for ph in ("fwd", "bwd") if ka.get(ph) != kb.get(ph)]
    row["measured"] = (
        f"{ratio:.2f}× the time"
        + (f" with cuBLAS {have}" if masks else "")
        + "; kernels "
        + (f"differ in the {' and '.join(differ)} pass" if differ else "identical")
        + f" (forward at {real}: {gemm_sweep_view.kernel_name(ka.get('fwd'))};"
        f" at {padded}: {gemm_sweep_view.kernel_name(kb.get('fwd'))})"
    )
    row["verdict"] = (
        NOT_APPLICABLE
        if not applies
        else CONTRADICTED
        if not (differ or masks)
        else judge(claim["metric"], ratio, claim["expect"])
    )
    return row


def compiled_padding_text(claim: dict, df: pd.DataFrame, ev: dict, judged: bool) -> str:
    """The padding's figure under torch.compile beside the eager one (params/claims.yaml: which one a
    verdict rests on); `judged`: with the word the compiled figure would get alone."""
    got = claim_figures.compiled_padding(df, ev["facts"], claim["compiled"])
    what = "under torch.compile (the compile stage at the unpadded against the padded vocabulary"
    if isinstance(got, str):
        return f"{what}): {got}"
    ratio, batch = got
    if not judged:
        return (
            f"{what}, B={batch}): {ratio:.2f}×, a whole-step figure that cannot tell 128 from 8 (the unpadded "
            "width is a multiple of neither); the verdict rests on the sweep"
        )
    word, _ = verdict_word("speedup", ratio, claim["expect"], ev["band"]("compile"), True)
    return f"{what}, B={batch}): {ratio:.2f}× (alone: {word}); the verdict rests on the eager figure"


def alignment_verdict(claim: dict, row: dict, df: pd.DataFrame, applies: bool, ev: dict) -> dict:
    """Whether widths that are multiples of `multiple` run faster than the other multiples of 8
    (gemm_sweep_view.alignment_groups: a width that is not a multiple of 8 is in neither group). Its
    noise is the width-to-width scatter: no change while the multiples' median lies inside the
    range of the others (the vocab chapter's "about as fast")."""
    dt, mult = claim["dtype"], claim["multiple"]
    row["check"] = (
        f"{dt} lm_head GEMM sweep, forward + backward: the other multiples of 8 take "
        f"{range_text('alignment', claim['expect'])} the time of the multiples of {mult} (medians)"
    )
    aligned, other = gemm_sweep_view.alignment_groups(ev["gemm"], dt, mult)
    if not aligned or not other:
        row.update(
            measured=_no_sweep(ev["gemm"], f"{dt} timing at a multiple of {mult} and at another multiple of 8"),
            verdict=NOT_MEASURED if applies else NOT_APPLICABLE,
        )
        return row
    ms = [p["total_ms"] for p in other]
    mine, theirs = float(np.median([p["total_ms"] for p in aligned])), float(np.median(ms))
    ratio = theirs / mine
    noise = theirs / min(ms) - 1 if ratio >= 1 else 1 - theirs / max(ms)  # the edge of the others' range on its side
    odd = sorted({p["n"] for p in ev["gemm"].get("points", []) if p["dtype"] == dt and p["n"] % 8})
    word, note = verdict_word(
        "alignment",
        ratio,
        claim["expect"],
        noise,
        applies,
        "the width-to-width scatter",
        f"the median of the multiples of {mult}, {mine:.2f} ms, lies inside the other multiples of 8's range, "
        f"{min(ms):.2f} to {max(ms):.2f} ms",
        # one-sided: how far the others' median lies from the end of their range on the ratio's side
        band=f"{noise * 100:.1f} %, the other multiples' median over the {'fastest' if ratio >= 1 else 'slowest'} of them",
    )
    row["measured"] = "; ".join(
        filter(
            None,
            [
                f"{ratio:.2f}× the time ({len(other)} other multiples of 8 against {len(aligned)} multiples of {mult}"
                + (f"; n={', '.join(map(str, odd))}, not a multiple of 8, in neither" if odd else "")
                + ")"
                + note,
                compiled_padding_text(claim, df, ev, judged=False) if claim.get("compiled") else "",
            ],
        )
    )
    row["verdict"] = word
    return row


def loss_gate_verdict(claim: dict, row: dict, df: pd.DataFrame, applies: bool, tolerance: float | None) -> dict:
    """The report's loss gate of the claim's stage against its loss reference (decide.table):
    held at every batch size confirms "no measurable impact", failed at any contradicts it."""
    tol = f" of {tolerance:g} nats" if tolerance is not None else ""
    row["check"] = (
        f"{claim['stage']} vs {claim['versus']}: the loss gate holds at every batch size (5-step average "
        f"of the loss difference after warm-up within the report's tolerance{tol})"
    )
    gated = df[(df["stage"] == claim["stage"]) & (df["status"] == "ok")]
    gated = gated[gated["loss_verdict"].notna()] if "loss_verdict" in df else gated.iloc[:0]
    if gated.empty:
        row.update(
            measured=claim_figures.why_unmeasured(df, claim), verdict=NOT_MEASURED if applies else NOT_APPLICABLE
        )
        return row
    worst = gated.loc[gated["loss_gap"].idxmax()]
    failed = list(gated[gated["loss_verdict"].isin(stats.GATE_FAILS)]["batch_size"])
    row["measured"] = f"largest gap {worst.loss_gap:.4f} nats (B={worst.batch_size}); the gate " + (
        f"failed at B={', '.join(map(str, failed))}"
        if failed
        else f"held at B={', '.join(map(str, gated['batch_size']))}"
    )
    row["verdict"] = (
        NOT_APPLICABLE
        if not applies
        else CONTRADICTED
        if failed
        else WITHIN_NOISE
        if (gated["loss_verdict"] == "within noise").any()
        else CONFIRMED
    )
    return row


def attention_verdict(claim: dict, row: dict, applies: bool, ev: dict) -> dict:
    """FlashAttention-3 judged by the attention kernel that ran (claim_figures.attention): of FA3's
    class, what it is worth against SDPA's FlashAttention-2 forced, in a step (`figure: step`) or
    in attention time (`figure: kernels`, estimated)."""
    versus, step = claim["versus_backend"], claim["figure"] == "step"
    row["check"] = (
        "the attention kernel SDPA ran (kernel profile) is of FlashAttention-3's class; "
        + (
            f"the step with it over the step with SDPA's {versus} backend (FlashAttention-2) forced"
            if step
            else f"the attention time of SDPA's {versus} backend (FlashAttention-2) over its own, estimated as its "
            "profiled attention time plus the difference of the two backends' forced step times"
        )
        + f": {range_text('speedup', claim['expect'])}"
    )
    a, fallback = (
        claim_figures.attention(claim["stage"], ev["facts"], ev["sdpa"], versus),
        NOT_MEASURED if applies else NOT_APPLICABLE,
    )
    if "kernel" not in a:
        return {**row, "measured": f"{a['why']}; {claim_figures.sdpa_measured(ev['sdpa'])}", "verdict": fallback}
    rec = a["record"]
    ran = f"{stages.get(rec['stage']).title} at B={rec['batch_size']} ran {a['kernel']} ({rec.get('sdpa_backend') or 'SDPA'})"
    if not a["fa3"]:
        return {**row, "measured": f"{ran}: no FlashAttention-3-class kernel ran in this report", "verdict": fallback}
    ran += ", a Hopper warpgroup-MMA kernel: FlashAttention-3's class"
    if "step" not in a:
        return {
            **row,
            "measured": f"{ran}; its worth against FlashAttention-2 not measured: {a['why']}",
            "verdict": fallback,
        }
    band = ev["band"](claim["stage"])  # the forced backends are processes of this stage, in the same run
    value = a["step"] if step else a["kernels"]
    noise = band if step or band is None else band * a["step_ms"] / a["attention_ms"]  # the step's noise, on attention
    word, note = verdict_word("speedup", value, claim["expect"], noise, applies)
    fa2 = f"SDPA's {versus} backend (FlashAttention-2) forced"
    what = (
        f"the step {value:.2f}× as fast as with {fa2} (B={a['batch']})"
        if step
        else f"with {fa2}, attention takes about {value:.2f}× its {a['attention_ms']:.2f} ms (B={a['batch']}, estimated)"
    )
    return {**row, "measured": f"{ran}; {what}{note}", "verdict": word}


def forms_verdict(claim: dict, row: dict, df: pd.DataFrame, applies: bool, ev: dict) -> dict:
    """A claim about FP8 on every FP8 form and size the report measured: the verdict rests on the
    fastest form at the report's own model whose parity test did not fail to hold (params/claims.yaml); the
    others are named beside it, a form that did not hold with why it is not counted."""
    metric, facts = claim["metric"], ev["facts"]
    pairs = ", ".join(f"{k} vs {decide.previous_stage(k)}" for k in claim["forms"])
    row["check"] = f"each FP8 form against the stage it is added to ({pairs}): {range_text(metric, claim['expect'])}"
    measured, missing = claim_figures.forms(claim["forms"], df, facts)
    sizes = claim_figures.sizes(facts)
    not_held = (facts or {}).get("not_held") or {}
    # a form whose parity test did not hold is not one to train with: named, not counted
    missing += [
        f"{stages.get(f['stage']).title}: {per_batch_text(metric, f['values'])}, not counted: {not_held[f['stage']]}"
        for f in measured
        if f["stage"] in not_held
    ]
    # One standard for every form: a form counts where its loss held (the stage gate, and its parity test where it
    # had one). A faster form whose parity test could not decide leaves a claim the counted forms do not confirm
    # undecided: it might have confirmed it.
    confirms = (CONFIRMED, WITHIN_NOISE, EXCEEDED)

    def word_of(f: dict) -> tuple[str, str]:
        med = float(np.median(f["values"]))
        return verdict_word(metric, med, claim["expect"], ev["band"](f["stage"], f["versus"]), applies)

    order = [f["stage"] for f in measured]  # fastest first
    # the undecided forms whose own figure would confirm the claim: they keep it open
    undecided = [
        f["stage"] for f in measured if f["stage"] in (facts or {}).get("undecided", ()) and word_of(f)[0] in confirms
    ]
    measured = [f for f in measured if f["stage"] not in not_held]
    faster = [k for k in undecided if not measured or order.index(k) < order.index(measured[0]["stage"])]
    if not measured:
        word = UNDECIDED if faster and applies else NOT_MEASURED if applies else NOT_APPLICABLE
        return {**row, "measured": "; ".join([*missing, sizes]), "verdict": word}
    best, model = measured[0], (facts or {}).get("model", "the report's model")
    word, note = word_of(best)
    if faster and word not in confirms:
        word = UNDECIDED
    row["measured"] = "; ".join(
        [
            f"{stages.get(best['stage']).title}: {per_batch_text(metric, best['values'])}{note} (the fastest form at {model} whose loss held"
            + (
                "; only a faster form, undecided by its parity test, would confirm it)"
                if word == UNDECIDED
                else ": the verdict rests on it)"
            )
        ]
        + [f"{stages.get(f['stage']).title}: {per_batch_text(metric, f['values'])}" for f in measured[1:]]
        + missing
        + [sizes]
    )
    return {**row, "verdict": word, "pair": (best["stage"], best["versus"])}
