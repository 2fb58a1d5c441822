"""The size sweep's figures (lib/run/size_sweep.py measured them): per model preset, each FP8 form's median tokens/s
over the same preset without FP8, the noise band each preset's ratio must leave to count, and the crossover, the
smallest size from which a form is faster beyond that band at every larger one. Judged by decisions.compute (decided:
decisions.json's `size_sweep`, which the chapter lays out) and by the FP8 claims (lib/results/claim_figures.py), so
both rest on one computation."""

from __future__ import annotations

import numpy as np

from lib.core import config, record, stages
from lib.results import profiles
from lib.results.noise import noise_floor

WITHOUT_FP8 = stages.WITHOUT_FP8  # the variant of each preset's reference point


def _size(rec: dict) -> tuple:
    shape = config.presets().get(rec.get("model"), {})
    return (shape.get("n_layer", 0) * shape.get("n_embd", 0) ** 2, rec.get("model") or "")


def points(size_records: list[dict]) -> dict[str, dict[str, list[dict]]]:
    """{preset: {variant: its records, one per process}}, presets smallest first, without FP8 first."""
    out: dict[str, dict[str, list[dict]]] = {}
    for r in sorted(size_records, key=lambda r: (_size(r), r.get("variant") != WITHOUT_FP8)):
        out.setdefault(r.get("model") or "?", {}).setdefault(r.get("variant") or "?", []).append(r)
    return out


def ran(recs: list[dict]) -> list[float]:
    """The tokens/s of the processes that timed a point."""
    return [r["tokens_per_s"] for r in recs if r["status"] in record.TIMED]


def spread(recs: dict[str, list[dict]]) -> float | None:
    """A preset's own noise: the widest range among its repeated points."""
    return noise_floor({v: ran(rs) for v, rs in recs.items()})


def bands(size_records: list[dict], floor: float | None) -> dict[str, float | None]:
    """{preset: the band its ratios must leave to count}. Noise depends on the step's length (short steps at a small
    batch spread wider between processes), so a preset whose points ran in several processes is judged by their
    widest range, any other by the widest range of the sweep; never by less than the report's floor (`floor`). None
    where nothing was repeated."""
    pts = points(size_records)
    sweep = noise_floor({(p, v): ran(rs) for p, vs in pts.items() for v, rs in vs.items()})
    out = {}
    for preset, recs in pts.items():
        own = spread(recs)
        known = [x for x in (floor, own if own is not None else sweep) if x is not None]
        out[preset] = max(known) if known else None
    return out


def speedups(size_records: list[dict]) -> dict[str, list[tuple[str, float | None, str | None]]]:
    """{FP8 form: [(preset, its median tokens/s over the same preset's without-FP8 median, or None,
    and why not when None)]}, presets smallest first."""
    out: dict[str, list] = {}
    for preset, recs in points(size_records).items():
        base = ran(recs.get(WITHOUT_FP8, []))
        for variant, rs in recs.items():
            if variant == WITHOUT_FP8:
                continue
            if ran(rs) and base:
                out.setdefault(variant, []).append((preset, float(np.median(ran(rs)) / np.median(base)), None))
            else:
                why = rs[0] if not ran(rs) else (recs.get(WITHOUT_FP8) or [None])[0]
                text = (
                    f"{why['status'].replace('_', ' ')}" + (f": {why['reason']}" if why.get("reason") else "")
                    if why
                    else "its without-FP8 point was not measured"
                )
                out.setdefault(variant, []).append((preset, None, text))
    return out


def crossover(series: list[tuple[str, float | None, str | None]], band: dict[str, float | None]) -> dict:
    """Where an FP8 form starts to pay: {"from": the smallest preset from which it is faster beyond
    its size's band (`band`: preset -> relative noise) at that size and every larger measured one, or
    None; "wins", "ties", "losses": the presets of each kind; "unmeasured"; "ratios"}. Without a
    measured band a ratio above 1 counts as a win, and the statement says the noise was not measured."""
    measured = [(p, s) for p, s, _ in series if s is not None]
    kind = {
        p: ("win" if s > 1 + (band.get(p) or 0.0) else "loss" if s < 1 - (band.get(p) or 0.0) else "tie")
        for p, s in measured
    }
    start = None
    for i, (p, _) in enumerate(measured):
        if all(kind[q] == "win" for q, _ in measured[i:]):
            start = p
            break
    return {
        "from": start,
        "wins": [p for p, _ in measured if kind[p] == "win"],
        "ties": [p for p, _ in measured if kind[p] == "tie"],
        "losses": [p for p, _ in measured if kind[p] == "loss"],
        "unmeasured": [p for p, s, _ in series if s is None],
        "ratios": dict(measured),
    }


