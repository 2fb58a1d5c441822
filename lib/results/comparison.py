"""A comparison's decisions, judged once: every ratio of one GPU's figure over the first GPU's, against the spread
that applies to a ratio of two machines (the spread between machines of each GPU's kind and the larger of the two
reports' process-to-process floors: machine_spread.judge); each GPU's own word for each lever (its report's
decisions, never a rule of the comparison's); and the price ratio at which a GPU stops paying against the first.
lib/report/compare*.py lay it out and judge nothing."""

from __future__ import annotations

from lib.core import stages
from lib.results import machine_spread, recipe_decision

FILE = "decisions.json"  # beside the comparison's report.html, as a report folder's


def pair_floor(floors: dict[str, float | None], a: str, b: str) -> float | None:
    """The larger of two reports' noise floors; None where either ran no configuration twice."""
    both = [floors[a], floors[b]]
    return None if None in both else max(both)


def compute(folders: dict[str, dict]) -> dict:
    """The comparison of `folders` ({name: {"decided": its decisions.json, "spread": machine_spread.of_device of its
    GPU kind, "stages": its stage order, "same_batch": {stage: {batch: tokens/s}}}}, the first the basis of every ratio), as plain data."""
    names = list(folders)
    first = names[0]
    spreads = {n: f["spread"] for n, f in folders.items()}
    floors = {n: f["decided"].get("noise_floor") for n, f in folders.items()}

    def judged(n: str, ratio: float | None) -> dict:
        return machine_spread.judge(ratio, [spreads[first], spreads[n]], pair_floor(floors, first, n))

    recipes = {n: f["decided"].get("recipe") or {} for n, f in folders.items()}
    pairs = {}
    for n in names[1:]:
        sides = {}
        for side in ("recipe", "canonical"):
            mine, theirs = recipes[n].get(side), recipes[first].get(side)
            ratio = mine["median"] / theirs["median"] if mine and theirs else None
            sides[side] = {"ratio": ratio, **judged(n, ratio)} if ratio is not None else None
        pairs[n] = {
            **sides,
            "band": judged(n, 1.0),  # the band a ratio of the two must leave, whatever its value
            "floor": pair_floor(floors, first, n),
            "break_even": recipe_decision.price_break_even(recipes[first], recipes[n]),
        }
    return {
        "names": names,
        "spreads": spreads,
        "floors": floors,
        "pairs": pairs,
        "same_batch": same_batch(folders, judged),
        "levers": levers(folders),
    }


def same_batch(folders: dict[str, dict], judged) -> list[dict]:
    """Per single-GPU stage every GPU timed at a common batch: tokens/s of each at the largest such batch, each GPU
    over the first, and that ratio judged (`within`: None where no spread is measured; `band`)."""
    names, rows = list(folders), []
    for key in stages.single_gpu(stages.ORDER):
        timed = [folders[n]["same_batch"].get(key) or {} for n in names]
        common = set.intersection(*(set(t) for t in timed))
        if not common:
            continue
        b = max(common)
        tok = {n: t[b] for n, t in zip(names, timed)}
        ratio = {n: tok[n] / tok[names[0]] for n in names[1:]}
        verdict = {n: judged(n, ratio[n]) for n in names[1:]}
        rows.append(
            {
                "stage": key,
                "batch": b,
                "tokens_per_s": tok,
                "ratio": ratio,
                "within": {n: v["within"] for n, v in verdict.items()},
                "band": {n: v["band"] for n, v in verdict.items()},
            }
        )
    return rows


def levers(folders: dict[str, dict]) -> list[dict]:
    """One row per lever stage after the baseline that any report holds: each GPU's decision and reason (its own
    decisions.json's; None and 'not measured' where it has no row for it) and whether the GPUs decide it
    differently."""
    rows = []
    for key in stages.single_gpu(stages.ORDER)[1:]:
        if not any(key in f["stages"] for f in folders.values()):
            continue
        words = {}
        for n, f in folders.items():
            row = next((r for r in f["decided"].get("levers") or [] if r["stage"] == key), None)
            words[n] = [row["decision"], row["reason"] or ""] if row else [None, "not measured"]
        rows.append({"stage": key, "words": words, "differs": len({d for d, _ in words.values()} - {None}) > 1})
    return rows
