"""*How the report reads*, its core: a report folder loaded once (params, environment, records,
the decision records and the evidence), the recommended configuration, and the number formats
every view uses. Tables, prose and charts live in report_tables, report_text and report_charts."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lib.core import chapters, data, kernel_categories, prices, provenance, record, stages
from lib.core.params import ConfigError, Params
from lib.core.paths import resolve
from lib.report.formats import GiB, duration, gib, pct, signed_pct, span, times, tok  # noqa: F401 (the views import them from here too)
from lib.results import decided_file, decisions, long_choice, parity, stats, store
from lib.results.stats import mfu_bf16_of

CV_LIMIT = 0.02  # step-time spread above this on a GPU is called out
# The memory layers of a GPU record as every view names them (lib/measure/worker.py takes them after the timed
# steps): two peaks, and the device's memory in use at that moment. DEVICE_PEAK, sampled during the
# warm-up steps, exists only in records measured since it was added: the tables show it where present.
LAYERS = (
    ("mem_tensors_bytes", "tensors peak (max_memory_allocated)"),
    ("mem_allocator_bytes", "allocator peak (max_memory_reserved)"),
    ("mem_device_bytes", "device in use after the steps (total − free)"),
)
CPU_LAYERS = (("mem_device_bytes", "process peak RSS"),)
DEVICE_PEAK = ("mem_device_sampled_peak_bytes", "device peak during the warm-up steps (NVML, sampled every 5 ms)")


@dataclass
class Report:
    dir: Path
    params: Params
    env: dict
    records: list  # the stage matrix at the report's batch sizes (and the multi-GPU rows)
    decisions: list  # store.decision_records: matrix, sweep, repeats, parity runs
    evidence: dict  # store.load_evidence: every kind of evidence record
    loss_noise: float = 0.0  # stats.loss_noise: run-to-run drift of the loss gate's statistic
    run: dict | None = None  # run.json: the runs that measured the folder, the code's commit, the command

    @property
    def loss_noise_from(self) -> str:
        """Whose two processes drifted by loss_noise: the widest of the repeated configurations, which need not be
        the stage a loss gate judges (a reviewer: the fused linear cross-entropy passed only by the FP8 lm_head's)."""
        widest = stats.loss_noise_at(self.decisions)
        return f"{stages.get(widest[1]).title} at B={widest[2]}" if widest else ""

    @functools.cached_property
    def decided(self) -> dict:
        """Every decision of the report (lib/results/decisions.py), computed once, with what the views read besides
        (the quality tests, the recommended configuration) and its records digest: recommendation.write keeps it as
        decisions.json, which a notebook drawn after it reads instead of judging again (lib/results/decided_file.py)."""
        evidence = {**self.evidence, "matrix": self.records, "sitting_gpu_s": decided_file.sitting_gpu_seconds(self)}
        best = self.best
        return {
            **decisions.compute(
                self.decisions,
                evidence,
                self.params,
                self.env,
                price_per_gpu_hour(self),
                self.quality_checks,
                self.choice,
            ),
            "quality_checks": self.quality_checks,
            "best": {k: best.get(k) for k in ("stage", "batch_size", "variant")} if best else None,
            "records_digest": store.records_digest(self.dir, *decided_file.render_env()),
        }

    @functools.cached_property
    def df(self) -> pd.DataFrame:
        """The matrix as one row a configuration with its divergence check (decide.table, judged once into the
        decisions as their `table`), and each row's MFU against the bf16 peak."""
        df = pd.DataFrame(self.decided["table"])
        df["mfu_bf16"] = [mfu_bf16_of(self.params, m, p) for m, p in zip(df["mfu"], df["peak_precision"])]
        return df

    @functools.cached_property
    def quality_checks(self) -> dict:
        """parity.checks of the folder's records, judged once a Report: the decisions and every view read these."""
        return parity.checks(self.decisions, self.params.evidence)

    @functools.cached_property
    def choice(self) -> tuple:
        """The recommended configuration's record and the checks it was chosen with (long_choice.choose:
        decide.recommended with the levers the long quality test admits), found once a Report."""
        evidence = {**self.evidence, "matrix": self.records}
        return long_choice.choose(self.decisions, self.params, evidence, self.quality_checks)

    @property
    def best(self) -> dict | None:
        return self.choice[0]

    @property
    def stage_order(self) -> list[str]:
        return self.params.stages

    @property
    def stage_titles(self) -> list[str]:
        return [stages.get(k).title for k in self.stage_order]

    @property
    def on_gpu(self) -> bool:
        return self.params.backend in ("cuda", "rocm")

    def rec(self, stage: str, batch: int) -> dict | None:
        return next((r for r in self.records if r["stage"] == stage and r["batch_size"] == batch), None)

    def inapplicable(self, stage: str) -> bool:
        """A stage not applicable here at every batch it has a record for (DDP on one GPU)."""
        recs = [r for r in self.records if r["stage"] == stage]
        return bool(recs) and all(r["status"] == "not_applicable" for r in recs)

    @property
    def layers(self) -> tuple:
        return LAYERS if self.on_gpu else CPU_LAYERS

    def ok(self) -> pd.DataFrame:
        return self.df[self.df["status"].isin(["ok", "diverged"])]


class EarlierRule(ConfigError):
    """A folder measured under a retired quality rule: `make render` and `make compare` say so in one line."""


def refuse_earlier_rule(d: Path, params: Params) -> None:
    """Refuse a folder whose quality tests ran under a retired rule (a fixed number of seeds against the canonical
    reference, or one long parity run a stage): its params name no sequential looks. Today's views judge the
    sequential test alone; such a folder stays readable as the report.html and report.pdf it keeps under
    reports/archive/."""
    if not params.evidence.parity_looks:
        raise EarlierRule(
            f"{d} was measured under an earlier quality rule and is archived: open its own report.html (or "
            "report.pdf); today's views draw only reports of the sequential quality test"
        )


def load(report_dir, read_decisions: bool = False) -> Report:
    """The report folder's records and settings. With `read_decisions` (a notebook drawn after the render wrote
    decisions.json), the decisions, quality tests and recommended configuration are read from decisions.json where
    its records digest is the folder's, instead of judged again."""
    rep = _load(report_dir)
    if read_decisions:
        decided_file.read_into(rep)
    return rep


def _load(report_dir) -> Report:
    d = resolve(report_dir)
    params = Params.read(d / "params.json")
    refuse_earlier_rule(d, params)
    env = json.loads((d / "environment.json").read_text())
    records = [kernel_categories.current(r) for r in store.load_records(d / "results")]
    order = params.stages
    # DDP runs at whatever batch the best single-GPU configuration had (the sweep's, maybe).
    records = [
        r
        for r in records
        if r["stage"] in order and (r["batch_size"] in params.run.batch_sizes or stages.is_multi_gpu(r["stage"]))
    ]
    # A one-GPU host's 'not applicable' DDP row has nothing to say once a host with more GPUs,
    # resumed into the same folder, has measured the stage.
    measured = {r["stage"] for r in records if stages.is_multi_gpu(r["stage"]) and r["status"] in record.TIMED}
    records = [r for r in records if not (r["stage"] in measured and r["status"] == record.Status.NOT_APPLICABLE)]
    decisions = [kernel_categories.current(r) for r in store.decision_records(d / "results")]
    run = json.loads((d / "run.json").read_text()) if (d / "run.json").exists() else None
    noise = stats.loss_noise(decisions)
    return Report(d, params, env, records, decisions, store.load_evidence(d / "results"), noise, run)


def price_per_gpu_hour(rep: "Report") -> dict | None:
    """{usd, source}: PRICE_PER_GPU_HOUR= at render time, else the profile's price_per_gpu_hour, else the list price
    of params/prices.yaml for its device (prices.stated)."""
    return prices.stated(rep.params.name, os.environ.get("PRICE_PER_GPU_HOUR"), rep.params.price_per_gpu_hour)


def compile_time_text(rec: dict) -> str:
    """A configuration's first step as the compile chapter states it: the cold compile where this
    process compiled cold or the cache's ledger remembers the process that did; a warm start says so."""
    cache, first = rec.get("compile_cache") or {}, rec.get("first_step_s")
    head = f"B={rec['batch_size']}: "
    if cache.get("state") in (None, "cold", "not compiled"):
        return head + f"{duration(first, 1)} s" + (" (cold compile)" if cache.get("state") == "cold" else "")
    cold = cache.get("cold")
    if cold:
        own = rec.get("provenance") or {}
        where = (
            "in this sitting"
            if (cold.get("commit"), cold.get("host_id")) == (own.get("commit"), own.get("host_id"))
            else f"by commit {str(cold.get('commit'))[:7]} on {cold.get('host_id')}, the sitting that filled the "
            "compile cache this one started from"
        )
        return head + (
            f"{duration(cold['first_step_s'], 1)} s cold (measured {str(cold.get('finished_at'))[:10]} {where}); this "
            f"process started from the compile cache and took {duration(first, 1)} s"
        )
    return head + f"{duration(first, 1)} s from the compile cache; no cold compile of it on record"


def mfu_bf16(rep: "Report", mfu, precision) -> float | None:
    return mfu_bf16_of(rep.params, mfu, precision)


def no_value(rec: dict | None) -> str:
    """What a chart or table writes in place of a configuration without a value: OOM, error, n/a
    (not applicable) or not measured."""
    if rec is None:
        return "not measured"
    return {"oom": "OOM", "not_applicable": "n/a", "error": "error"}.get(rec["status"], rec["status"])


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
    """The recommended configuration (decide.best_config) over the matrix, the batch sweep,
    the repeats and the parity runs."""
    return rep.best


def widest(rows: pd.DataFrame) -> pd.Series:
    """Of a multi-GPU stage's rows, the one with the most GPUs: the figure a summary quotes (the
    stage's chapter draws every GPU count, scaling_curve)."""
    return rows.loc[rows["world_size"].astype(float).idxmax()]


def best_single_gpu(rep: Report) -> dict | None:
    """What a DDP point is judged against (scaling.single_gpu, decided once)."""
    return rep.decided["scaling"]["single"]


def cut_short(rep: Report) -> str | None:
    """Why the report's last run stopped before its end where it did and no run resumed it (the report is incomplete;
    earlier runs were resumed by a later one); None where it ended, or is the run drawing this report. A run left
    'running' by a process that is gone ended without closing it (killed, or its machine went away)."""
    run = rep.run or {}
    if run.get("state") == "interrupted":
        return run.get("interrupted")
    return record.UNCLOSED_RUN if run.get("state") == "running" and not _alive(run) else None


def _alive(run: dict) -> bool:
    """Whether the process that wrote a run entry still runs here (its own render is drawn while it runs): on this
    host (a run measured on a device machine is rendered on another, where its pid names some other process) and
    by its pid."""
    pid = run.get("pid")
    if not isinstance(pid, int) or run.get("host_id") not in (None, provenance.host_id()):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ddp_not_measured(rep: Report) -> list[dict]:
    """The DDP jobs this host's chapter runs (chapters.ddp_points) with no timed record in the folder, each with why:
    its record's failure, else the run that stopped before reaching it, else no record at all."""
    timed = {
        (int(r["world_size"]), int(r.get("nnodes") or 1)): r
        for r in rep.records
        if r["stage"] == "ddp" and r.get("world_size")
    }
    gpus, cut = int((rep.env.get("device") or {}).get("count") or 1), cut_short(rep)
    out = []
    for n, nodes in chapters.ddp_points(gpus):
        rec = timed.get((n, nodes))
        if rec and rec["status"] == record.Status.OK:
            continue
        why = (
            f"{rec['status']}: {short(rec.get('reason'))}"
            if rec
            else f"not reached: the measuring run stopped before it ({cut})"
            if cut
            else "no record in this folder"
        )
        out.append({"gpus": n, "nnodes": nodes, "reason": why})
    return out


def scaling_curve(rep: Report) -> list[dict]:
    """The data-parallel scaling curve and where each point's lost efficiency went (scaling.curve, decided once)."""
    return rep.decided["scaling"]["curve"]
