"""The spread between machines of one GPU kind, measured from the repository's own repeat sittings.

A sitting is one report folder (reports/<name>/, or an earlier one kept under reports/archive/<name>/): what one
`make report` measured on one machine. Every sitting measured on the same GPU model is a repeat of the others where
it timed the same configuration, which its fingerprint says (lib/results/store.fingerprint: the workload, the
software, the stage's switches and the batch; a process's replicate number left out). For each configuration timed
in two sittings or more, its spread is the range of the sittings' medians over their median; the kind's spread is
the widest of them, as a report's noise floor is the widest process-to-process range. A ratio between two GPUs is
judged against the spread of each GPU's kind (judge). Pure data: lib/report words it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from lib.core import stages
from lib.core.provenance import machine_of
from lib.core.record import SCHEMA_VERSION, Status

ARCHIVE = "archive"  # reports/archive/: earlier sittings, kept whole
# A process whose step times spread wider than this (coefficient of variation) is no steady figure of its machine:
# it is left out, and counted. Compiled steps run at 2-4.5 %; an H100's cold FP8 process at B=16 ran at 7.4 % and
# 10 % slower than the same configuration's steady processes, which alone made a 9.7 % spread of eight sittings.
UNSTEADY_CV = 0.05
REPLICATE = re.compile(r"-(?:repeat-)?r\d+(?=-|$)")  # '...-repeat-r1', '...-recipe: recommended-accum8-r0-...'


def config_key(rec: dict) -> str | None:
    """The configuration a record timed, the same in every sitting and every process: its fingerprint without the
    replicate number. None for a record without a fingerprint (it pairs with nothing)."""
    fp = rec.get("fingerprint")
    return REPLICATE.sub("", fp) if fp else None


def timing(rec: dict) -> bool:
    """A single-GPU timing of a training step: the matrix, its repeats, the batch sweep, the recipe, the variants
    and the leave-one-out (not a parity run, which trains for its loss, nor a multi-GPU job)."""
    return (
        rec.get("schema_version") == SCHEMA_VERSION
        and rec.get("status") == Status.OK
        and rec.get("kind") != "parity"
        and rec.get("stage") in stages.STAGES
        and not stages.is_multi_gpu(rec.get("stage"))
        and isinstance(rec.get("tokens_per_s"), (int, float))
        and config_key(rec) is not None
    )


def folders(root) -> list[Path]:
    """Every report folder under `root` and `root`/archive (one with params.json, environment.json and results/)."""
    root = Path(root)
    candidates = [p for base in (root, root / ARCHIVE) if base.is_dir() for p in sorted(base.iterdir())]
    return [p for p in candidates if (p / "params.json").is_file() and (p / "environment.json").is_file()]


def device_of(folder) -> str | None:
    try:
        return json.loads((Path(folder) / "environment.json").read_text())["device"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_sitting(folder) -> list[dict]:
    """The timings of one sitting (timing), every folder of its results/ but the parity runs'."""
    paths = [p for p in sorted((Path(folder) / "results").rglob("*.json")) if "parity" not in p.parts]
    out = []
    for path in paths:
        try:
            rec = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(rec, dict) and timing(rec):
            out.append(rec)
    return out


def sittings(root, device: str) -> dict[str, list[dict]]:
    """name (its folder under `root`) -> its timings, for every sitting measured on the GPU model `device`."""
    root = Path(root)
    return {f.relative_to(root).as_posix(): read_sitting(f) for f in folders(root) if device_of(f) == device}


def medians(records: list[dict]) -> dict[str, dict]:
    """configuration -> {stage, batch, variant, micro_steps, median: over the processes that timed it, n}."""
    by: dict = {}
    for r in records:
        by.setdefault(config_key(r), []).append(r)
    return {
        key: {
            "stage": recs[0]["stage"],
            "batch": int(recs[0]["batch_size"]),
            "variant": None if recs[0].get("variant") == "repeat" else recs[0].get("variant"),
            "micro_steps": recs[0].get("micro_steps"),
            "median": float(np.median([r["tokens_per_s"] for r in recs])),
            "n": len(recs),
        }
        for key, recs in by.items()
    }


