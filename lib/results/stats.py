"""The statistics a record carries: step-time percentiles, MFU, the final loss, and the loss gate's
figure (the largest moving-average gap to the reference) with the run-to-run noise it is judged against."""

from __future__ import annotations

import math

import numpy as np

from lib.core.record import TIMING_VARIANTS, Status


def fill_timing(rec: dict, times_ms: list[float], tokens_per_step: int) -> None:
    t = np.asarray(times_ms, dtype=float)
    median = float(np.median(t))
    rec.update(
        step_ms=[float(v) for v in t],
        median_ms=median,
        p10_ms=float(np.percentile(t, 10)),
        p90_ms=float(np.percentile(t, 90)),
        mean_ms=float(t.mean()),
        cv=float(t.std(ddof=1) / t.mean()) if t.size > 1 else 0.0,
        tokens_per_step=tokens_per_step,
        tokens_per_s=tokens_per_step / (median / 1e3),
    )


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


def loss_noise(records: list[dict]) -> float:
    """How far two processes of the same configuration drift apart on the loss gate's own
    statistic (largest 5-step-average gap after warm-up), the largest over every repeated
    configuration: GPU kernels with atomics are not bitwise repeatable. 0 when nothing repeated."""
    widest = loss_noise_at(records)
    return widest[0] if widest else 0.0


def loss_noise_at(records: list[dict]) -> tuple[float, str, int] | None:
    """loss_noise and the configuration it comes from: (gap, stage, batch size), None when nothing repeated."""
    runs: dict = {}
    for r in records:
        if r.get("status") == Status.OK and r.get("variant") in TIMING_VARIANTS and r.get("losses"):
            runs.setdefault((r["stage"], r["batch_size"]), []).append(r)
    gaps = [
        (loss_gap(other["losses"], group[0]["losses"], int(group[0].get("warmup_steps") or 0)), *key)
        for key, group in runs.items()
        for other in group[1:]
    ]
    gaps = [g for g in gaps if np.isfinite(g[0])]
    return max(gaps, key=lambda g: g[0]) if gaps else None


def mfu_bf16_of(params, mfu, precision) -> float | None:
    """An MFU quoted against the stage's own precision's peak, restated against the bf16 dense
    peak, so every stage reads on one scale (an FP32 stage's MFU against the fp32 peak looks high)."""
    peaks = params.peak_tflops or {}
    if mfu is None or mfu != mfu or not peaks.get("bf16") or not peaks.get(precision):
        return None
    return float(mfu) * peaks[precision] / peaks["bf16"]
