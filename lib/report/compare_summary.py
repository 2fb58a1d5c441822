"""*The comparison's first lines, and GPT-2's global batch*: its title with a line a GPU on what it trains at against
the first (headline), and each GPU's recipe (its report's recommended stage at a micro-batch that divides the
batch, with its accumulation steps) beside the canonical trainer, both against the first GPU's (section 1)."""

from __future__ import annotations

import html

import pandas as pd

from lib.core import stages
from lib.report import loader, recipe_row
from lib.report import formats as fmt
from lib.report.compare import decisions_table
from lib.report.compare_view import NOT_MEASURED_CELL, spread_words, verdict_words


def recipe_table(reps: dict[str, loader.Report]) -> pd.DataFrame:
    """Per GPU, its report's decided recipe (decisions.json's) as trained at GPT-2's global batch, and the canonical
    trainer of the same sitting: each side's median and range over its processes, their ratio, and each against the
    first GPU's same side. A GPU whose recipe was not timed as trained has no row sides (not measured)."""
    rows = []
    for name, rep in reps.items():
        r = rep.decided["recipe"] or {}
        best, plain = r.get("recipe"), r.get("canonical")
        rows.append(
            {
                "gpu": name,
                "decided": r or None,
                "recipe": best,
                "plain": plain,
                "ratio": r.get("ratio") if best else None,
            }
        )
    first = rows[0] if rows else None
    for row in rows:
        for side in ("recipe", "plain"):
            mine, theirs = row[side], first[side]
            row[f"{side} vs first"] = mine["median"] / theirs["median"] if mine and theirs else None
    return pd.DataFrame(rows)


def recipe_html(reps) -> str:
    """Each GPU's recipe in the units a team decides in (tokens/s, × its canonical trainer, against the first GPU
    judged against the spread between machines, MFU, memory, and the hours, GPU-hours and cost of the token budget),
    then the price ratio at which each GPU stops paying against the first (recipe_decision.price_break_even)."""
    t, names = recipe_table(reps), list(reps)
    if t.empty or not any(isinstance(v, dict) for v in t["recipe"]):
        return "<p>No report compared here measured the recipe at GPT-2's global batch.</p>"
    body, first = "", t.iloc[0]["decided"]
    for row in t.to_dict("records"):
        r = row["decided"] or {}
        if not isinstance(row["recipe"], dict):
            body += f"<tr><td>{row['gpu']}</td>" + f"<td>{NOT_MEASURED_CELL}</td>" * 9 + "</tr>"
            continue
        vs = row["recipe vs first"]
        j = None if row["gpu"] == names[0] else reps.decided["pairs"][row["gpu"]]["recipe"]
        judged = "" if j is None else fmt.NOISE.get(j["within"], "")
        cells = [
            row["gpu"],
            recipe_row.recipe_name(r),
            f"{fmt.tok(r['tokens_per_s'])}<br>"
            f"<small>{fmt.tok(row['recipe']['lo'])}–{fmt.tok(row['recipe']['hi'])}</small>",
            fmt.times(r["ratio"], 3),
            fmt.times(vs, 3) + (f"<br><small>{html.escape(judged)}</small>" if judged else ""),
            fmt.pct(r["mfu_bf16"]) if r.get("mfu_bf16") else "n/a",
            recipe_row.memory_cell(r.get("mem_device_peak_bytes"), None),
            *recipe_row.budget_cells(r),
        ]
        body += "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
        if host := r.get("host"):  # the recipe as that host trains it on all its GPUs (its recommended.json's)
            scaled = f"<br><small>{fmt.pct(host['efficiency'])} of {host['gpus']} × one GPU</small>"
            cells = [
                f"{row['gpu']}, all GPUs",
                recipe_row.recipe_name(host),
                fmt.tok(host["tokens_per_s"]) + (scaled if host.get("efficiency") else ""),
                "",
                "",
                fmt.pct(host["mfu_bf16"]) if host.get("mfu_bf16") else "n/a",
                recipe_row.host_memory_cell(host),
                *recipe_row.budget_cells(host),
            ]
            body += "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
    budget = fmt.tokens(first["token_budget"]) if first and first.get("token_budget") else "the"
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "GPU",
            "recipe: micro-batch × accumulation steps × GPUs",
            "tokens/s",
            "× its canonical trainer",
            f"× {names[0]}'s recipe",
            "MFU (bf16)",
            "device peak",
            f"time for {budget} tokens",
            "GPU-hours",
            "cost",
        )
    )
    return (
        f'<table class="compare-recipes keep-together"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        + "".join(f"<p>{line}</p>" for line in break_even_lines(reps))
        + "<p class=\"note\">Each GPU trains GPT-2's batch by its own report's recipe (page 1 of that report lists "
        "its levers); its canonical trainer is nanoGPT's loop on the same machine; ranges: repeated runs; cost at "
        + "; ".join(
            f"{n} ${fmt.setting(rep.decided['recipe']['price_per_gpu_hour'])} per GPU-hour "
            f"({rep.decided['recipe']['price_source']})"
            for n, rep in reps.items()
            if (rep.decided["recipe"] or {}).get("price_per_gpu_hour")
        )
        + f". Spread between machines of one kind: {spread_words(list(reps.decided['spreads'].values()))}.</p>"
    )


