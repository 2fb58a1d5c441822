"""What measuring the report cost on its device, as run.json and the records say: the seconds each chapter
took over every run of the folder (resumed ones included), how much of it went to compilation (the first step
of a process that compiled cold, against one that found its graphs in the compile cache), and an estimate of
what measuring it again with a warm cache would take. For whoever plans the next re-measure."""

from __future__ import annotations

import statistics

from lib.core import chapters
from lib.report import export
from lib.report import formats as fmt
from lib.report.evidence_view import none, table
from lib.report.loader import Report
from lib.results import store


def chapter_seconds(run: dict) -> dict:
    """Seconds each chapter took to measure over every run of the folder (earlier runs and resumed ones
    included, a chapter cut by a time budget with its part), in the order first measured."""
    out: dict = {}
    for r in [*run.get("earlier_runs", []), run]:
        for part in ("timings_s", "cut_timings_s"):
            for key, s in (r.get(part) or {}).items():
                if key not in ("html_s", "pdf_s", "total_s", "pdf_error") and isinstance(s, (int, float)):
                    out[key] = out.get(key, 0.0) + s
    return out


def compile_costs(records: list[dict]) -> dict:
    """state -> {processes, first-step seconds, wall seconds} over the records of every folder."""
    out: dict = {}
    for r in records:
        state = (r.get("compile_cache") or {}).get("state") or "not recorded"
        row = out.setdefault(state, {"processes": 0, "first_step_s": 0.0, "wall_s": 0.0, "first_steps": []})
        row["processes"] += 1
        row["first_step_s"] += r.get("first_step_s") or 0.0
        row["wall_s"] += r.get("wall_s") or 0.0
        if r.get("first_step_s"):
            row["first_steps"].append(r["first_step_s"])
    return out


def warm_estimate(total_s: float, costs: dict) -> float | None:
    """Seconds to measure the same records again with every graph in the cache: the cold processes' first steps
    replaced by the median first step of the processes that were warm. None without a warm process."""
    cold, warm = costs.get("cold"), costs.get("warm")
    if not cold or not warm or not warm["first_steps"]:
        return None
    return total_s - cold["first_step_s"] + cold["processes"] * statistics.median(warm["first_steps"])


def _with_first_step(row: dict) -> str:
    """Which of a compile state's processes its first-step figures cover (the plain loop records none)."""
    n = len(row["first_steps"])
    return "the first step of each" if n == row["processes"] else f"the first step of the {n} that record one"


def cost_html(rep: Report) -> str:
    if not rep.run:
        return none("This folder has no run.json: what measuring it cost was not recorded.")
    seconds = chapter_seconds(rep.run)
    titles = {c.key: c.title for c in chapters.order(rep.params.stages, rep.params.chapters or [])}
    total = sum(seconds.values())
    if not total:
        return none("No chapter of this folder's runs recorded its time: what measuring it cost is not known.")
    rows = [  # and a last row for all chapters, 100%
        {"chapter": titles.get(k, k), "seconds": fmt.duration(s), "share": fmt.pct(s / total, 0, "%")}
        for k, s in [*seconds.items(), ("all chapters", total)]
    ]
    records = [rec for _, rec in store.every_record(rep.dir)[0]]
    costs = compile_costs(records)
    cold, warm = costs.get("cold"), costs.get("warm")
    runs = len(rep.run.get("earlier_runs") or []) + 1
    text = f"<p>Measured over {runs} run{'s' if runs > 1 else ''} of the measuring command."
    if cold:
        text += (
            f" {cold['processes']} processes compiled their graphs cold: {_with_first_step(cold)} took "
            f"{fmt.duration(cold['first_step_s'])} s in it, {fmt.pct(cold['first_step_s'] / total, 0, '%')} of the "
            f"{fmt.duration(total)} s the chapters recorded."
        )
    if warm and warm["first_steps"]:
        text += (
            f" {warm['processes']} found them in the compile cache (warm): {_with_first_step(warm)} took "
            f"{fmt.duration(statistics.median(warm['first_steps']), 1)} s in it (median)."
        )
    estimate = warm_estimate(total, costs)
    if estimate is not None:
        text += (
            f" Measured again with the cache warm, the same records would take about {fmt.duration(estimate / 60)} minutes "
            "(an estimate: every cold first step replaced by the warm median)."
        )
    return text + "</p>" + export.html_only_block(table(rows), "Seconds per chapter: a table in the HTML report.")
