"""Verdicts on the write-ups' claims (params/claims.yaml) from one report's measurements, each
with the measured figure, or with the reason it could not be measured. The figures come from
lib/report/claim_figures.py; the words, and how a figure earns one, live here."""

from __future__ import annotations

import html as _html
import re

import numpy as np
import pandas as pd

from lib.core import stages
from lib.core.config import preset_of, profile_family
from lib.report import claim_figures, claim_params, evidence_view, fidelity_view
from lib.report.claim_params import CLAIMS, METRICS  # noqa: F401 (METRICS: what a claim may be judged by)
from lib.report.claim_params import load_claims as load
from lib.results import decide, stats
from lib.results import noise as noise_stats

# The verdict words (their one home) and the CSS class each is shown in.
CONFIRMED = "confirmed"  # inside the claimed range
WITHIN_NOISE = "confirmed (within noise)"  # outside it by less than the measured process-to-process noise
EXCEEDED = "exceeded"  # further from "no change" than the range: a bigger speed-up or cut
FELL_SHORT = "fell short"  # the claimed direction, beyond the noise of "no change", but less than the range
CONTRADICTED = (
    "contradicted"  # no measurable change, or the opposite direction (a claimed fallback kernel: the same kernels)
)
NOT_APPLICABLE = "not applicable"  # the claim speaks about another chip family, backend or library
NOT_MEASURED = "not measured"  # the measured column says why
CSS = {
    CONFIRMED: "ok",
    WITHIN_NOISE: "ok",
    EXCEEDED: "ok",
    FELL_SHORT: "warn",
    CONTRADICTED: "bad",
    NOT_APPLICABLE: "note",
    NOT_MEASURED: "warn",
}
# How a contradicted figure that lies within the measured noise of "no change" is worded.
NO_CHANGE = "no measurable change"
EXPLAINED = (
    f"{CONFIRMED}, inside the claimed range; {WITHIN_NOISE}, outside it by less than the measured noise; "
    f"{EXCEEDED}, further from no change than claimed; {FELL_SHORT}, the claimed direction, beyond the measured "
    f"noise of no change, but less than claimed; {CONTRADICTED}, {NO_CHANGE} (within the measured noise of no "
    "change, where a change was claimed) or the opposite direction"
)

RATIOS = ("speedup", "kernels", "alignment", "misalignment")  # judged against 1 ("no change"); the others against 0
NOISY = ("speedup", "time_change", "alignment")  # the metrics whose noise is measured (a relative range)


def _fmt(metric: str, v: float) -> str:
    return f"{v:.2f}×" if metric in RATIOS else f"{v * 100:+.1f} %"


def _expect(metric: str, e: dict) -> str:
    lo, hi = e.get("min"), e.get("max")
    if lo is not None and hi is not None:
        return f"{_fmt(metric, lo)} to {_fmt(metric, hi)}"
    return f"≥ {_fmt(metric, lo)}" if lo is not None else f"≤ {_fmt(metric, hi)}"


def no_change(metric: str, value: float, noise: float | None) -> bool:
    """Whether a figure lies within the measured noise (relative) of "no change"."""
    shift = 0.0 if metric in RATIOS else 1.0  # a change is a ratio minus one
    return noise is not None and metric in NOISY and abs(value + shift - 1) <= noise


def judge(metric: str, value: float, expect: dict, noise: float | None = None) -> str:
    """The verdict word for a measured figure. A claimed range lies on one side of "no change"
    (params/claims.yaml): that side is the claim's direction. `noise`: the relative noise behind the
    figure (a timing's process-to-process range). A figure within it of no change shows no
    measurable change: it contradicts any claimed change (a range that does not straddle no change);
    a figure outside the range by less than the noise is within noise."""
    lo, hi = expect.get("min", -np.inf), expect.get("max", np.inf)
    neutral = 1.0 if metric in RATIOS else 0.0
    if no_change(metric, value, noise) and not lo < neutral < hi:
        return CONTRADICTED
    if lo <= value <= hi:
        return CONFIRMED
    shift = 1 - neutral  # the noise is relative to a step time or throughput ratio
    if (
        noise is not None
        and metric in ("speedup", "time_change")
        and any(abs((value + shift) / (bound + shift) - 1) <= noise for bound in (lo, hi) if np.isfinite(bound))
    ):
        return WITHIN_NOISE
    up = np.isfinite(lo) and lo >= neutral  # a claimed increase (speed-up, more memory); else a cut
    if (value > hi) if up else (value < lo):
        return EXCEEDED
    return FELL_SHORT if ((value > neutral) if up else (value < neutral)) else CONTRADICTED


