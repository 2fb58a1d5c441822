"""Verdicts on the write-ups' claims (params/claims.yaml) from one report's measurements, each
with the measured figure, or with the reason it could not be measured."""
from __future__ import annotations

import html as _html

import numpy as np
import pandas as pd

from . import claim_params, evidence_view, fidelity_view, results
from .config import preset_of, profile_family
from .claim_params import CLAIMS, METRICS  # noqa: F401 (METRICS: what a claim may be judged by)
from .claim_params import load_claims as load

# The verdict words (their one home) and the CSS class each is shown in.
CONFIRMED = "confirmed"                     # inside the claimed range
WITHIN_NOISE = "confirmed (within noise)"   # outside it by less than the measured process-to-process noise
EXCEEDED = "exceeded"                       # further from "no change" than the range: a bigger speed-up or cut
FELL_SHORT = "fell short"                   # the claimed direction, but less than the range
CONTRADICTED = "contradicted"               # no change at all, or the opposite direction (a claimed fallback kernel: the same kernels)
NOT_APPLICABLE = "not applicable"           # the claim speaks about another chip family or backend
NOT_MEASURED = "not measured"               # the measured column says why
CSS = {CONFIRMED: "ok", WITHIN_NOISE: "ok", EXCEEDED: "ok", FELL_SHORT: "warn", CONTRADICTED: "bad",
       NOT_APPLICABLE: "note", NOT_MEASURED: "warn"}

LAYERS = {"tensors": "mem_tensors_bytes", "allocator": "mem_allocator_bytes", "device": "mem_device_bytes",
          "device_sampled": "mem_device_sampled_peak_bytes"}
# Why a memory layer can be missing where both stages ran.
NO_LAYER = {"device_sampled": "device memory was not sampled during the step in this report's records "
                              "(records older than the sampling, or NVML unavailable)"}
RATIOS = ("speedup", "kernels", "alignment")  # judged against 1 ("no change"); the other metrics against 0


def _per_batch(df: pd.DataFrame, claim: dict) -> pd.Series:
    """The claim's figure at every batch size where both stages have a valid timing (and, for a
    memory claim, the layer)."""
    ok = df[df["status"] == "ok"]
    a = ok[ok["stage"] == claim["stage"]].set_index("batch_size")
    b = ok[ok["stage"] == claim["versus"]].set_index("batch_size")
    common = sorted(set(a.index) & set(b.index))
    if claim["metric"] == "speedup":
        vals = {n: b.at[n, "median_ms"] / a.at[n, "median_ms"] for n in common}
    elif claim["metric"] == "time_change":
        vals = {n: a.at[n, "median_ms"] / b.at[n, "median_ms"] - 1 for n in common}
    else:
        col = LAYERS[claim["layer"]]
        vals = {n: a.at[n, col] / b.at[n, col] - 1 for n in common
                if not pd.isna(a.at[n, col]) and not pd.isna(b.at[n, col]) and b.at[n, col]}
    return pd.Series(vals, dtype=float)


def _why_unmeasured(df: pd.DataFrame, claim: dict) -> str:
    ok = df[df["status"] == "ok"]
    timed = [set(ok[ok["stage"] == s]["batch_size"]) for s in (claim["stage"], claim["versus"])]
    if timed[0] & timed[1]:
        if claim["metric"] == "loss_gate":
            return f"no loss gate of {claim['stage']} against {claim['versus']} was computed"
        return NO_LAYER.get(claim.get("layer"), f"the {claim.get('layer')} memory layer was not recorded")
    other = df[df["stage"].isin([claim["stage"], claim["versus"]]) & (df["status"] != "ok")]
    return (f"no batch size where both {claim['stage']} and {claim['versus']} have a timing"
            + "".join(f"; {r.stage} at B={r.batch_size}: {r.status}" for r in other.itertuples()))


def _fmt(metric: str, v: float) -> str:
    return f"{v:.2f}×" if metric in RATIOS else f"{v * 100:+.1f} %"


def _expect(metric: str, e: dict) -> str:
    lo, hi = e.get("min"), e.get("max")
    if lo is not None and hi is not None:
        return f"{_fmt(metric, lo)} to {_fmt(metric, hi)}"
    return f"≥ {_fmt(metric, lo)}" if lo is not None else f"≤ {_fmt(metric, hi)}"