def spread(by_sitting: dict[str, list[dict]]) -> dict:
    """The spread between sittings of one GPU kind (module docstring), from each sitting's timings:
    {sittings: every sitting read, paired: those that share a configuration with another, machines: the distinct
    machines of the paired ones (host / GPU, 'unrecorded' for records made before they were stamped),
    configurations: how many were timed in two sittings or more, unsteady: the processes left out (UNSTEADY_CV), spread: the widest relative range of their
    sittings' medians (None where no configuration was timed twice), widest: that configuration, rows: every such
    configuration, widest first}."""
    steady = {name: [r for r in recs if (r.get("cv") or 0.0) <= UNSTEADY_CV] for name, recs in by_sitting.items()}
    per = {name: medians(recs) for name, recs in steady.items()}
    keys = sorted({k for m in per.values() for k in m})
    rows = []
    for key in keys:
        found = {name: m[key] for name, m in per.items() if key in m}
        if len(found) < 2:
            continue
        values = [v["median"] for v in found.values()]
        first = next(iter(found.values()))
        rows.append(
            {
                **{k: first[k] for k in ("stage", "batch", "variant", "micro_steps")},
                "medians": {name: v["median"] for name, v in found.items()},
                "spread": (max(values) - min(values)) / float(np.median(values)),
            }
        )
    rows.sort(key=lambda r: -r["spread"])
    paired = sorted({name for r in rows for name in r["medians"]})
    machines = {machine_of(r) for name in paired for r in by_sitting[name]}
    return {
        "sittings": sorted(by_sitting),
        "paired": paired,
        "machines": sorted(machines),
        "configurations": len(rows),
        "unsteady": sum(len(by_sitting[n]) - len(steady[n]) for n in by_sitting),
        "spread": rows[0]["spread"] if rows else None,
        "widest": rows[0] if rows else None,
        "rows": rows,
    }


def of_device(root, device: str) -> dict:
    """spread() over every sitting under `root` measured on `device`, with the device named."""
    return {"device": device, **spread(sittings(root, device))}


def judge(ratio: float | None, kinds: list[dict], floor: float | None) -> dict:
    """Whether a ratio between two GPUs lies inside the spread it must clear. `kinds`: the spread() of each GPU's kind;
    `floor`: the larger process-to-process spread of the two reports (None: nothing ran twice). The band is the
    kinds' spreads combined (one kind: its own), or the floor where that is wider; `unmeasured` names the kinds with no repeat sitting, whose spread between machines is
    unknown, so a ratio beyond the band is not shown to be the hardware's there.
    {band, within (None: no band, or no ratio), basis: 'machines' where every kind's spread is measured, else
    'processes' (the floor and any kind measured), unmeasured: devices}."""
    measured = [k["spread"] for k in kinds if k.get("spread") is not None]
    unmeasured = [k.get("device") for k in kinds if k.get("spread") is None]
    # A ratio of two kinds moves with a machine of each: their spreads combine (in quadrature, as independent errors
    # do). Two reports of one kind are what its spread itself measures: that spread alone.
    distinct = {k.get("device"): k["spread"] for k in kinds if k.get("spread") is not None}
    combined = float(np.sqrt(sum(v * v for v in distinct.values()))) if distinct else None
    parts = ([combined] if combined is not None else []) + ([floor] if floor is not None else [])
    band = max(parts) if parts else None
    within = None if band is None or ratio is None or np.isnan(ratio) else bool(abs(ratio - 1) <= band)
    return {
        "band": band,
        "within": within,
        "basis": "machines" if not unmeasured and measured else ("processes" if band is not None else None),
        "unmeasured": unmeasured,
        "kinds": len(distinct),  # how many kinds' spreads the band combines
    }
