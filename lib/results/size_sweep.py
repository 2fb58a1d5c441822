"""The size sweep's figures (lib/run/size_sweep.py measured them): per model preset, each FP8 form's median tokens/s
over the same preset without FP8, the noise band each preset's ratio must leave to count, and the crossover, the
smallest size from which a form is faster beyond that band at every larger one. Judged by decisions.compute (decided:
decisions.json's `size_sweep`, which the chapter lays out) and by the FP8 claims (lib/results/claim_figures.py), so
both rest on one computation."""

from __future__ import annotations

import numpy as np

from lib.core import config, record, stages
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
