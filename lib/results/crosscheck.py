"""The plain-loop cross-check judged: per configuration the plain loop (lib/train/plain_loop.py) ran, the harness's
step time against the plain loop's, the noise that difference is judged against and the verdict."""

from __future__ import annotations

import numpy as np

from lib.core import record
from lib.results import noise

LIMIT = 0.03  # harness vs plain loop beyond this is flagged in the executive summary
MATCHES, WITHIN_NOISE, DIFFERS = "matches", "within noise", "differs"


def _harness(records: list[dict], key: str, batch: int) -> tuple[float | None, float | None]:
    """The harness's step time at a configuration, as the plain loop's is taken (the mean over the
    timed steps), then the median over the processes that timed it; and the largest step-time CV among them."""
    recs = [
        r
        for r in records
        if (r["stage"], r["batch_size"]) == (key, batch)
        and r.get("status") == "ok"
        and r.get("variant") in record.TIMING_VARIANTS
        and r.get("mean_ms")
    ]
    cvs = [r["cv"] for r in recs if r.get("cv") is not None]
    return (float(np.median([r["mean_ms"] for r in recs])) if recs else None), (max(cvs) if cvs else None)


def _plain_noise(rec: dict) -> list[float]:
    """How far the plain loop's own figure may stray, as its process shows it: the CV of its steps timed one by one,
    and how much slower its unsynchronised mean ran than their median (synchronising after every step can only add
    time, so the excess is what disturbed the timed steps: a loaded machine's CPU default showed 11x)."""
    steps = np.asarray(rec.get("synced_step_ms") or [], dtype=float)
    out = [float(steps.std() / steps.mean())] if steps.size > 1 and steps.mean() else []
    if rec.get("ms_per_step") and rec.get("synced_median_ms"):
        out.append(max(0.0, rec["ms_per_step"] / rec["synced_median_ms"] - 1))
    return out


def rows(records: list[dict], crosscheck: list[dict], tps: dict, floor: float | None) -> list[dict]:
    """One row per configuration the plain loop ran (`crosscheck`: its records): both step times, the difference and
    the noise it is judged against: the larger of the report's noise floor (`floor`), the harness's range over its
    processes there (`tps`: decide.throughputs of `records`), and each side's own step-time variation (the CV of its
    steps, and the plain loop's unsynchronised excess). `verdict`: MATCHES (within LIMIT), WITHIN_NOISE (beyond it,
    inside that noise) or DIFFERS."""
    out = []
    for rec in crosscheck:
        key, batch = rec["stage"], rec["batch_size"]
        harness, harness_cv = _harness(records, key, batch)
        ok = rec["status"] == "ok"
        plain = rec.get("ms_per_step") if ok else None
        processes = tps.get((key, batch), [])
        spreads = [floor, harness_cv, *(_plain_noise(rec) if ok else [])]
        spreads += [noise.spread(processes)["spread"]] if len(processes) > 1 else []
        spreads = [x for x in spreads if x is not None]
        diff = harness / plain - 1 if harness and plain else None
        out.append(
            {
                "stage": key,
                "batch_size": batch,
                "harness_ms": harness,
                "plain_ms": plain,
                "plain_synced_ms": rec.get("synced_median_ms"),
                "processes": len(processes),
                "status": rec["status"],
                "difference": diff,
                "noise": max(spreads) if spreads else None,
                "verdict": None
                if diff is None
                else MATCHES
                if abs(diff) <= LIMIT
                else WITHIN_NOISE
                if spreads and abs(diff) <= max(spreads)
                else DIFFERS,
            }
        )
    return out