def break_even_lines(reps) -> list[str]:
    """A line a GPU after the first: the price ratio at which it stops paying, and which trains the token budget for
    less at the stated prices."""
    names, out = list(reps), []
    first = reps[names[0]].decided["recipe"]
    for n in names[1:]:
        other = reps[n].decided["recipe"]
        be = reps.decided["pairs"][n]["break_even"]
        if be is None:
            continue
        line = (
            f"<strong>Price:</strong> {n}'s recipe trains {fmt.times(be['ratio'], 3)} {names[0]}'s tokens a GPU-hour, "
            f"so {n} costs less per token while its price per GPU-hour is under {fmt.times(be['ratio'], 3)} "
            f"{names[0]}'s"
        )
        if be["prices"]:
            cheap, dear = (n, names[0]) if be["cheaper"] == "other" else (names[0], n)
            costs = {names[0]: first["cost"], n: other["cost"]}
            line += (
                f"; at the stated prices ({fmt.times(be['prices'])}) {cheap} trains "
                f"{fmt.tokens(first['token_budget'])} tokens for less: {fmt.money(costs[cheap])} against "
                f"{fmt.money(costs[dear])}"
            )
        out.append(line + ".")
    return out


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
    """A recipe row's micro-batch, accumulation steps and GPUs: '128 × 4 × 1 GPU'."""
    return recipe_row.recipe_name(row["decided"])


def headline(reps) -> list[str]:
    """The comparison in a line a GPU: what it trains at against the first GPU, by each report's recipe and by the
    canonical trainer (section 1 has both), each ratio judged against the spread between machines (comparison.compute);
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
            f"**{n} against {names[0]}**, each trained as GPT-2 is: {fmt.times(ratios[0], 3)} by its own recipe, "
            f"{micro(r)} against {micro(first)} "
            f"({fmt.tok(r['recipe']['median'])} against {fmt.tok(first['recipe']['median'])} tokens/s)"
        )
        if isinstance(r.get("plain"), dict) and isinstance(first.get("plain"), dict):
            ratios.append(r["plain vs first"])
            line += (
                f", {fmt.times(ratios[1], 3)} by the canonical trainer ({fmt.tok(r['plain']['median'])} against "
                f"{fmt.tok(first['plain']['median'])})"
            )
        pair = reps.decided["pairs"][n]
        said = [verdict_words(pair[side]) for side in ("recipe", "canonical")[: len(ratios)]]
        said = [("both " if len(said) > 1 else "") + said[0]] if len(set(said)) == 1 else [f"{said[0]} and {said[1]}"]
        kinds = [reps.decided["spreads"][m] for m in (names[0], n)]
        out.append(f"{line}: {said[0]} ({spread_words(kinds)}).")
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
