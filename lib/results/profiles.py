"""Which kernel profiles the report reads, and their figures: the batch size at which most single-GPU stages have a
profile, a stage's profile at its largest profiled batch, what a profile sums (device kernels or operators' self
time), each category's time and share stage by stage, and the GEMM share of a step. Every profile is read by today's
rules (kernel_categories.current, applied when the report loads). A Report is passed in, not imported."""

from __future__ import annotations

import pandas as pd

from lib.core import kernel_categories, stages
from lib.core.record import TIMED


def has_profile(r: dict | None) -> bool:
    """Whether `r` timed its steps and holds a kernel profile."""
    return bool(r and r["status"] in TIMED and r.get("kernel_profile"))


def unit(profile: dict) -> str:
    """What a profile sums: device kernels, or (on a CPU) operators' self time."""
    return "kernel" if "CUDA" in profile["source"] else "operator self"


def profiled(rep) -> tuple[int | None, dict]:
    """(batch, {stage: its record at that batch or None}) over every single-GPU stage, at the batch
    size at which most stages have a kernel profile (ties: the larger); (None, {}) without one."""
    recs = [r for r in rep.records if has_profile(r) and not stages.is_multi_gpu(r["stage"])]
    if not recs:
        return None, {}
    counts = pd.Series([r["batch_size"] for r in recs]).value_counts()
    batch = max(b for b, c in counts.items() if c == counts.max())
    return batch, {k: rep.rec(k, batch) for k in rep.stage_order if not stages.is_multi_gpu(k)}


def by_category(by: dict) -> dict[str, tuple[list[float], list[float]]]:
    """{category: (each record's busy ms in it, its share of the record's busy time in %)}, 0 for a record
    without a profile, in the order of `by` ({stage: record or None})."""
    return {
        cat: (
            [r["kernel_profile"]["categories"][cat] if has_profile(r) else 0.0 for r in by.values()],
            [kernel_categories.shares(r["kernel_profile"])[cat] * 100 if has_profile(r) else 0.0 for r in by.values()],
        )
        for cat in kernel_categories.CATEGORIES
    }


def classified(profile: dict) -> float | None:
    """The share of the profile's busy time today's rules classified (the rest keeps the categories it was recorded
    with); None where nothing was busy."""
    return 1 - profile["recorded_rules_ms"] / profile["busy_ms"] if profile["busy_ms"] else None


def ranked_percents(profile: dict) -> list[tuple[str, int]]:
    """The categories with time, largest first, as whole percentages of busy time (summing to 100)."""
    shares = kernel_categories.percents(kernel_categories.shares(profile))
    return [(c, v) for c, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v > 0]


def stage_profile(rep, stage: str) -> dict | None:
    """The stage's profiled record at the largest batch size that has one."""
    recs = [r for r in rep.records if r["stage"] == stage and has_profile(r)]
    return max(recs, key=lambda r: r["batch_size"]) if recs else None


def gemm_share(rec: dict | None) -> float | None:
    """The GEMM category's time over the profiled step's busy time; None without a profile."""
    prof = (rec or {}).get("kernel_profile") or {}
    busy = prof.get("busy_ms")
    return prof["categories"].get("GEMM", 0.0) / busy if busy and prof.get("categories") else None
