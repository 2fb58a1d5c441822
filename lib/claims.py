"""Verdicts on the prevailing claims (params/claims.yaml) from one report's measurements:
confirmed, refuted, not applicable or not measured, each with the measured figure."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

CLAIMS = Path(__file__).resolve().parent.parent / "params" / "claims.yaml"
LAYERS = {"tensors": "mem_tensors_bytes", "allocator": "mem_allocator_bytes", "device": "mem_device_bytes"}
METRICS = ("speedup", "time_change", "memory_change", "kernels")


def load(path=CLAIMS) -> dict:
    data = yaml.safe_load(Path(path).read_text())
    for c in data["claims"]:
        if c.get("metric") not in METRICS:
            raise ValueError(f"{path}: claim {c.get('id')!r} has unknown metric {c.get('metric')!r}")
    return data


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


def verdict(claim: dict, df: pd.DataFrame, profile: str, backend: str) -> dict:
    row = {"id": claim["id"], "claim": claim["claim"], "check": "", "measured": "", "verdict": ""}
    metric = claim["metric"]
    if metric == "kernels":
        row.update(check="kernel names cuBLAS picks for n=50257 vs 50304 (torch.profiler)",
                   measured="—", verdict="not measured")
        return row
    row["check"] = f"{claim['stage']} vs {claim['versus']}" + (
        f", {claim['layer']} memory" if metric == "memory_change" else "") + f": {_expect(metric, claim['expect'])}"
    values = _per_batch(df, claim)
    if not values.empty:
        med = float(np.median(values))
        spread = "" if len(values) == 1 else f" ({_fmt(metric, values.min())} to {_fmt(metric, values.max())})"
        row["measured"] = f"{_fmt(metric, med)}{spread} at B={', '.join(map(str, values.index))}"
    applies = profile in claim.get("devices", []) and backend in ("cuda", "rocm")
    if not applies:
        row["verdict"] = "not applicable"
    elif values.empty:
        row["verdict"] = "not measured"
    else:
        lo, hi = claim["expect"].get("min", -np.inf), claim["expect"].get("max", np.inf)
        if lo <= med <= hi:
            row["verdict"] = "confirmed"
        elif metric == "speedup":
            row["verdict"] = "refuted: " + ("faster" if med > hi else "slower") + " than claimed"
        else:
            row["verdict"] = "refuted: " + ("bigger cut" if med < lo else "smaller cut or none") + " than claimed"
    return row


def table(df: pd.DataFrame, profile: str, backend: str, path=CLAIMS) -> pd.DataFrame:
    return pd.DataFrame([verdict(c, df, profile, backend) for c in load(path)["claims"]])


def html(rep, path=CLAIMS) -> str:
    t = table(rep.df, rep.params["name"], rep.params["backend"], path)
    env = rep.env
    stack = f"{env['device']['name']}, PyTorch {env.get('torch')}" + (
        f", CUDA {env['cuda']}, cuBLAS {env.get('cublas')}, cuDNN {env.get('cudnn')}" if env.get("cuda") else "")
    css = {"confirmed": "ok", "refuted": "bad", "not applicable": "note", "not measured": "warn"}
    rows = "".join(
        f"<tr><td>{r.claim}</td><td>{r.check}</td><td>{r.measured or '—'}</td>"
        f'<td><span class="{css[r.verdict.split(":")[0]]}">{r.verdict}</span></td></tr>' for r in t.itertuples())
    return (f'<table class="claims"><tr><th>Claim</th><th>Check (confirms if)</th><th>Measured here</th>'
            f"<th>Verdict</th></tr>{rows}</table><p class=\"note\">Measured on {stack}. "
            f"Claims and thresholds: <code>params/claims.yaml</code> (source: {load(path)['source']}).</p>")