def _word(
    metric: str,
    value: float,
    expect: dict,
    noise: float | None,
    applies: bool,
    what: str = "the measured noise",
    why: str = "",
) -> tuple[str, str]:
    """The verdict word (judge; not applicable where the claim speaks about other hardware) and, for a
    contradiction within the noise of no change, the words that say so."""
    word = judge(metric, value, expect, noise)
    note = (
        f"; {NO_CHANGE}: within {what} of no change (±{noise * 100:.1f} %{': ' + why if why else ''})"
        if word == CONTRADICTED and no_change(metric, value, noise)
        else ""
    )
    return (word, note) if applies else (NOT_APPLICABLE, "")


def _figure(metric: str, values: pd.Series) -> str:
    """A figure per batch size as one: the median, the range where they differ, the batch sizes."""
    lo, hi = _fmt(metric, values.min()), _fmt(metric, values.max())
    return (
        f"{_fmt(metric, float(np.median(values)))}{'' if lo == hi else f' ({lo} to {hi})'} "
        f"at B={', '.join(map(str, values.index))}"
    )


def _no_sweep(gemm: dict | None, what: str) -> str:
    if not gemm:
        return "the lm_head GEMM sweep was not measured for this report"
    if gemm.get("status") != "ok":
        return f"the lm_head GEMM sweep did not complete ({gemm.get('status')}: {gemm.get('reason')})"
    return f"the lm_head GEMM sweep has no {what}"


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", str(v))[:2])


def _gemm_pair_verdict(claim: dict, row: dict, applies: bool, ev: dict) -> dict:
    """The real width against the padded one in the GEMM sweep. `kernels` (a claimed fallback kernel):
    the unaligned width must run different kernels *and* take the claimed multiple of the time; the
    same kernels contradict it. `misalignment` (a claim about a newer cuBLAS): the time alone, judged
    where the report's cuBLAS is at least the claim's `cublas`."""
    dt, (real, padded), masks = claim["dtype"], claim["widths"], claim["metric"] == "misalignment"
    gemm = ev["gemm"]
    row["check"] = (
        f"{dt} lm_head GEMM, forward + backward, n={real} vs n={padded}: {'' if masks else 'different kernels and '}"
        f"{_expect(claim['metric'], claim['expect'])} the time"
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
        + f" (forward at {real}: {evidence_view.kernel_name(ka.get('fwd'))};"
        f" at {padded}: {evidence_view.kernel_name(kb.get('fwd'))})"
    )
    row["verdict"] = (
        NOT_APPLICABLE
        if not applies
        else CONTRADICTED
        if not (differ or masks)
        else judge(claim["metric"], ratio, claim["expect"])
    )
    return row


def _compiled(claim: dict, df: pd.DataFrame, ev: dict, judged: bool) -> str:
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
    word, _ = _word("speedup", ratio, claim["expect"], ev["band"]("compile"), True)
    return f"{what}, B={batch}): {ratio:.2f}× (alone: {word}); the verdict rests on the eager figure"


def _alignment_verdict(claim: dict, row: dict, df: pd.DataFrame, applies: bool, ev: dict) -> dict:
    """Whether widths that are multiples of `multiple` run faster than the other multiples of 8
    (evidence_view.alignment_groups: a width that is not a multiple of 8 is in neither group). Its
    noise is the width-to-width scatter: no change while the multiples' median lies inside the
    range of the others (the vocab chapter's "about as fast")."""
    dt, mult = claim["dtype"], claim["multiple"]
    row["check"] = (
        f"{dt} lm_head GEMM sweep, forward + backward: the other multiples of 8 take "
        f"{_expect('alignment', claim['expect'])} the time of the multiples of {mult} (medians)"
    )
    aligned, other = evidence_view.alignment_groups(ev["gemm"], dt, mult)
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
    word, note = _word(
        "alignment",
        ratio,
        claim["expect"],
        noise,
        applies,
        "the width-to-width scatter",
        f"the median of the multiples of {mult}, {mine:.2f} ms, lies inside the other multiples of 8's range, "
        f"{min(ms):.2f} to {max(ms):.2f} ms",
    )
    row["measured"] = "; ".join(
        filter(
            None,
            [
                f"{ratio:.2f}× the time ({len(other)} other multiples of 8 against {len(aligned)} multiples of {mult}"
                + (f"; n={', '.join(map(str, odd))}, not a multiple of 8, in neither" if odd else "")
                + ")"
                + note,
                _compiled(claim, df, ev, judged=False) if claim.get("compiled") else "",
            ],
        )
    )
    row["verdict"] = word
    return row


def _loss_gate_verdict(claim: dict, row: dict, df: pd.DataFrame, applies: bool, tolerance: float | None) -> dict:
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


