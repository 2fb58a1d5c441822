"""One report across GPUs: loading the reports and lining up the same stages side by side, as tables
of data (compare_view.py shows them). A ratio between GPUs is taken at a batch size they all measured,
or its cells name their batch; every speed-up names its basis; DDP stands against the same GPU's best
single-GPU configuration; a ratio is judged against the spread between machines of each GPU's kind, measured
from this repository's repeat sittings (lib/results/machine_spread.py), and put down to the hardware only beyond
it, with the same software, measurement method and measuring code (version skew is flagged, never hidden)."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from lib.core import config, provenance, stages
from lib.core.paths import ROOT
from lib.report import loader, parity_view
from lib.results import comparison, decide, decided_file, machine_spread, store

SKEW_KEYS = [
    ("torch", "PyTorch"),
    ("cuda", "CUDA"),
    ("cublas", "cuBLAS(Lt)"),
    ("cudnn", "cuDNN"),
    ("driver", "Driver"),
    ("python", "Python"),
]
METHOD = "measurement method"
CODE = "code commit"


class CompareError(ValueError):
    pass


class Reports(dict):
    """name -> loader.Report, the first the basis of every ratio, with the comparison's decisions (comparison.compute)
    judged once: read from `out_dir`'s decisions.json where it was judged from these reports' decisions by today's
    deciding code, else judged here (and kept there by write)."""

    def __init__(self, out_dir=None):
        super().__init__()
        self.out_dir = Path(out_dir) if out_dir else None

    def digest(self) -> str:
        folders = [[n, rep.decided["records_digest"]] for n, rep in self.items()]
        return hashlib.sha256(json.dumps([folders, decided_file.render_env()[1]]).encode()).hexdigest()

    @functools.cached_property
    def decided(self) -> dict:
        try:
            kept = json.loads((self.out_dir / comparison.FILE).read_text()) if self.out_dir else {}
        except (OSError, ValueError):
            kept = {}
        if kept.get("digest") == self.digest():
            return kept
        return {**comparison.compute({n: facts(rep) for n, rep in self.items()}), "digest": self.digest()}

    def write(self) -> None:
        """The comparison's decisions.json, before its notebook draws them."""
        (self.out_dir / comparison.FILE).write_text(json.dumps(self.decided, indent=1) + "\n")


def facts(rep: loader.Report) -> dict:
    """What the comparison judges a report's figures by: its decisions, the spread between machines of its GPU kind
    (from every sitting in the folder it was loaded from and its archive/), its stages and its same-batch timings."""
    ok = rep.df[rep.df["status"] == "ok"]
    return {
        "decided": rep.decided,
        "spread": machine_spread.of_device(rep.dir.parent, rep.env["device"]["name"]),
        "stages": list(rep.stage_order),
        "same_batch": {
            k: {int(b): float(g["tokens_per_s"].iloc[0]) for b, g in rows.groupby("batch_size", sort=False)}
            for k, rows in ok.groupby("stage", sort=False)
        },
    }


def load_all(names: list[str], reports_root=None, out_dir=None) -> Reports:
    """Every named report, or a CompareError naming the first one that is missing or unreadable; `out_dir`, the
    comparison's folder, where its decisions.json may be read from and written to."""
    root = Path(reports_root) if reports_root else ROOT / "reports"
    if len(names) < 2:
        raise CompareError(f"compare needs at least two reports, got {len(names)}: {' '.join(names) or '(none)'}")
    if len(set(names)) != len(names):
        raise CompareError(f"a report is named twice: {' '.join(names)}")
    out = Reports(out_dir)
    for name in names:
        config.check_name(name)
        d = root / name
        if not (d / "params.json").exists() or not (d / "results").is_dir():
            have = sorted(p.name for p in root.iterdir() if (p / "params.json").exists()) if root.exists() else []
            raise CompareError(f"no report for {name!r} in {root} (reports there: {', '.join(have) or 'none'})")
        try:
            out[name] = loader.load(d, read_decisions=True)
        except ValueError as e:  # results of another schema version
            raise CompareError(f"report {name!r} cannot be compared: {e}") from None
    return out


def skew(reps: dict[str, loader.Report]) -> pd.DataFrame:
    rows = []
    for key, label in SKEW_KEYS:
        values = {name: str(rep.env.get(key)) for name, rep in reps.items()}
        rows.append({"component": label, **values, "differs": len(set(values.values())) > 1})
    # How the step was built and timed (lib/record.METHOD): reports of different methods do not compare.
    values = {name: str(rep.params.method) for name, rep in reps.items()}
    rows.append({"component": METHOD, **values, "differs": len(set(values.values())) > 1})
    # Within one method the code can still differ: commits that git shows to hold the same measuring code are not a
    # second variable
    values = {name: _commits(rep) for name, rep in reps.items()}
    differs = len(set(values.values())) > 1 and code_changes(reps)[1] != []
    rows.append({"component": CODE, **values, "differs": differs})
    return pd.DataFrame(rows)


