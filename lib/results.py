"""One results schema: a JSON record per (stage, batch) configuration, written atomically, and
the tidy pandas table every chapter and the summary read."""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from . import kernel_categories, parity, provenance, stages
from .noise import across_machines, decision_floor, noise_floor, spread, within_noise  # noqa: F401 (re-exported)
from .record import REUSABLE, SCHEMA_VERSION, STATUSES, TIMED, TIMING_VARIANTS, Record, Status  # noqa: F401 (re-exported)

DONE_PREFIX = "@@done "  # the measurement launcher's one line per finished configuration, on its stdout
BATCH_DONE = "@@batch-done"  # ... and its line when every job of a batch has been handled
ENV_KEYS = ("torch", "cuda", "hip", "cudnn", "cublas", "driver", "python")
# How a step is built and timed, recorded in every report's params (config.load) and part of every
# fingerprint, so results measured another way are never kept and a report of another method is
# archived, not resumed. 1 (unrecorded): before; 2: the canonical loss path, one step core, static
# torch.compile.
METHOD = 2


def setup_key(params: dict, env: dict) -> dict:
    """What a measurement depends on: the workload and the machine (not the report's prose
    settings such as the loss tolerance)."""
    run = {k: v for k, v in params["run"].items() if k not in ("batch_sizes", "loss_tolerance")}
    return {"method": params.get("method", 1), "model": params["model"], "run": run, "backend": params["backend"],
            "device": env["device"].get("name"), **{k: env.get(k) for k in ENV_KEYS}}


def short_hash(obj) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprint(params: dict, env: dict, stage, batch: int) -> str:
    """What a measurement depends on: the workload, the machine, the stage's switches (not its
    prose: fixing a title re-measures nothing) and the batch size."""
    return short_hash({"setup": setup_key(params, env), "stage": stage.identity(), "batch_size": batch})


def base_record(params: dict, stage, batch: int) -> dict:
    return {"schema_version": SCHEMA_VERSION, "profile": params["name"], "model": params.get("model_preset"), "stage": stage.key,
            "stage_title": stage.title, "batch_size": batch, "seq_len": params["run"]["seq_len"],
            "status": Status.OK, "reason": None, "warmup_steps": params["run"]["warmup_steps"],
            "timed_steps": params["run"]["timed_steps"], "peak_precision": stage.peak}


def record_path(out_dir, stage: str, batch: int, gpus: int | None = None) -> Path:
    """<stage>__b<batch>.json; a multi-GPU record adds its GPU count (__g<N>): hosts of 2, 4, 8 GPUs share a folder."""
    return Path(out_dir) / (f"{stage}__b{batch}" + (f"__g{gpus}" if gpus else "") + ".json")


