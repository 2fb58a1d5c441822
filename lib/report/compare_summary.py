"""*The comparison's first lines, and GPT-2's global batch*: its title with a line a GPU on what it trains at against
the first (headline), and each GPU's recipe (its report's recommended stage at a micro-batch that divides the
batch, with its accumulation steps) beside the canonical trainer, both against the first GPU's (section 3)."""

from __future__ import annotations

import html

import pandas as pd

from lib.core import stages
from lib.report import frontier_view, loader
from lib.report.compare import decisions_table
from lib.report.compare_view import NOT_MEASURED_CELL


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
        f"the same sitting; {frontier_view.RECIPE_BASIS}; medians over processes, their range beside them. One "
        "machine of each kind: the spread between machines of one kind is not in these reports.</p>"
    )


def micro(row: dict) -> str:
    """A recipe row's micro-batch and accumulation steps: 'B=128 × 4'."""
    return f"B={row['recipe']['batch']} × {row['recipe']['micro_steps']}"


def headline(reps) -> list[str]:
    """The comparison in a line a GPU: what it trains at against the first GPU, by each report's recipe and by the
    canonical trainer (section 3 has both), and whether the GPUs decide every lever alike (section 2)."""
    t, names = recipe_table(reps), list(reps)
    rows = {r["gpu"]: r for r in t.to_dict("records")} if not t.empty else {}
    decisions = decisions_table(reps)
    differ = [r["stage"] for r in decisions.to_dict("records") if r["differs"]] if not decisions.empty else []
    out = []
    for n in names[1:]:
        r = rows.get(n) or {}
        if isinstance(r.get("recipe"), dict) and isinstance(rows[names[0]].get("recipe"), dict):
            mine, first = r["recipe"]["median"], rows[names[0]]["recipe"]["median"]
            line = (
                f"**{n} against {names[0]}**, each trained as GPT-2 is: {r['recipe vs first']:.3f}× by its own recipe, "
                f"{micro(r)} against {micro(rows[names[0]])} ({mine:,.0f} against {first:,.0f} tokens/s)"
            )
            if isinstance(r.get("plain"), dict) and isinstance(rows[names[0]].get("plain"), dict):
                line += (
                    f", {r['plain vs first']:.3f}× by the canonical trainer ({r['plain']['median']:,.0f} against "
                    f"{rows[names[0]]['plain']['median']:,.0f})"
                )
            out.append(
                line + "; section 3 sets them side by side. One machine of each kind: the spread between machines "
                "of one kind is not in these reports, so neither ratio is shown to be the hardware's alone."
            )
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