def _commits(rep) -> str:
    commits, unrecorded = store.code_commits(rep.run)
    return ", ".join(c[:7] for c in commits) + (f" ({unrecorded} runs recorded none)" if unrecorded else "") or "none"


def skew_warnings(reps) -> list[str]:
    """In words, what differs between the reports beside the hardware: software versions, and the
    measurement method (lib/record.METHOD), under which numbers do not compare at all."""
    t = skew(reps)
    soft = list(t[t["differs"] & ~t["component"].isin([METHOD, CODE])]["component"])
    out = []
    if soft:
        out.append(
            f"Version skew: the GPUs were measured with different {', '.join(soft)}. Part of any difference "
            "in this comparison may come from the software, not the hardware."
        )
    if t[t["component"] == CODE]["differs"].any():
        out.append(code_difference(reps))
    if t[t["component"] == METHOD]["differs"].any():
        methods = ", ".join(f"{n}: {rep.params.method}" for n, rep in reps.items())
        out.append(
            f"Different measurement methods ({methods}): the step was built or timed another way, so the "
            "numbers of this comparison do not compare like with like."
        )
    return out


def code_changes(reps) -> tuple[list[str], list[str] | None]:
    """The reports' distinct commits and the measuring code's files (provenance.CODE_FOLDERS) that git changes
    between the first and each other; None where git cannot tell."""
    recorded = [store.code_commits(rep.run) for rep in reps.values()]
    commits = list(dict.fromkeys(c for cs, _ in recorded for c in cs))
    if any(unrecorded or not cs for cs, unrecorded in recorded):  # a run that recorded no commit: unknown code
        return commits, None
    changes = [provenance.measuring_changes(commits[0], c, ROOT) for c in commits[1:]]
    return commits, None if None in changes else sorted(set().union(*map(set, changes)))


def code_difference(reps) -> str:
    """In words, what git says changed in the measuring code between the reports' commits: how many files, and
    whether any builds or times the step (provenance.STEP_CODE). Code outside the step still counts as a second
    variable: it decides what is measured, with which settings, and what is adopted."""
    commits, files = code_changes(reps)
    named = ", ".join(c[:7] for c in commits) or "unrecorded"
    if files is None:
        return (
            f"Different code commits ({named}), which git cannot compare here (a commit this clone lacks, or no "
            ".git): a lever or the harness may have changed between the reports, so part of any difference in this "
            "comparison may come from the code."
        )
    step = [f for f in files if f.startswith(tuple(d + "/" for d in provenance.STEP_CODE))]
    where = " or ".join(provenance.STEP_CODE)
    counted = f"{len(files)} files" if len(files) > 1 else "1 file"
    head = (
        f"Different code commits ({named}): between them git changes {counted} of the measuring code "
        f"({', '.join(provenance.CODE_FOLDERS)}), "
    )
    if step:
        listed = ", ".join(step[:6]) + (f" and {len(step) - 6} more" if len(step) > 6 else "")
        share = f"{len(step)} of them" if len(files) > 1 else "it"
        return (
            head
            + f"{share} in {where}, which build and time the step ({listed}): part of any difference in this "
            + "comparison may come from the code."
        )
    return head + (
        f"none in {where}, which build and time the step; the others decide what is measured, with which settings, "
        "and what is adopted, so part of any difference in this comparison may still come from the code."
    )


def fp32_best(rep):
    """The GPU's fastest baseline (FP32) record over its batch sizes (B=64 may not fit in FP32
    where it fits later), or None."""
    ok = rep.df[(rep.df["stage"] == rep.stage_order[0]) & (rep.df["status"] == "ok")]
    return ok.loc[ok["tokens_per_s"].idxmax()] if not ok.empty else None


def stage_table(reps: dict[str, loader.Report]) -> pd.DataFrame:
    """Per single-GPU stage and GPU: best tokens/s over batch sizes and its batch, that over the
    GPU's own best FP32 tokens/s (fp32_best), MFU against the GPU's dense BF16 peak and against
    the peak of the stage's own precision, and allocator memory at that batch. The multi-GPU
    stage is ddp_table's: its throughput over a single-GPU figure is no per-GPU speed-up. What each GPU trains
    with is its recipe (compare_summary.recipe_table), not a row here."""
    rows = []
    order = [k for k in stages.single_gpu(stages.ORDER) if any(k in rep.stage_order for rep in reps.values())]
    base = {name: fp32_best(rep) for name, rep in reps.items()}
    for key in order:
        row = {"key": key, "stage": stages.get(key).title}
        for name, rep in reps.items():
            ok = rep.df[(rep.df["stage"] == key) & (rep.df["status"] == "ok")]
            best = ok.loc[ok["tokens_per_s"].idxmax()] if not ok.empty else None
            row.update(_cells(name, best, base[name], rep.params.peak_tflops))
        rows.append(row)
    return pd.DataFrame(rows)


