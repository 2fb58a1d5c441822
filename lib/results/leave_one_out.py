"""The leave-one-out ablation as data: each lever of the recipe switched off alone (lib/run/recipe.py measures it),
its worth against the configuration with every lever and whether that worth lies within the measured noise."""

from __future__ import annotations

import numpy as np

from lib.core import levers, provenance, record, stages
from lib.results import decide, noise

NOT_MEASURED = "not_measured"  # the status of a row whose run has no record (a run cut off before it)


def leave_one_out(records: list[dict], ablation: list[dict]) -> tuple[dict | None, list[dict]]:
    """The configuration with every lever (its record with `processes`, the spread of every process that timed it)
    and, per lever removed, {lever, stage (the report's stage that adds it), record, worth: the configuration's median
    tokens/s over the one without it, minus 1 (None where that did not run), within_noise (None where the two were
    timed on different machines and their offset is unknown)}; a lever of the configuration without a record is a
    row with status not_measured."""
    if not ablation:
        return None, []
    key, batch = ablation[0]["stage"], ablation[0]["batch_size"]
    tps = decide.throughputs(records)
    runs = tps.get((key, batch)) or []
    full = next(
        (
            r
            for r in records
            if (r["stage"], r["batch_size"]) == (key, batch) and r.get("variant") in (None, record.SWEEP)
        ),
        {"stage": key, "batch_size": batch},
    )
    full = {**full, "processes": noise.spread(runs) if runs else None}
    floor, drift = noise.noise_floor(tps), (noise.twin_drift(ablation, tps) or {}).get("gap", 0.0)
    timed_on = {
        provenance.machine_of(r)
        for r in records
        if (r["stage"], r["batch_size"]) == (key, batch) and r.get("status") == record.Status.OK
    }
    chain = [stages.get(k) for k in decide.lineage(key)]
    rows = []
    for r in ablation:
        ran = bool(runs) and r.get("status") == record.Status.OK
        same_machine = {provenance.machine_of(r)} == timed_on
        rows.append(
            {
                "lever": r.get("lever") or r.get("variant", "").removeprefix("without "),
                "record": r,
                "worth": float(np.median(runs)) / r["tokens_per_s"] - 1 if ran else None,
                "within_noise": noise.within_noise(runs, [r["tokens_per_s"]], floor, drift if same_machine else None)
                if ran
                else None,
            }
        )
    done = {row["lever"] for row in rows}
    rows += [
        {
            "lever": name,
            "record": {"status": NOT_MEASURED, "reason": "not measured: no record of this run"},
            "worth": None,
        }
        for name in levers.levers_of(stages.get(key))
        if name not in done
    ]
    for row in rows:
        added = levers.introduced_by(row["lever"], chain)
        row["stage"] = added.key if added else None
    return full, rows


# What a view shows of a leave-one-out run: its configuration, outcome, speed, memory and when it finished
LOO_FIELDS = (
    "stage",
    "batch_size",
    "status",
    "reason",
    "tokens_per_s",
    "mem_allocator_bytes",
    "finished_at",
    "processes",
)


def _slim(rec: dict | None) -> dict | None:
    """A record as decisions.json keeps it for the views: LOO_FIELDS alone (its losses and clocks stay in results/)."""
    return None if rec is None else {k: rec[k] for k in LOO_FIELDS if k in rec}


def kept(loo: tuple[dict | None, list[dict]]) -> dict:
    """leave_one_out.leave_one_out's configuration with every lever and its rows as decisions.json keeps them."""
    full, rows = loo
    return {"full": _slim(full), "rows": [{**r, "record": _slim(r["record"])} for r in rows]}