def judge(metric: str, value: float, expect: dict, noise: float | None = None) -> str:
    """The verdict word for a measured figure. A claimed range lies on one side of "no change"
    (params/claims.yaml): that side is the claim's direction. `noise`, for a timing claim: the
    relative process-to-process range; a figure outside the range by less is within noise."""
    lo, hi = expect.get("min", -np.inf), expect.get("max", np.inf)
    neutral = 1.0 if metric in RATIOS else 0.0
    if lo <= value <= hi:
        return CONFIRMED
    shift = 1 - neutral  # the noise is relative to a step time or throughput ratio
    if noise is not None and metric in ("speedup", "time_change") and any(
            abs((value + shift) / (bound + shift) - 1) <= noise for bound in (lo, hi) if np.isfinite(bound)):
        return WITHIN_NOISE
    up = np.isfinite(lo) and lo >= neutral  # a claimed increase (speed-up, more memory); else a cut
    if (value > hi) if up else (value < lo):
        return EXCEEDED
    return FELL_SHORT if ((value > neutral) if up else (value < neutral)) else CONTRADICTED


def _no_sweep(gemm: dict | None, what: str) -> str:
    if not gemm:
        return "the lm_head GEMM sweep was not measured for this report"
    if gemm.get("status") != "ok":
        return f"the lm_head GEMM sweep did not complete ({gemm.get('status')}: {gemm.get('reason')})"
    return f"the lm_head GEMM sweep has no {what}"


def _kernel_verdict(claim: dict, row: dict, gemm: dict | None, applies: bool) -> dict:
    """The fallback-kernel claim from the GEMM sweep: the unaligned width must run different kernels
    *and* take the claimed multiple of the time to be confirmed; the same kernels contradict it."""
    dt, (real, padded) = claim["dtype"], claim["widths"]
    row["check"] = (f"{dt} lm_head GEMM, forward + backward, n={real} vs n={padded}: different kernels and "
                    f"{_expect('kernels', claim['expect'])} the time")
    pts = {(p["dtype"], p["n"]): p for p in (gemm or {}).get("points", []) if p.get("total_ms")}
    kernels = (gemm or {}).get("kernels", {}).get(dt, {})
    if (dt, real) not in pts or (dt, padded) not in pts or str(real) not in kernels or str(padded) not in kernels:
        row.update(measured=_no_sweep(gemm, f"{dt} timing and kernels at n={real} and n={padded}"),
                   verdict=NOT_MEASURED if applies else NOT_APPLICABLE)
        return row
    ratio = pts[(dt, real)]["total_ms"] / pts[(dt, padded)]["total_ms"]
    ka, kb = kernels[str(real)], kernels[str(padded)]
    differ = [ph for ph in ("fwd", "bwd") if ka.get(ph) != kb.get(ph)]
    row["measured"] = (f"{ratio:.2f}× the time; kernels " + (f"differ in the {' and '.join(differ)} pass"
                       if differ else "identical") + f" (forward at {real}: {evidence_view.kernel_name(ka.get('fwd'))};"
                       f" at {padded}: {evidence_view.kernel_name(kb.get('fwd'))})")
    row["verdict"] = (NOT_APPLICABLE if not applies else CONTRADICTED if not differ
                      else judge("kernels", ratio, claim["expect"]))
    return row


def _alignment_verdict(claim: dict, row: dict, gemm: dict | None, applies: bool) -> dict:
    """Whether widths that are multiples of `multiple` run faster than the other multiples of 8
    (evidence_view.alignment_groups: a width that is not a multiple of 8 is in neither group)."""
    dt, mult = claim["dtype"], claim["multiple"]
    row["check"] = (f"{dt} lm_head GEMM sweep, forward + backward: the other multiples of 8 take "
                    f"{_expect('alignment', claim['expect'])} the time of the multiples of {mult} (medians)")
    aligned, other = evidence_view.alignment_groups(gemm, dt, mult)
    if not aligned or not other:
        row.update(measured=_no_sweep(gemm, f"{dt} timing at a multiple of {mult} and at another multiple of 8"),
                   verdict=NOT_MEASURED if applies else NOT_APPLICABLE)
        return row
    ratio = float(np.median([p["total_ms"] for p in other]) / np.median([p["total_ms"] for p in aligned]))
    odd = sorted({p["n"] for p in (gemm or {}).get("points", []) if p["dtype"] == dt and p["n"] % 8})
    row["measured"] = (f"{ratio:.2f}× the time ({len(other)} other multiples of 8 against {len(aligned)} multiples "
                       f"of {mult}" + (f"; n={', '.join(map(str, odd))}, not a multiple of 8, in neither" if odd else "")
                       + ")")
    row["verdict"] = judge("alignment", ratio, claim["expect"]) if applies else NOT_APPLICABLE
    return row


