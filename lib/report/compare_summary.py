"""*The comparison's first lines, and GPT-2's global batch*: its title with a line a GPU on what it trains at against
the first (headline), and each GPU's recipe (its report's recommended stage at a micro-batch that divides the
batch, with its accumulation steps) beside the canonical trainer, both against the first GPU's (section 1)."""

from __future__ import annotations

import html

import pandas as pd

from lib.core import stages
from lib.report import compare, frontier_view, loader
from lib.report import formats as fmt
from lib.report.compare import decisions_table
from lib.report.compare_view import NOT_MEASURED_CELL, spread_words, verdict_words


def recipe_table(reps: dict[str, loader.Report]) -> pd.DataFrame:
    """Per GPU, its report's recipe at GPT-2's global batch: the recommended stage with its accumulation steps and
    the canonical trainer in the plain loop, each the median over its processes, their ratio, and each against
    the first GPU's same row (the configuration one would train with, where the stage table has micro-batches)."""
    rows = []
    for name, rep in reps.items():
        sides = {r["role"]: r for r in frontier_view.recipe_rows(rep)}
        best, plain = sides.get("recommended"), sides.get("baseline")
        rows.append(
            {
                "gpu": name,
                "configuration": f"{stages.get(best['stage']).title}, {frontier_view.micro_steps_text(best)}"
                if best
                else None,
                "recipe": best,
                "plain": plain,
                "ratio": best["median"] / plain["median"] if best and plain else None,
            }
        )
    first = rows[0] if rows else None
    for row in rows:
        for side in ("recipe", "plain"):
            mine, theirs = row[side], first[side]
            row[f"{side} vs first"] = mine["median"] / theirs["median"] if mine and theirs else None
    return pd.DataFrame(rows)


def recipe_html(reps) -> str:
    """Each GPU's recipe at GPT-2's global batch and the canonical trainer beside it, and both against the first
    GPU: what a team would train with, where the stage table's rows are micro-batches."""
    t, names = recipe_table(reps), list(reps)
    if t.empty or not any(isinstance(v, dict) for v in t["recipe"]):
        return "<p>No report compared here measured the recipe at GPT-2's global batch.</p>"

    def cell(side) -> str:
        return f"{side['median']:,.0f}<br><small>{side['n']} processes, {side['min']:,.0f}–{side['max']:,.0f}</small>"

    body = ""
    for r in t.to_dict("records"):
        ratios = (r["ratio"], r["recipe vs first"], r["plain vs first"])
        body += (
            f"<tr><td>{r['gpu']}</td><td>{html.escape(r['configuration'] if isinstance(r['configuration'], str) else '')}</td>"
            + "".join(
                f"<td>{cell(r[side]) if isinstance(r[side], dict) else NOT_MEASURED_CELL}</td>"
                for side in ("recipe", "plain")
            )
            + "".join(f"<td>{f'{v:.3f}×' if v is not None and pd.notna(v) else ''}</td>" for v in ratios)
            + "</tr>"
        )
    head = (
        "<tr><th>GPU</th><th>its recipe</th><th>recipe tok/s</th><th>canonical trainer tok/s</th>"
        f"<th>× canonical</th><th>recipe vs {names[0]}</th><th>canonical vs {names[0]}</th></tr>"
    )
    ev = next(iter(reps.values())).params.evidence
    return (
        f'<table class="matrix keep-together"><thead>{head}</thead><tbody>{body}</tbody></table>'
        f'<p class="note">Each GPU trained as GPT-2 is, one update per {ev.global_batch_tokens:,} tokens: its '
        "report's recipe, the recommended stage at a micro-batch that divides that batch (each report's page 1 "
        "says which, and why where it is not the recommended one), with the accumulation steps that reach it; and the canonical trainer "
        f"({stages.get(ev.baseline.stage).title} at B={ev.baseline.batch_size} in a plain nanoGPT-form loop), in "
        f"the same sitting; {frontier_view.RECIPE_BASIS}; medians over processes, their range beside them. Spread "
        f"between machines of one kind: {spread_words(list(compare.machine_spreads(reps).values()))}.</p>"
    )


