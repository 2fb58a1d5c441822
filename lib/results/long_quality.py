"""The long quality test's records read as one verdict: each seed's lever run paired with its reference run (same
seed, weights and data order, on the long corpus), the reference's own held-out curve (the mean over its seeds), the
paired spread at every point of that curve, and the lever judged in time to the same loss (time_to_loss.judge)."""

from __future__ import annotations

import dataclasses

import numpy as np

from lib.core.record import Status
from lib.results import time_to_loss

VARIANT = "long test"  # the records' variant: lib/run/long_test.py writes them, nothing else reads them as parity


def _runs(records: list[dict], stage: str, batch: int) -> dict[int, dict]:
    return {
        r["seed_offset"]: r
        for r in records
        if r.get("variant") == VARIANT
        and r["stage"] == stage
        and r["batch_size"] == batch
        and r["status"] == Status.OK
        and r.get("held_out_curve")
    }


def pairs(records: list[dict], lever: str, reference: str, batch: int) -> dict | None:
    """The paired seeds of lever against reference: their held-out differences at the horizon, the reference's mean
    held-out curve, and the paired spread (sd of the differences over seeds) at each point of it; None before two
    seeds have both sides."""
    own, refs = _runs(records, lever, batch), _runs(records, reference, batch)
    seeds = sorted(own.keys() & refs.keys())
    if len(seeds) < 2:
        return None
    steps = [p[0] for p in refs[seeds[0]]["held_out_curve"]]
    ref_curve = np.array([[p[1] for p in refs[s]["held_out_curve"]] for s in seeds])
    lever_curve = np.array([[p[1] for p in own[s]["held_out_curve"]] for s in seeds])
    diffs_at = lever_curve - ref_curve
    first = refs[seeds[0]]
    return {
        "seeds": seeds,
        "diffs": [float(d) for d in diffs_at[:, -1]],
        "steps": steps,
        "reference_curve": [float(v) for v in ref_curve.mean(axis=0)],
        "spread": [{"step": s, "sd": float(sd)} for s, sd in zip(steps, diffs_at.std(axis=0, ddof=1))],
        "horizon_step": steps[-1],
        "horizon_tokens": steps[-1] * batch * first["seq_len"],
        "passes": first.get("passes"),
        "held_out_tokens": first.get("held_out_tokens"),
    }


def verdict(
    records: list[dict], lever: str, reference: str, batch: int, speedup: float, speed_noise: float
) -> dict | None:
    """The lever's verdict in time to the same loss (time_to_loss.judge) with what it rests on; None before two
    paired seeds."""
    p = pairs(records, lever, reference, batch)
    if p is None:
        return None
    v = time_to_loss.judge(
        speedup,
        speed_noise,
        p["steps"],
        p["reference_curve"],
        p["horizon_step"],
        p["diffs"],
        horizon_tokens=p["horizon_tokens"],
    )
    return {
        "lever": lever,
        "reference": reference,
        "batch": batch,
        "speedup": speedup,
        **p,
        **dataclasses.asdict(v),
        "measured_by": measured_by(judged_runs(records, [{"lever": lever, "reference": reference, **p}], batch)),
    }


def judged_runs(records: list[dict], verdicts: list[dict], batch: int | None = None) -> list[dict]:
    """The runs the verdicts rest on: both sides' at their paired seeds, each run once (one reference's runs serve
    several tests). A run no verdict pairs yet (a seed waiting for its other side) is not among them."""
    used: dict[tuple, dict] = {}
    for v in verdicts:
        for stage in (v["lever"], v["reference"]):
            for seed, r in _runs(records, stage, batch or v["batch"]).items():
                if seed in v["seeds"]:
                    used[(stage, r["batch_size"], seed)] = r
    return list(used.values())


def measured_by(runs: list[dict]) -> dict:
    """Where the test's runs were measured, from their own provenance: the commits, the device, how many machines
    (hosts) and GPUs (its seeds may span sittings, and a report reads the test as its own evidence, not the
    sitting's)."""
    prov = [r.get("provenance") or {} for r in runs]
    return {
        "commits": sorted({p["commit"][:7] for p in prov if p.get("commit")}),
        "device": next((p["device"] for p in prov if p.get("device")), None),
        "machines": len({p.get("host_id") or p.get("gpu_uuid") for p in prov} - {None}),  # hosts
        "gpus": len({p.get("gpu_uuid") or p.get("host_id") for p in prov} - {None}),  # a host of four runs four at once
        "gpu_seconds": sum(r.get("wall_s") or 0 for r in runs) or None,  # what the runs took, one GPU each
    }
