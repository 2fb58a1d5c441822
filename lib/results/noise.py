"""How far two throughputs may differ by chance: the process-to-process spread of a configuration,
the report's noise floor (the widest such spread) and, where records come from more than one machine,
the spread between machines, which a floor measured on one machine does not cover."""

from __future__ import annotations

import numpy as np

from lib.core import stages
from lib.core.provenance import machine_of
from lib.core.record import TIMING_VARIANTS, Status


def spread(values: list[float]) -> dict:
    """Process-to-process spread of one configuration: median, range, and the range relative
    to the median (0 for a single process: nothing measured)."""
    v = np.asarray(values, dtype=float)
    med = float(np.median(v))
    return {
        "n": int(v.size),
        "median": med,
        "lo": float(v.min()),
        "hi": float(v.max()),
        "spread": float((v.max() - v.min()) / med) if v.size > 1 and med else 0.0,
    }


def another_process(values: list[float], tolerance: float | None) -> bool:
    """The repeats' rule beyond two processes, fixed before any number: another fresh process only where
    those so far differ by more than `tolerance` (None: always)."""
    return tolerance is None or spread(values)["spread"] > tolerance


def noise_floor(groups: dict) -> float | None:
    """The largest relative process-to-process range among the configurations run in several
    processes: the report's measured noise. None when nothing was repeated."""
    spreads = [spread(v)["spread"] for v in groups.values() if len(v) > 1]
    return max(spreads) if spreads else None


def within_noise(a: list[float], b: list[float], floor: float | None, across: float | None = 0.0) -> bool | None:
    """Whether the ratio of two configurations' median throughputs lies inside the measured
    noise: the larger of their own process-to-process ranges (the report's noise floor for one
    measured only once) and, for records of several machines, `across` (the spread between them;
    None: unknown). None when no noise was measured or the machines' offset is unknown."""
    width = band(a, b, floor, across)
    if width is None:
        return None
    ratio = float(np.median(a)) / float(np.median(b))
    return bool(abs(ratio - 1) <= width)


def band(a: list[float], b: list[float], floor: float | None, across: float | None = 0.0) -> float | None:
    """The noise two configurations' ratio is judged against (within_noise); None where it is unknown."""
    bands = [spread(v)["spread"] if len(v) > 1 else floor for v in (a, b)] + ([across] if across != 0.0 else [])
    return None if any(x is None for x in bands) else max(bands)


def machine_spread(records: list[dict]) -> dict:
    """{machines: how many machines timed the records, shared: configurations timed on more than one,
    spread: the widest relative range of those configurations' per-machine medians (None where the
    records come from several machines but no configuration was timed on two: the offset is unknown)}."""
    by: dict = {}
    for r in records:
        if (
            r.get("status") == Status.OK
            and r.get("variant") in TIMING_VARIANTS
            and not stages.is_multi_gpu(r.get("stage"))
        ):
            by.setdefault((r["stage"], r["batch_size"]), {}).setdefault(machine_of(r), []).append(r["tokens_per_s"])
    machines = {m for d in by.values() for m in d}
    shared = [[float(np.median(v)) for v in d.values()] for d in by.values() if len(d) > 1]
    spreads = [(max(m) - min(m)) / float(np.median(m)) for m in shared]
    return {
        "machines": len(machines),
        "shared": len(shared),
        "spread": max(spreads) if spreads else (0.0 if len(machines) <= 1 else None),
    }


def across_machines(records: list[dict]) -> float | None:
    """The spread between machines that a comparison must also clear (0 for one machine; None: unknown)."""
    spread_ = machine_spread(records)
    return spread_["spread"] if spread_["machines"] > 1 else 0.0


def decision_floor(records: list[dict], groups: dict) -> float | None:
    """The noise a verdict or a choice is judged against: the report's floor (noise_floor of `groups`),
    widened to the spread between machines where the records come from several; None (nothing can be
    judged) where that spread is unknown."""
    floor, machines = noise_floor(groups), machine_spread(records)
    if machines["machines"] <= 1:
        return floor
    if machines["spread"] is None:
        return None
    return max(floor or 0.0, machines["spread"])


def twin_drift(ablation: list[dict], tps: dict) -> dict | None:
    """The drift between the leave-one-out's processes and the ones it is compared with, where the run shows it: a
    row without a lever whose switches are those of a stage timed at the same batch (without the loss-only forward,
    the loss-only stage is the BF16 residual stream's) is one configuration timed twice, apart in time. The widest
    such gap {gap, lever, stage, batch}, or None without a twin. A floor measured between processes run back to
    back does not cover it (reports/h200-x2: the same configuration 1.2 % apart, against a 0.86 % floor)."""

    def switches(stage, overrides=None):
        return {**{s: getattr(stage, s) for s in stages.SWITCHES}, **(overrides or {})}

    gaps = []
    for r in ablation:
        if r.get("status") != Status.OK or r.get("stage") not in stages.STAGES:
            continue
        mine = switches(stages.get(r["stage"]), r.get("stage_overrides"))
        for key in stages.single_gpu(list(stages.STAGES)):
            runs = tps.get((key, r["batch_size"]))
            if runs and key != r["stage"] and switches(stages.get(key)) == mine:
                gap = abs(r["tokens_per_s"] / float(np.median(runs)) - 1)
                gaps.append({"gap": gap, "lever": r.get("variant", ""), "stage": key, "batch": r["batch_size"]})
    return max(gaps, key=lambda g: g["gap"]) if gaps else None
