"""*How the report reads*, its core: a report folder loaded once (params, environment, records,
the decision records and the evidence), the recommended configuration, and the number formats
every view uses. Tables, prose and charts live in report_tables, report_text and report_charts."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import data, kernel_categories, results, stages
from .paths import resolve

GiB = 2**30
CV_LIMIT = 0.02  # step-time spread above this on a GPU is called out
@dataclass
class Report:
    dir: Path
    params: dict
    env: dict
    records: list            # the stage matrix at the report's batch sizes (and the multi-GPU rows)
    df: pd.DataFrame         # results.table of them
    decisions: list          # results.decision_records: matrix, sweep, repeats, parity runs
    evidence: dict           # results.load_evidence: every kind of evidence record
    loss_noise: float = 0.0  # results.loss_noise: run-to-run drift of the loss gate's statistic

    @property
    def stage_order(self) -> list[str]:
        return self.params["stages"]

    @property
    def stage_titles(self) -> list[str]:
        return [stages.get(k).title for k in self.stage_order]

    @property
    def on_gpu(self) -> bool:
        return self.params["backend"] in ("cuda", "rocm")

    def rec(self, stage: str, batch: int) -> dict | None:
        return next((r for r in self.records if r["stage"] == stage and r["batch_size"] == batch), None)

    def ok(self) -> pd.DataFrame:
        return self.df[self.df["status"].isin(["ok", "diverged"])]


def load(report_dir) -> Report:
    d = resolve(report_dir)
    params = json.loads((d / "params.json").read_text())
    env = json.loads((d / "environment.json").read_text())
    records = [kernel_categories.current(r) for r in results.load_records(d / "results")]
    order = params["stages"]
    # DDP runs at whatever batch the best single-GPU configuration had (the sweep's, maybe).
    records = [r for r in records if r["stage"] in order
               and (r["batch_size"] in params["run"]["batch_sizes"] or stages.is_multi_gpu(r["stage"]))]
    decisions = results.decision_records(d / "results")
    noise = results.loss_noise(decisions)
    df = results.table(records, order, params["run"]["loss_tolerance"], noise)
    return Report(d, params, env, records, df, decisions, results.load_evidence(d / "results"), noise)


def gib(v) -> str:
    return "n/a" if v is None or pd.isna(v) else f"{v / GiB:.2f}"


def times(v) -> str:
    return "" if v is None or pd.isna(v) else f"{v:.2f}×"


def pct(v, digits=1) -> str:
    return "n/a" if v is None or pd.isna(v) else f"{v * 100:.{digits}f} %"


def tok(v) -> str:
    return "" if v is None or pd.isna(v) else f"{v:,.0f}"


def span(values, fmt="{:.2f}×") -> str:
    values = list(values)
    if not values:
        return "n/a"
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def speedups(rep: Report, stage: str, col: str) -> pd.Series:
    rows = rep.ok()[rep.ok()["stage"] == stage]
    return rows.set_index("batch_size")[col].dropna()


def short(reason) -> str:
    """The first two sentences of a failure message (CUDA's OOM text runs on for lines)."""
    text = str(reason or "")
    parts = text.split(". ")
    return ". ".join(parts[:2]).rstrip(".") + "."


def manifest() -> dict:
    try:
        return json.loads((data.DATA_DIR / "manifest.json").read_text())
    except FileNotFoundError:
        return {}


def recommended(rep: Report) -> dict | None:
    """The recommended configuration (results.best_config) over the matrix, the batch sweep,
    the repeats and the parity runs."""
    return results.best_config(rep.decisions, rep.params)