def write_atomic(path, record: dict) -> None:
    """Write to a temporary file in the same folder, then rename: a reader (or a run killed
    half-way) never sees a half-written record."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1, default=_jsonable)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(path, record: dict) -> None:
    """A result record, atomically, once it says where and how it was measured (provenance.check)."""
    provenance.check(record)
    write_atomic(path, record)


def supersede(out: Path) -> Path:
    """Move a record that is about to be measured again to <report>/superseded/ (its path under results/,
    stamped with the time): no record is ever deleted, and the report counts what was superseded."""
    parts = out.parts
    if "results" in parts:
        i = len(parts) - 1 - parts[::-1].index("results")
        dest = Path(*parts[:i]) / "superseded" / Path(*parts[i + 1:])
    else:
        dest = out.parent / "superseded" / out.name
    dest = dest.with_name(f"{dest.stem}.{time.strftime('%Y%m%dT%H%M%S')}{dest.suffix}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    out.rename(dest)
    return dest


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    raise TypeError(f"not JSON serialisable: {type(v)}")


def fill_timing(rec: dict, times_ms: list[float], tokens_per_step: int) -> None:
    t = np.asarray(times_ms, dtype=float)
    median = float(np.median(t))
    rec.update(step_ms=[float(v) for v in t], median_ms=median,
               p10_ms=float(np.percentile(t, 10)), p90_ms=float(np.percentile(t, 90)),
               mean_ms=float(t.mean()), cv=float(t.std(ddof=1) / t.mean()) if t.size > 1 else 0.0,
               tokens_per_step=tokens_per_step, tokens_per_s=tokens_per_step / (median / 1e3))


def fill_mfu(rec: dict, flops_per_token: int, peaks: dict | None, precision: str) -> None:
    rec["flops_per_token"] = flops_per_token
    rec["achieved_tflops"] = flops_per_token * rec["tokens_per_s"] / 1e12
    peak = (peaks or {}).get(precision)
    rec["peak_tflops"] = peak
    rec["mfu"] = rec["achieved_tflops"] / peak if peak else None


def fill_loss(rec: dict, window: int) -> None:
    losses = rec.get("losses") or []
    if not losses:
        return
    rec["final_loss"] = float(np.mean(losses[-window:]))
    if not all(math.isfinite(v) for v in losses):
        rec["status"] = Status.DIVERGED
        rec["reason"] = "loss became NaN or infinite"


LOSS_GATE_WINDOW = 5  # steps in the moving average the loss gate judges
# The loss verdicts that fail the gate: a spike too (bf16 and FP8 faults show as one bad step); it is only
# named as what it is.
GATE_FAILS = ("beyond", "spike")


def loss_gap(losses, ref_losses, skip: int, window: int = LOSS_GATE_WINDOW) -> float:
    """The loss gate's figure: the largest |moving average of (loss - reference loss)| over the
    steps after the first `skip` (warm-up), so an excursion half-way fails even when the last
    steps agree again. NaN when either curve is missing; infinite when a loss is not finite."""
    if not losses or not ref_losses:
        return float("nan")
    n = min(len(losses), len(ref_losses))
    diff = np.asarray(losses[skip:n], dtype=float) - np.asarray(ref_losses[skip:n], dtype=float)
    if diff.size == 0:
        return float("nan")
    if not np.all(np.isfinite(diff)):
        return float("inf")
    w = min(window, diff.size)
    return float(np.max(np.abs(np.convolve(diff, np.ones(w) / w, mode="valid"))))


def spike_step(losses, ref_losses, skip: int, limit: float, window: int = LOSS_GATE_WINDOW) -> int | None:
    """The step whose loss alone puts the gate's figure beyond `limit`: with that one step's difference
    set to the median difference the gap is within half of it (the rest of the curve agrees). None when
    no single step does: a departure over several steps."""
    n = min(len(losses), len(ref_losses))
    diff = np.asarray(losses[skip:n], dtype=float) - np.asarray(ref_losses[skip:n], dtype=float)
    if diff.size < 2 or not np.all(np.isfinite(diff)):
        return None
    worst = int(np.argmax(np.abs(diff - np.median(diff))))
    calm = diff.copy()
    calm[worst] = np.median(diff)
    w = min(window, diff.size)
    return skip + worst if float(np.max(np.abs(np.convolve(calm, np.ones(w) / w, mode="valid")))) <= limit / 2 else None


def load_records(results_dir) -> list[dict]:
    out = []
    for path in sorted(Path(results_dir).glob("*.json")):
        rec = json.loads(path.read_text())
        if rec.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{path}: schema version {rec.get('schema_version')}, this code reads {SCHEMA_VERSION}")
        out.append(rec)
    return out


EVIDENCE_KINDS = ("seq", "gemm", "variants", "sweep", "repeats", "crosscheck", "parity", "sdpa", "recipe", "ablation", "size")  # folders of results/


def load_evidence(results_dir) -> dict:
    """Every evidence record of a report's results folder by kind, its kernel profiles read by
    today's rules; {"gemm": record or None, every other kind: [...]}; missing kinds are empty."""
    out = {}
    for kind in EVIDENCE_KINDS:
        recs = [kernel_categories.current(r) for r in load_records(Path(results_dir) / kind)]
        out[kind] = (recs[0] if recs else None) if kind == "gemm" else recs
    return out


def decision_records(results_dir) -> list[dict]:
    """What the recommendation rests on: the matrix, the batch sweep, the repeats and the
    parity runs of one report's results folder."""
    base = Path(results_dir)
    return [r for d in (base, base / "sweep", base / "repeats", base / "parity") if d.is_dir()
            for r in load_records(d)]


def loss_noise(records: list[dict]) -> float:
    """How far two processes of the same configuration drift apart on the loss gate's own
    statistic (largest 5-step-average gap after warm-up), the largest over every repeated
    configuration: GPU kernels with atomics are not bitwise repeatable. 0 when nothing repeated."""
    runs: dict = {}
    for r in records:
        if r.get("status") == Status.OK and r.get("variant") in TIMING_VARIANTS and r.get("losses"):
            runs.setdefault((r["stage"], r["batch_size"]), []).append(r)
    gaps = [loss_gap(other["losses"], group[0]["losses"], int(group[0].get("warmup_steps") or 0))
            for group in runs.values() for other in group[1:]]
    gaps = [g for g in gaps if np.isfinite(g)]
    return max(gaps) if gaps else 0.0