def _attention_verdict(claim: dict, row: dict, applies: bool, ev: dict) -> dict:
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
        + f": {_expect('speedup', claim['expect'])}"
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
    word, note = _word("speedup", value, claim["expect"], noise, applies)
    fa2 = f"SDPA's {versus} backend (FlashAttention-2) forced"
    what = (
        f"the step {value:.2f}× as fast as with {fa2} (B={a['batch']})"
        if step
        else f"with {fa2}, attention takes about {value:.2f}× its {a['attention_ms']:.2f} ms (B={a['batch']}, estimated)"
    )
    return {**row, "measured": f"{ran}; {what}{note}", "verdict": word}


def _forms_verdict(claim: dict, row: dict, df: pd.DataFrame, applies: bool, ev: dict) -> dict:
    """A claim about FP8 on every FP8 form and size the report measured: the verdict rests on the
    fastest form at the report's own model (params/claims.yaml); the others are named beside it."""
    metric, facts = claim["metric"], ev["facts"]
    pairs = ", ".join(f"{k} vs {decide.previous_stage(k)}" for k in claim["forms"])
    row["check"] = f"each FP8 form against the stage it is added to ({pairs}): {_expect(metric, claim['expect'])}"
    measured, missing = claim_figures.forms(claim["forms"], df, facts)
    sizes = claim_figures.sizes(facts)
    if not measured:
        return {**row, "measured": "; ".join([*missing, sizes]), "verdict": NOT_MEASURED if applies else NOT_APPLICABLE}
    best, model = measured[0], (facts or {}).get("model", "the report's model")
    word, note = _word(
        metric, float(np.median(best["values"])), claim["expect"], ev["band"](best["stage"], best["versus"]), applies
    )
    row["measured"] = "; ".join(
        [
            f"{stages.get(best['stage']).title}: {_figure(metric, best['values'])}{note} (the fastest form at {model}: "
            "the verdict rests on it)"
        ]
        + [f"{stages.get(f['stage']).title}: {_figure(metric, f['values'])}" for f in measured[1:]]
        + missing
        + [sizes]
    )
    return {**row, "verdict": word, "pair": (best["stage"], best["versus"])}


def command(families) -> str:
    """The command that measures a claim on hardware of `families`."""
    names = claim_params.family_profiles(families)
    if not names:
        return f"no profile of {' or '.join(families)} exists yet (add params/<gpu>.yaml)"
    return f"make report GPU={names[0]}" + (f" (or GPU={', '.join(names[1:])})" if names[1:] else "")


def elsewhere(claim: dict) -> str:
    """Where a claim that does not apply to this hardware would be measured."""
    return f"the claim speaks about {' and '.join(claim['families'])} GPUs: {command(claim['families'])} measures it"


def verdict(
    claim: dict,
    df: pd.DataFrame,
    profile: str,
    backend: str,
    gemm: dict | None = None,
    noise=None,
    sdpa: list | None = None,
    tolerance: float | None = None,
    facts: dict | None = None,
) -> dict:
    """`noise`: the relative process-to-process range behind a timing figure (judge), one number or a
    function of the stages compared (none: the report's floor); `sdpa`: the report's forced-backend
    records; `tolerance`: its loss gate's, in nats; `facts`: claim_figures.facts, what else the report
    measured. `pair`: the stages a timing verdict rests on. A claim about other hardware says where
    it would be measured."""
    applies = profile_family(profile) in claim["families"] and backend in ("cuda", "rocm")
    ev = {
        "gemm": gemm,
        "band": noise if callable(noise) else (lambda *_: noise),
        "sdpa": sdpa,
        "tolerance": tolerance,
        "facts": facts,
    }
    row = _judged(
        claim,
        {
            "id": claim["id"],
            "source": claim.get("source"),
            "claim": claim["claim"],
            "check": "",
            "measured": "",
            "verdict": "",
            "pair": None,
        },
        df,
        applies,
        ev,
    )
    if not applies:
        row["measured"] = "; ".join(filter(None, [row["measured"], elsewhere(claim)]))
    return row