def _cells(name: str, best, base, peaks: dict | None) -> dict:
    """One GPU's cells of a stage-table row, from the record of its best configuration (None: no
    timing). The record's `mfu` is against its own precision's peak (stats.fill_mfu); the BF16
    column divides the same achieved TFLOP/s by the BF16 dense peak, so every stage compares."""
    cols = ("tok/s", "B", "stage", "× own FP32", "MFU bf16", "MFU own", "precision", "GiB")
    if best is None:
        return {f"{name} {c}": np.nan for c in cols}
    bf16, achieved = (peaks or {}).get("bf16"), best.get("achieved_tflops")
    mem = best.get("mem_allocator_bytes")
    return {
        f"{name} tok/s": best["tokens_per_s"],
        f"{name} B": int(best["batch_size"]),
        f"{name} stage": best.get("stage_title"),
        f"{name} × own FP32": best["tokens_per_s"] / base["tokens_per_s"] if base is not None else np.nan,
        f"{name} MFU bf16": achieved / bf16 if bf16 and not pd.isna(achieved) else np.nan,
        f"{name} MFU own": best.get("mfu"),
        f"{name} precision": best.get("peak_precision"),
        f"{name} GiB": mem / loader.GiB if not pd.isna(mem) else np.nan,
    }


def same_batch_table(reps: Reports) -> pd.DataFrame:
    """Per single-GPU stage: tokens/s of every GPU at the largest batch size they all measured with a timing, each GPU
    against the first one, and that ratio judged (comparison.same_batch: `<gpu> within`, None where no spread is
    measured, and the band). The best-over-batches table lets a GPU with more memory win by a larger batch; this one
    holds the batch fixed."""
    names = list(reps)
    rows = [
        {
            "stage": stages.get(r["stage"]).title,
            "B": r["batch"],
            **{f"{n} tok/s": v for n, v in r["tokens_per_s"].items()},
            **{f"{n} / {names[0]}": v for n, v in r["ratio"].items()},
            **{f"{n} within": v for n, v in r["within"].items()},
            **{f"{n} band": v for n, v in r["band"].items()},
        }
        for r in reps.decided["same_batch"]
    ]
    return pd.DataFrame(rows)


def lever_effects(reps) -> pd.DataFrame:
    """What each single-GPU lever buys per GPU, indexed by stage: its speed-up over the stage it is
    added to at the same batch (decide.lever_effect), at the largest batch size every GPU timed
    it at (column B). Where the GPUs share no batch, each GPU's at its own largest, named in
    `<gpu> B` (as it is in every row)."""
    rows = []
    for key in [k for k in stages.single_gpu(stages.ORDER[1:]) if any(k in rep.stage_order for rep in reps.values())]:
        values = {n: decide.lever_effect(rep.df, key)["values"] for n, rep in reps.items() if key in rep.stage_order}
        values = {n: v for n, v in values.items() if len(v)}
        common = set.intersection(*(set(v.index) for v in values.values())) if values else set()
        b = max(common) if common else None
        row = {"stage": stages.get(key).title, "B": b}
        for n in reps:
            at = (b if b is not None else max(values[n].index)) if n in values else None
            row.update({n: float(values[n][at]) if at is not None else np.nan, f"{n} B": at})
        rows.append(row)
    return pd.DataFrame(rows).set_index("stage")


def ddp_table(reps) -> pd.DataFrame:
    """One row per GPU count any report timed DDP at, per GPU: the job's tokens/s, its per-GPU batch
    and stage, its speed-up over the same GPU's best single-GPU configuration and the scaling
    efficiency (loader.scaling_curve), and that configuration (`one`, its basis). Never a median
    over GPU counts, never a division by a single-GPU FP32 figure."""
    curves = {n: loader.scaling_curve(rep) for n, rep in reps.items()}
    rows = []
    for g in sorted({p["gpus"] for c in curves.values() for p in c if p["gpus"] > 1}):
        row = {"gpus": g}
        for n, c in curves.items():
            p = next((p for p in c if p["gpus"] == g), None)
            row.update(
                {
                    f"{n} {k}": p[k] if p else None
                    for k in ("tokens_per_s", "per_gpu_batch", "stage", "speedup", "efficiency", "same_config")
                }
            )
            row[f"{n} one"] = c[0] if c else None
        rows.append(row)
    return pd.DataFrame(rows)


def parity_tests(reps: Reports, key: str) -> dict[str, dict]:
    """name -> the parity test of lever stage `key` in each report that ran one: where GPUs decide a lever
    differently, the comparison sets the tests side by side (batch, steps, verdict)."""
    tests = {n: parity_view.checks(rep).get(key) for n, rep in reps.items()}
    return {n: c for n, c in tests.items() if c}


def decisions_table(reps: Reports) -> pd.DataFrame:
    """One row per lever stage after the baseline: each GPU's decision and its reason (each report's decisions,
    comparison.levers), and whether the decisions differ."""
    rows = []
    for r in reps.decided["levers"]:
        row = {"key": r["stage"], "stage": stages.get(r["stage"]).title}
        for n, (decision, why) in r["words"].items():
            row[f"{n} decision"], row[f"{n} why"] = decision, why
        rows.append({**row, "differs": r["differs"]})
    return pd.DataFrame(rows)