def _loss_gate_verdict(claim: dict, row: dict, df: pd.DataFrame, applies: bool, tolerance: float | None) -> dict:
    """The report's loss gate of the claim's stage against its loss reference (results.table):
    held at every batch size confirms "no measurable impact", failed at any contradicts it."""
    tol = f" of {tolerance:g} nats" if tolerance is not None else ""
    row["check"] = (f"{claim['stage']} vs {claim['versus']}: the loss gate holds at every batch size (5-step average "
                    f"of the loss difference after warm-up within the report's tolerance{tol})")
    gated = df[(df["stage"] == claim["stage"]) & (df["status"] == "ok")]
    gated = gated[gated["loss_verdict"].notna()] if "loss_verdict" in df else gated.iloc[:0]
    if gated.empty:
        row.update(measured=_why_unmeasured(df, claim), verdict=NOT_MEASURED if applies else NOT_APPLICABLE)
        return row
    worst = gated.loc[gated["loss_gap"].idxmax()]
    failed = list(gated[gated["loss_verdict"] == "beyond"]["batch_size"])
    row["measured"] = (f"largest gap {worst.loss_gap:.4f} nats (B={worst.batch_size}); the gate "
                       + (f"failed at B={', '.join(map(str, failed))}" if failed else
                          f"held at B={', '.join(map(str, gated['batch_size']))}"))
    row["verdict"] = (NOT_APPLICABLE if not applies else CONTRADICTED if failed else
                      WITHIN_NOISE if (gated["loss_verdict"] == "within noise").any() else CONFIRMED)
    return row


def _sdpa_measured(sdpa: list | None) -> str:
    """What the report measured of attention in place of a backend SDPA does not have: the flash
    stage with each of SDPA's backends forced (results/sdpa), fastest first."""
    if not sdpa:
        return "the report forced no SDPA backend (results/sdpa is empty)"
    recs = sorted(sdpa, key=lambda r: -(r.get("tokens_per_s") or 0))
    return (f"measured instead, the {recs[0]['stage']} stage with each SDPA backend forced at B={recs[0]['batch_size']}: "
            + ", ".join(f"{r['variant'].removeprefix('SDPA ')} " + (f"{r['tokens_per_s']:,.0f} tok/s" if r["status"] == "ok"
                                                                     else r["status"].replace("_", " ")) for r in recs))


def command(families) -> str:
    """The command that measures a claim on hardware of `families`."""
    names = claim_params.family_profiles(families)
    if not names:
        return f"no profile of {' or '.join(families)} exists yet (add params/<gpu>.yaml)"
    return f"make report GPU={names[0]}" + (f" (or GPU={', '.join(names[1:])})" if names[1:] else "")


def elsewhere(claim: dict) -> str:
    """Where a claim that does not apply to this hardware would be measured."""
    return f"the claim speaks about {' and '.join(claim['families'])} GPUs: {command(claim['families'])} measures it"


def verdict(claim: dict, df: pd.DataFrame, profile: str, backend: str, gemm: dict | None = None,
            noise: float | None = None, sdpa: list | None = None, tolerance: float | None = None) -> dict:
    """`noise`: the relative process-to-process range of the timings behind a timing claim (judge);
    `sdpa`: the report's forced-backend records; `tolerance`: its loss gate's, in nats. A claim
    that does not apply here says where it would be measured."""
    row = _judged(claim, {"id": claim["id"], "source": claim.get("source"), "claim": claim["claim"], "check": "",
                          "measured": "", "verdict": ""}, df, profile, backend, gemm, noise, sdpa, tolerance)
    if row["verdict"] == NOT_APPLICABLE:
        row["measured"] = "; ".join(filter(None, [row["measured"], elsewhere(claim)]))
    return row