def table(records: list[dict], stage_order: list[str], tolerance: float | None = None, noise: float = 0.0):
    """Tidy table, one row per configuration, in stage order, with the comparisons every
    reader asks for: speedup over FP32 and over the previous stage at the same batch, and the
    final-loss difference from the stage's reference (FP32 for the classic five, the vocab
    stage for the levers after them) at the same batch, and the loss gate (loss_gap against the
    tolerance; `noise` is loss_noise: a gap beyond the tolerance by less is 'within noise')."""
    import pandas as pd

    # a key a record lacks (an older record, another kind) is None in its row
    cols = ["stage", "stage_title", "batch_size", "status", "reason", "median_ms", "p10_ms", "p90_ms", "cv",
            "tokens_per_s", "mfu", "peak_precision", "achieved_tflops", "mem_tensors_bytes", "mem_allocator_bytes",
            "mem_device_bytes", "mem_device_sampled_peak_bytes", "final_loss", "sdpa_backend", "world_size",
            "scaling_efficiency", "allreduce_share", "per_gpu_tokens_per_s", "single_gpu_tokens_per_s",
            "one_rank_tokens_per_s", "efficiency_reference", "base_stage", "first_step_s", "warmup_steps"]
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in records], columns=cols)
    df["joules_per_token"] = [(r.get("energy") or {}).get("joules_per_token") for r in records]
    df["avg_power_w"] = [(r.get("energy") or {}).get("avg_power_w") for r in records]
    df["stage_idx"] = df["stage"].map({s: i for i, s in enumerate(stage_order)})
    df = df.sort_values(["stage_idx", "batch_size"]).reset_index(drop=True)
    ok = df["status"].isin(TIMED)
    base = df[(df["stage"] == stage_order[0]) & ok].set_index("batch_size")
    # Never for the multi-GPU stage: its throughput over one GPU's FP32 is no lever's speed-up.
    df["speedup_vs_baseline"] = [
        t / base["tokens_per_s"][b] if b in base.index and ok_ and t and not stages.is_multi_gpu(s) else np.nan
        for s, b, t, ok_ in zip(df["stage"], df["batch_size"], df["tokens_per_s"], ok)]
    losses = {(s, b): f for s, b, f, o in zip(df["stage"], df["batch_size"], df["final_loss"], ok) if o}
    df["loss_ref"] = [stages.get(s).reference if s in stages.STAGES else stage_order[0] for s in df["stage"]]
    # The multi-GPU stage trains with a larger global batch, so its loss is no one's to compare.
    df["loss_delta"] = [
        f - losses[(ref, b)] if not stages.is_multi_gpu(s) and s != ref and f is not None and not pd.isna(f)
        and losses.get((ref, b)) is not None and not pd.isna(losses[(ref, b)]) else np.nan
        for s, b, f, ref in zip(df["stage"], df["batch_size"], df["final_loss"], df["loss_ref"])]
    # The loss gate: every step after warm-up, not only the final window (see loss_gap).
    curves = {(r["stage"], r["batch_size"]): r.get("losses") for r in records
              if r.get("status") in TIMED and r.get("variant") is None}
    df["loss_gap"] = [
        loss_gap(curves.get((s, b)), curves.get((ref, b)), int(w or 0)) if not stages.is_multi_gpu(s) and s != ref else np.nan
        for s, b, ref, w in zip(df["stage"], df["batch_size"], df["loss_ref"], df["warmup_steps"])]
    # What a lever buys is judged against the stage right before it in the registry, at the same
    # batch, and only where that stage was measured: a report that skipped stages (STAGES=) must not
    # credit one lever with several. A multi-GPU stage is judged against one GPU at its setting.
    tps = {(s, b): t for s, b, t, o in zip(df["stage"], df["batch_size"], df["tokens_per_s"], ok) if o}
    df["previous_stage"] = [previous_stage(s) for s in df["stage"]]
    df["speedup_vs_previous"] = [
        t / tps[(p, b)] if o and t and (p, b) in tps else np.nan
        for t, p, b, o in zip(df["tokens_per_s"], df["previous_stage"], df["batch_size"], ok)]
    df["lever_effect"] = [
        (w * e if not (pd.isna(w) or pd.isna(e)) else np.nan) if stages.is_multi_gpu(s) else v
        for s, v, w, e in zip(df["stage"], df["speedup_vs_previous"], df["world_size"], df["scaling_efficiency"])]
    if tolerance is not None:
        df["loss_spike_step"] = [
            spike_step(curves[(s, b)], curves[(ref, b)], int(w or 0), tolerance + noise) if g > tolerance + noise else None
            for s, b, ref, w, g in zip(df["stage"], df["batch_size"], df["loss_ref"], df["warmup_steps"], df["loss_gap"])]
        verdicts = [None if pd.isna(g) else "within" if g <= tolerance else "within noise" if g <= tolerance + noise
                    else "spike" if k is not None else "beyond" for g, k in zip(df["loss_gap"], df["loss_spike_step"])]
        df["loss_verdict"] = verdicts
        df["loss_within_tolerance"] = pd.Series([None if v is None else v not in GATE_FAILS for v in verdicts], dtype=object)
    return df.drop(columns="stage_idx")