def lead_html(reps) -> str:
    """Each GPU's lead over its canonical trainer in parts (waterfall.beyond_canonical): the levers the recipe adds
    after the canonical trainer's stage, each by its matrix ratio, and the rest; where two GPUs' leads differ, the
    columns show which part moved."""
    parts = {n: rep.decided.get("beyond_canonical") for n, rep in reps.items()}
    parts = {n: p for n, p in parts.items() if p}
    if not parts:
        return ""
    titles = list(dict.fromkeys(lv["title"] for p in parts.values() for lv in p["levers"]))

    def part(p: dict, title: str) -> str:
        lv = next((lv for lv in p["levers"] if lv["title"] == title), None)
        return f"{fmt.times(lv['ratio'], 3)} <small>B={lv['batch']}</small>" if lv else "—"

    body = "".join(
        f"<tr><td>{n}</td><td>{fmt.times(reps[n].decided['recipe']['ratio'], 3)}</td>"
        + "".join(f"<td>{part(p, t)}</td>" for t in titles)
        + f"<td>{fmt.times(p['rest'], 3)}</td></tr>"
        for n, p in parts.items()
    )
    head = "".join(f"<th>{html.escape(t)}</th>" for t in titles)
    canonical = stages.get(next(iter(parts.values()))["canonical_stage"]).title
    return (
        f'<table class="matrix keep-together"><thead><tr><th>GPU</th><th>× canonical</th>{head}<th>the rest</th>'
        f"</tr></thead><tbody>{body}</tbody></table>"
        f'<p class="note">The recipe\'s lead over the canonical trainer in parts, which multiply to it: each lever the '
        f"recipe adds after {canonical} (the canonical trainer's stage), by its speed-up over the stage before it in "
        "the matrix at the batch named; the rest is the recipe's micro-batch and accumulation steps, and this "
        "harness against the plain loop.</p>"
    )


def micro(row: dict) -> str:
    """A recipe row's micro-batch and accumulation steps: 'B=128 × 4'."""
    return f"B={row['recipe']['batch']} × {row['recipe']['micro_steps']}"


def headline(reps) -> list[str]:
    """The comparison in a line a GPU: what it trains at against the first GPU, by each report's recipe and by the
    canonical trainer (section 1 has both), each ratio judged against the spread between machines (compare.judge);
    and whether the GPUs decide every lever alike."""
    t, names = recipe_table(reps), list(reps)
    rows = {r["gpu"]: r for r in t.to_dict("records")} if not t.empty else {}
    decisions = decisions_table(reps)
    differ = [r["stage"] for r in decisions.to_dict("records") if r["differs"]] if not decisions.empty else []
    first, out = rows.get(names[0]) or {}, []
    for n in names[1:]:
        r = rows.get(n) or {}
        if not (isinstance(r.get("recipe"), dict) and isinstance(first.get("recipe"), dict)):
            continue
        ratios = [r["recipe vs first"]]
        line = (
            f"**{n} against {names[0]}**, each trained as GPT-2 is: {ratios[0]:.3f}× by its own recipe, {micro(r)} "
            f"against {micro(first)} ({r['recipe']['median']:,.0f} against {first['recipe']['median']:,.0f} tokens/s)"
        )
        if isinstance(r.get("plain"), dict) and isinstance(first.get("plain"), dict):
            ratios.append(r["plain vs first"])
            line += (
                f", {ratios[1]:.3f}× by the canonical trainer ({r['plain']['median']:,.0f} against "
                f"{first['plain']['median']:,.0f})"
            )
        said = [verdict_words(compare.judge(reps, names[0], n, x)) for x in ratios]
        said = [("both " if len(said) > 1 else "") + said[0]] if len(set(said)) == 1 else [f"{said[0]} and {said[1]}"]
        kinds = compare.machine_spreads({m: reps[m] for m in (names[0], n)})
        out.append(f"{line}: {said[0]} ({spread_words(list(kinds.values()))}).")
    out.append(
        f"**Decisions:** the GPUs decide {', '.join(differ)} differently (section 2)."
        if differ
        else "**Decisions:** every lever measured on more than one GPU is decided alike (section 2)."
    )
    return out


def title_md(reps) -> str:
    devices = " vs ".join(f"**{rep.env['device']['name']}** ({name})" for name, rep in reps.items())
    return (
        f"# GPT-2 training step across GPUs\n\n{devices}\n\nEach GPU's numbers come from its own report "
        "(`reports/<gpu>/`), measured by this tool on that GPU with the same workload, seed and data. "
        "Every speed-up names its basis: the stage and batch size measured, against which stage at which "
        "batch size." + "".join(f"\n\n{line}" for line in headline(reps))
    )