def decided(size_records: list[dict], floor: float | None) -> dict | None:
    """The size sweep judged once (None where it was not measured): {"bands": each preset's band (bands), "source":
    where each band comes from ("own": its repeated points, "floor": the report's noise floor, "sweep": the sweep's
    widest range), "crossover": {FP8 form: its crossover (crossover)}}."""
    pts = points(size_records)
    if not pts:
        return None
    band = bands(size_records, floor)
    return {
        "bands": band,
        "source": {
            p: "own" if spread(pts[p]) is not None and b != floor else "floor" if b == floor else "sweep"
            for p, b in band.items()
        },
        "crossover": {form: crossover(series, band) for form, series in speedups(size_records).items()},
    }


def apart(recs: dict[str, list[dict]], form: str) -> tuple[float, float, float] | None:
    """A point of `form` timed in several processes, as is its preset's without FP8 (`recs`: {variant: records}): its
    slowest process's tokens/s over the fastest without FP8's, minus 1, and those two tokens/s; None otherwise."""
    mine, base = ran(recs.get(form, [])), ran(recs.get(WITHOUT_FP8, []))
    if len(mine) > 1 and len(base) > 1:
        return min(mine) / max(base) - 1, min(mine), max(base)
    return None


def memory_ratios(size_records: list[dict], form: str) -> list[tuple[str, float]]:
    """[(preset, the form's largest allocator peak over the without-FP8 point's)], where both ran and have one."""
    out = []
    for preset, recs in points(size_records).items():
        mem = [
            max((r.get("mem_allocator_bytes") or 0) for r in recs.get(v, []) if r["status"] in record.TIMED)
            if ran(recs.get(v, []))
            else 0
            for v in (form, WITHOUT_FP8)
        ]
        if all(mem):
            out.append((preset, mem[0] / mem[1]))
    return out


def point_figures(recs: list[dict]) -> dict:
    """A point's figures over the processes that timed it (`recs`, one record a process): "tokens_per_s" (each
    process's), the medians of "ms", "mfu" and "gemm_share" (of the profiled step's busy time) and the largest
    allocator peak, "mem"; None where no process has the figure."""
    timed = [r for r in recs if r["status"] in record.TIMED]
    mfu = [r["mfu"] for r in timed if r.get("mfu") is not None]
    mem = [r.get("mem_allocator_bytes") for r in timed if r.get("mem_allocator_bytes")]
    shares = [x for x in map(profiles.gemm_share, recs) if x is not None]
    return {
        "tokens_per_s": ran(recs),
        "ms": np.median([r["median_ms"] for r in timed]) if timed else None,
        "mfu": np.median(mfu) if mfu else None,
        "mem": max(mem) if mem else None,
        "gemm_share": np.median(shares) if shares else None,
    }


def beside_matrix(records: list[dict], key: str, base: str, recs: list[dict], batch: int) -> dict | None:
    """A sweep point of stage `key` (`recs`: its processes, at `batch`) beside the stage matrix (`records`): {"ratios":
    [(B, the stage's tokens/s over `base`'s)] at every batch both timed, "ms": the point's median step, "longer_than":
    (the smallest larger batch at which the matrix timed the stage's step shorter, that step's ms) or None}; None where
    no batch has both."""
    matrix = {r["batch_size"]: r for r in records if r["stage"] == key and r["status"] in record.TIMED}
    under = {r["batch_size"]: r for r in records if r["stage"] == base and r["status"] in record.TIMED}
    both = sorted(set(matrix) & set(under))
    if not both:
        return None
    ms = float(np.median([r["median_ms"] for r in recs if r["status"] in record.TIMED]))
    slower = [x for x in sorted(matrix) if x > batch and matrix[x]["median_ms"] < ms]
    return {
        "ratios": [(x, matrix[x]["tokens_per_s"] / under[x]["tokens_per_s"]) for x in both],
        "ms": ms,
        "longer_than": (slower[0], matrix[slower[0]]["median_ms"]) if slower else None,
    }