def _judged(claim: dict, row: dict, df: pd.DataFrame, applies: bool, ev: dict) -> dict:
    metric = claim["metric"]
    if metric in ("kernels", "misalignment"):
        return _gemm_pair_verdict(claim, row, applies, ev)
    if metric == "alignment":
        return _alignment_verdict(claim, row, df, applies, ev)
    if metric == "loss_gate":
        return _loss_gate_verdict(claim, row, df, applies, ev["tolerance"])
    if metric == "attention":
        return _attention_verdict(claim, row, applies, ev)
    if metric == "none":
        return {
            **row,
            "check": f"{claim['check']}: {_expect('speedup', claim['expect'])}",
            "measured": claim["reason"],
            "verdict": NOT_MEASURED if applies else NOT_APPLICABLE,
        }
    if "forms" in claim:
        return _forms_verdict(claim, row, df, applies, ev)
    row["check"] = (
        f"{claim['stage']} vs {claim['versus']}"
        + (f", {claim['layer'].replace('_', ' ')} memory" if metric == "memory_change" else "")
        + f": {_expect(metric, claim['expect'])}"
    )
    values = claim_figures.per_batch(df, claim)
    if values.empty:
        row.update(
            measured=claim_figures.why_unmeasured(df, claim), verdict=NOT_APPLICABLE if not applies else NOT_MEASURED
        )
        return row
    word, note = _word(
        metric, float(np.median(values)), claim["expect"], ev["band"](claim["stage"], claim["versus"]), applies
    )
    # A padding claim of a write-up that timed eager steps rests on the eager figure, the compiled one
    # beside it; a lever's claim rests on its own comparison, its worth on top of the others beside it.
    label = (
        f" eager ({claim['stage']} vs {claim['versus']})"
        if claim.get("compiled")
        else f" alone over {claim['versus']}"
        if claim.get("leave_one_out")
        else ""
    )
    beside = [
        _compiled(claim, df, ev, judged=True) if claim.get("compiled") else "",
        claim_figures.on_top(ev["facts"], claim["leave_one_out"]) if claim.get("leave_one_out") else "",
    ]
    return {
        **row,
        "measured": "; ".join(filter(None, [_figure(metric, values) + label + note, *beside])),
        "verdict": word,
        "pair": (claim["stage"], claim["versus"]) if metric in ("speedup", "time_change") else None,
    }


def table(
    df: pd.DataFrame,
    profile: str,
    backend: str,
    path=CLAIMS,
    gemm: dict | None = None,
    noise=None,
    sdpa: list | None = None,
    tolerance: float | None = None,
    facts: dict | None = None,
) -> pd.DataFrame:
    """`noise`, as verdict takes it."""
    return pd.DataFrame(
        [verdict(c, df, profile, backend, gemm, noise, sdpa, tolerance, facts) for c in load(path)["claims"]]
    )


def for_report(rep, path=CLAIMS) -> pd.DataFrame:
    """Every claim's verdict on one report, its timing figures judged against the report's noise."""
    tps, floor = fidelity_view.noise(rep)

    def noise(*keys):  # the widest process-to-process range among the stages compared, where repeated; else the floor
        bands = [noise_stats.spread(v)["spread"] for (s, _), v in tps.items() if s in keys and len(v) > 1]
        return max(bands) if bands else floor

    return table(
        rep.df,
        rep.params["name"],
        rep.params["backend"],
        path,
        gemm=rep.evidence["gemm"],
        noise=noise,
        sdpa=rep.evidence["sdpa"],
        tolerance=rep.params["run"]["loss_tolerance"],
        facts=claim_figures.facts(rep),
    )


def sources_html(path=CLAIMS) -> str:
    """The write-ups the claims come from, by the number each claim names."""
    return "; ".join(f"[{k}] {_html.escape(v)}" for k, v in load(path)["sources"].items())


def html(rep, path=CLAIMS) -> str:
    t = for_report(rep, path)
    env = rep.env
    stack = f"{env['device']['name']}, PyTorch {env.get('torch')}" + (
        f", CUDA {env['cuda']}, cuBLAS {env.get('cublas')}, cuDNN {env.get('cudnn')}" if env.get("cuda") else ""
    )
    rows = "".join(
        f"<tr><td>{_html.escape(r.claim)} <small>[{r.source}]</small></td><td>{_html.escape(r.check)}</td><td>{_html.escape(r.measured or '—')}</td>"
        f'<td><span class="{CSS[r.verdict]}">{r.verdict}</span></td></tr>'
        for r in t.itertuples()
    )
    return (
        f'<table class="claims"><tr><th>Claim</th><th>Check (confirms if)</th><th>Measured here</th>'
        f'<th>Verdict</th></tr>{rows}</table><p class="note">Measured on {stack}, with the {preset_of(rep.params)} '
        f"model ({rep.params['model']['n_layer']} layers, d={rep.params['model']['n_embd']})"
        + ("; the size-sweep chapter measures the FP8 forms at every GPT-2 size" if rep.evidence.get("size") else "")
        + f". Verdicts: {EXPLAINED}. A claim about a chip speaks about every GPU of its family (the H100's about "
        "the H200 too: both are GH100). A padding claim of a write-up that timed eager steps rests on the eager "
        "figure, the compiled one beside it; a claim about FP8 rests on the fastest FP8 form at the report's model, "
        f"the other forms and sizes beside it. Claims, thresholds and these rules: <code>params/claims.yaml</code>; "
        f"sources: {sources_html(path)}.</p>"
    )