def _judged(claim, row, df, profile, backend, gemm, noise, sdpa, tolerance) -> dict:
    metric = claim["metric"]
    applies = profile_family(profile) in claim["families"] and backend in ("cuda", "rocm")
    if metric == "kernels":
        return _kernel_verdict(claim, row, gemm, applies)
    if metric == "alignment":
        return _alignment_verdict(claim, row, gemm, applies)
    if metric == "loss_gate":
        return _loss_gate_verdict(claim, row, df, applies, tolerance)
    if metric == "none":
        instead = _sdpa_measured(sdpa) if claim.get("evidence") == "sdpa" else ""
        return {**row, "check": f"{claim['check']}: {_expect('speedup', claim['expect'])}",
                "measured": "; ".join(filter(None, [claim["reason"], instead])),
                "verdict": NOT_MEASURED if applies else NOT_APPLICABLE}
    row["check"] = f"{claim['stage']} vs {claim['versus']}" + (
        f", {claim['layer'].replace('_', ' ')} memory" if metric == "memory_change" else "") + f": {_expect(metric, claim['expect'])}"
    values = _per_batch(df, claim)
    if values.empty:
        row.update(measured=_why_unmeasured(df, claim), verdict=NOT_APPLICABLE if not applies else NOT_MEASURED)
        return row
    med = float(np.median(values))
    lo, hi = _fmt(metric, values.min()), _fmt(metric, values.max())
    spread = "" if lo == hi else f" ({lo} to {hi})"
    row["measured"] = f"{_fmt(metric, med)}{spread} at B={', '.join(map(str, values.index))}"
    row["verdict"] = judge(metric, med, claim["expect"], noise) if applies else NOT_APPLICABLE
    return row


def table(df: pd.DataFrame, profile: str, backend: str, path=CLAIMS, gemm: dict | None = None,
          noise=None, sdpa: list | None = None, tolerance: float | None = None) -> pd.DataFrame:
    """`noise(claim)`, if given, is the relative spread behind a timing claim (see judge)."""
    return pd.DataFrame([verdict(c, df, profile, backend, gemm, noise(c) if noise else None, sdpa, tolerance)
                         for c in load(path)["claims"]])


def for_report(rep, path=CLAIMS) -> pd.DataFrame:
    """Every claim's verdict on one report, its timing claims judged against the report's noise."""
    tps, floor = fidelity_view.noise(rep)

    def noise(claim):  # the larger process-to-process range of the two sides, at the batch they repeated
        bands = [results.spread(v)["spread"] for (s, _), v in tps.items() if s in (claim.get("stage"), claim.get("versus"))
                 and len(v) > 1]
        return max(bands) if bands else floor

    return table(rep.df, rep.params["name"], rep.params["backend"], path, gemm=rep.evidence["gemm"], noise=noise,
                 sdpa=rep.evidence["sdpa"], tolerance=rep.params["run"]["loss_tolerance"])


def sources_html(path=CLAIMS) -> str:
    """The write-ups the claims come from, by the number each claim names."""
    return "; ".join(f"[{k}] {_html.escape(v)}" for k, v in load(path)["sources"].items())


def html(rep, path=CLAIMS) -> str:
    t = for_report(rep, path)
    env = rep.env
    stack = f"{env['device']['name']}, PyTorch {env.get('torch')}" + (
        f", CUDA {env['cuda']}, cuBLAS {env.get('cublas')}, cuDNN {env.get('cudnn')}" if env.get("cuda") else "")
    rows = "".join(
        f"<tr><td>{_html.escape(r.claim)} <small>[{r.source}]</small></td><td>{_html.escape(r.check)}</td><td>{_html.escape(r.measured or '—')}</td>"
        f'<td><span class="{CSS[r.verdict]}">{r.verdict}</span></td></tr>' for r in t.itertuples())
    return (f'<table class="claims"><tr><th>Claim</th><th>Check (confirms if)</th><th>Measured here</th>'
            f"<th>Verdict</th></tr>{rows}</table><p class=\"note\">Measured on {stack}, with the {preset_of(rep.params)} "
            f"model ({rep.params['model']['n_layer']} layers, d={rep.params['model']['n_embd']})"
            + ("; the size-sweep chapter measures the FP8 forms at every GPT-2 size" if rep.evidence.get("size") else "")
            + ". "
            f"Verdicts: {CONFIRMED}, inside the claimed range; {WITHIN_NOISE}, outside it by less than the measured "
            f"noise; {EXCEEDED}, further from no change than claimed; {FELL_SHORT}, the claimed direction but less; "
            f"{CONTRADICTED}, no change at all or the opposite direction. A claim about a chip speaks about every GPU of its "
            "family (the H100's about the H200 too: both are GH100). "
            f"Claims and thresholds: <code>params/claims.yaml</code>; sources: {sources_html(path)}.</p>")
