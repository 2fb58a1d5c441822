"""Verdicts on the prevailing claims (params/claims.yaml) from one report's measurements:
confirmed, refuted, not applicable or not measured, each with the measured figure."""
from __future__ import annotations

import html as _html

import numpy as np
import pandas as pd

from . import fidelity_view, results
from .config import CLAIMS, METRICS  # noqa: F401 (METRICS: what a claim may be judged by)
from .config import load_claims as load

LAYERS = {"tensors": "mem_tensors_bytes", "allocator": "mem_allocator_bytes", "device": "mem_device_bytes"}


def _per_batch(df: pd.DataFrame, claim: dict) -> pd.Series:
    """The claim's figure at every batch size where both stages have a valid timing."""
    ok = df[df["status"] == "ok"]
    a = ok[ok["stage"] == claim["stage"]].set_index("batch_size")
    b = ok[ok["stage"] == claim["versus"]].set_index("batch_size")
    common = sorted(set(a.index) & set(b.index))
    if claim["metric"] == "speedup":
        vals = [b.at[n, "median_ms"] / a.at[n, "median_ms"] for n in common]
    elif claim["metric"] == "time_change":
        vals = [a.at[n, "median_ms"] / b.at[n, "median_ms"] - 1 for n in common]
    else:
        col = LAYERS[claim["layer"]]
        vals = [a.at[n, col] / b.at[n, col] - 1 for n in common
                if not pd.isna(a.at[n, col]) and not pd.isna(b.at[n, col]) and b.at[n, col]]
        common = [n for n in common if not pd.isna(a.at[n, col]) and not pd.isna(b.at[n, col]) and b.at[n, col]]
    return pd.Series(vals, index=common, dtype=float)


def _fmt(metric: str, v: float) -> str:
    return f"{v:.2f}×" if metric == "speedup" else f"{v * 100:+.1f} %"


def _expect(metric: str, e: dict) -> str:
    lo, hi = e.get("min"), e.get("max")
    if lo is not None and hi is not None:
        return f"{_fmt(metric, lo)} to {_fmt(metric, hi)}"
    return f"≥ {_fmt(metric, lo)}" if lo is not None else f"≤ {_fmt(metric, hi)}"


def _kernel_verdict(claim: dict, row: dict, gemm: dict | None, applies: bool) -> dict:
    """The lm_head claim from the GEMM sweep: the unaligned width must run different kernels
    *and* be slower by the claimed margin (time ratio) to be confirmed."""
    dt, (real, padded) = claim["dtype"], claim["widths"]
    row["check"] = (f"{dt} lm_head GEMM, forward + backward, n={real} vs n={padded}: different kernels and "
                    f"≥ {claim['expect']['min']:.2f}× the time")
    pts = {(p["dtype"], p["n"]): p for p in (gemm or {}).get("points", []) if p.get("total_ms")}
    kernels = (gemm or {}).get("kernels", {}).get(dt, {})
    if (dt, real) not in pts or (dt, padded) not in pts or str(real) not in kernels or str(padded) not in kernels:
        row.update(measured="—", verdict="not applicable" if not applies else "not measured")
        return row
    ratio = pts[(dt, real)]["total_ms"] / pts[(dt, padded)]["total_ms"]
    ka, kb = kernels[str(real)], kernels[str(padded)]
    differ = [ph for ph in ("fwd", "bwd") if ka.get(ph) != kb.get(ph)]
    row["measured"] = (f"{ratio:.2f}× the time; kernels " + (f"differ in the {' and '.join(differ)} pass"
                       if differ else "identical") + f" (forward at {real}: {_kernel_name(ka.get('fwd'))}; at "
                       f"{padded}: {_kernel_name(kb.get('fwd'))})")
    if not applies:
        row["verdict"] = "not applicable"
    elif differ and ratio >= claim["expect"]["min"]:
        row["verdict"] = "confirmed"
    else:
        row["verdict"] = "refuted: " + ("same kernels" if not differ else "not slower by the claimed margin")
    return row


def _kernel_name(names) -> str:
    if not names:
        return "none recorded"
    first = names[0]
    return first if len(first) <= 60 else first[:57] + "…"