def previous_stage(key: str) -> str | None:
    """The stage a lever is added to: its `base`, else the one right before it in the registry
    (none for the first stage and for a multi-GPU stage, which replicates the best single-GPU
    configuration)."""
    if key not in stages.STAGES or stages.is_multi_gpu(key):
        return None
    if stages.STAGES[key].base:
        return stages.STAGES[key].base
    i = stages.ORDER.index(key)
    return stages.ORDER[i - 1] if i else None


def lineage(key: str) -> list[str]:
    """The stages from the first to `key`, each the one the next is added to: the levers a
    configuration of `key` has, in the order they were added."""
    chain = [key]
    while previous_stage(chain[-1]):
        chain.append(previous_stage(chain[-1]))
    return chain[::-1]


def lever_effect(df, key: str) -> dict:
    """What one lever buys in a report, computed once for every view (report, chapters, comparison):
    its effect per batch size (speed-up over the stage right before it; for a multi-GPU stage,
    its throughput over one GPU's), their median, and whether that previous stage was measured."""
    rows = df[(df["stage"] == key) & df["status"].isin(TIMED)]
    values = rows.set_index("batch_size")["lever_effect"].dropna()
    prev = previous_stage(key)
    return {"key": key, "previous": prev, "values": values,
            "median": float(np.median(values)) if len(values) else None,
            "previous_measured": prev is None or bool((df["stage"] == prev).any())}


def verified_stages(df, reference_stages=("fp32",)) -> dict:
    """stage -> whether its loss held: True when every comparison with its reference was within
    tolerance (and there was at least one), False when any was not, None when none was possible.
    A reference stage is verified by definition. `df` is table(..., tolerance)."""
    out = {}
    for s, g in df.groupby("stage", sort=False):
        checks = [v for v in g["loss_within_tolerance"] if v is not None]
        out[s] = True if s in reference_stages else (all(checks) if checks else None)
    return out


def throughputs(records: list[dict]) -> dict:
    """(stage, batch) -> tokens/s of every process that timed it (matrix, sweep, repeats)."""
    out: dict = {}
    for r in records:
        if r.get("status") == Status.OK and r.get("variant") in TIMING_VARIANTS and not stages.is_multi_gpu(r.get("stage")):
            out.setdefault((r["stage"], r["batch_size"]), []).append(r["tokens_per_s"])
    return out


def ranked_configs(records: list[dict], params: dict, eligible=None) -> list[dict]:
    """Single-GPU configurations (matrix and batch sweep) of stages whose loss held against
    their reference wherever it could be compared (verified_stages), fastest first by the
    median over every process that timed them. Batch size is not a numerical lever: a stage
    verified at some batch sizes is trusted at the others. `eligible(record)`, if given,
    further limits the candidates (not the verification)."""
    single = [r for r in records if not stages.is_multi_gpu(r.get("stage")) and r.get("status") == Status.OK
              and r.get("variant") in (None, "batch sweep") and (eligible is None or eligible(r))]
    if not single:
        return []
    order = stages.single_gpu(params["stages"])
    # Verification reads the matrix only (sweep points have no reference at their batch size).
    df = table([r for r in records if r.get("stage") in order and r.get("variant") is None], order,
               params["run"]["loss_tolerance"], loss_noise(records))
    verified = verified_stages(df, (order[0],))
    for key, check in parity.checks(records, params["evidence"]).items():
        verified[key] = verified.get(key) and check["ok"]  # only a parity test that holds lets a tested stage be adopted
    tps = throughputs(records)
    good = [r for r in single if verified.get(r["stage"])]
    return sorted(good, key=lambda r: -float(np.median(tps[(r["stage"], r["batch_size"])])))


def best_config(records: list[dict], params: dict, eligible=None) -> dict | None:
    """The recommended configuration: the fastest of ranked_configs; where another batch size of the
    same stage, timed in several processes, is within the measured noise of it, the one that needs the
    least memory. The record comes back with `processes`: its tokens/s over the processes that timed it."""
    ranked = ranked_configs(records, params, eligible)
    if not ranked:
        return None
    tps = throughputs(records)
    floor = decision_floor(records, tps)
    best = ranked[0]
    same_speed = [r for r in ranked if r["stage"] == best["stage"] and (r is best or len(tps[(r["stage"], r["batch_size"])]) > 1)
                  and within_noise(tps[(r["stage"], r["batch_size"])], tps[(best["stage"], best["batch_size"])], floor,
                                   across_machines(records))]
    pick = min(same_speed or [best], key=lambda r: (r.get("mem_allocator_bytes") or r.get("mem_device_bytes") or 0,
                                                    r["batch_size"]))
    return {**pick, "processes": spread(tps[(pick["stage"], pick["batch_size"])]),
            "chosen_over": None if pick is best else {"stage": best["stage"], "batch_size": best["batch_size"]}}