def verdict(claim: dict, df: pd.DataFrame, profile: str, backend: str, gemm: dict | None = None,
            noise: float | None = None) -> dict:
    """`noise`: the relative process-to-process range of the timings behind a timing claim; a
    measured figure outside the claimed range by less than that is "within noise of the claim"."""
    row = {"id": claim["id"], "claim": claim["claim"], "check": "", "measured": "", "verdict": ""}
    metric = claim["metric"]
    applies = profile in claim.get("devices", []) and backend in ("cuda", "rocm")
    if metric == "kernels":
        return _kernel_verdict(claim, row, gemm, applies)
    row["check"] = f"{claim['stage']} vs {claim['versus']}" + (
        f", {claim['layer']} memory" if metric == "memory_change" else "") + f": {_expect(metric, claim['expect'])}"
    values = _per_batch(df, claim)
    if not values.empty:
        med = float(np.median(values))
        spread = "" if len(values) == 1 else f" ({_fmt(metric, values.min())} to {_fmt(metric, values.max())})"
        row["measured"] = f"{_fmt(metric, med)}{spread} at B={', '.join(map(str, values.index))}"
    if not applies:
        row["verdict"] = "not applicable"
    elif values.empty:
        row["verdict"] = "not measured"
    else:
        lo, hi = claim["expect"].get("min", -np.inf), claim["expect"].get("max", np.inf)
        ratio = med if metric == "speedup" else 1 + med
        near = noise is not None and metric in ("speedup", "time_change") and any(
            abs(ratio / (bound if metric == "speedup" else 1 + bound) - 1) <= noise
            for bound in (lo, hi) if np.isfinite(bound))
        if lo <= med <= hi:
            row["verdict"] = "confirmed"
        elif near:
            row["verdict"] = f"within noise of the claim: outside its range by less than the measured {noise * 100:.1f} %"
        elif metric == "speedup":
            row["verdict"] = "refuted: " + ("faster" if med > hi else "slower") + " than claimed"
        else:
            row["verdict"] = "refuted: " + ("bigger cut" if med < lo else "smaller cut or none") + " than claimed"
    return row


def table(df: pd.DataFrame, profile: str, backend: str, path=CLAIMS, gemm: dict | None = None,
          noise=None) -> pd.DataFrame:
    """`noise(claim)`, if given, is the relative spread behind a timing claim (see verdict)."""
    return pd.DataFrame([verdict(c, df, profile, backend, gemm, noise(c) if noise else None)
                         for c in load(path)["claims"]])


def for_report(rep, path=CLAIMS) -> pd.DataFrame:
    """Every claim's verdict on one report, its timing claims judged against the report's noise."""
    tps, floor = fidelity_view.noise(rep)

    def noise(claim):  # the larger process-to-process range of the two sides, at the batch they repeated
        bands = [results.spread(v)["spread"] for (s, _), v in tps.items() if s in (claim.get("stage"), claim.get("versus"))
                 and len(v) > 1]
        return max(bands) if bands else floor

    return table(rep.df, rep.params["name"], rep.params["backend"], path, gemm=rep.evidence["gemm"], noise=noise)


def html(rep, path=CLAIMS) -> str:
    t = for_report(rep, path)
    env = rep.env
    stack = f"{env['device']['name']}, PyTorch {env.get('torch')}" + (
        f", CUDA {env['cuda']}, cuBLAS {env.get('cublas')}, cuDNN {env.get('cudnn')}" if env.get("cuda") else "")
    css = {"confirmed": "ok", "refuted": "bad", "not applicable": "note", "not measured": "warn",
           "within noise of the claim": "warn"}
    rows = "".join(
        f"<tr><td>{r.claim}</td><td>{r.check}</td><td>{_html.escape(r.measured or '—')}</td>"
        f'<td><span class="{css[r.verdict.split(":")[0]]}">{r.verdict}</span></td></tr>' for r in t.itertuples())
    return (f'<table class="claims"><tr><th>Claim</th><th>Check (confirms if)</th><th>Measured here</th>'
            f"<th>Verdict</th></tr>{rows}</table><p class=\"note\">Measured on {stack}. "
            f"Claims and thresholds: <code>params/claims.yaml</code> (source: {load(path)['source']}).</p>")
