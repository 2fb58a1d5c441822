"""Page 1, laid out from the report's decisions (lib/results/decisions.py) and nothing else: the provenance line,
the recipe a team trains with and what it buys, one row per lever (adopt / neutral / not yet / skip, its worth and
its quality verdict with the horizon it speaks for), the cumulative speed-up as a chart, and three action lines.
Every figure is stated here once; the chapters of the HTML report hold the depth."""

from __future__ import annotations

import html
import re

from lib.core import stages
from lib.report import formats as fmt
from lib.report import recipe_row
from lib.report.next_view import next_text
from lib.report.loader import Report, cut_short, ddp_not_measured
from lib.results import decide, store

NOT_A_GPU = (
    "This is the CPU default: it runs every chapter of the pipeline on a tiny GPT to check that the pipeline works "
    "end to end. Its timings mean nothing for a GPU, and its verdicts are judged against this machine's own noise."
)
# Page 1's legend, a term a line (a paragraph of definitions was hard to find a word in): (term, its words)
LEGEND = (
    (
        "Worth",
        "tokens/s a lever adds: in the recipe over {loo_base} without it (both at one micro-batch a step), "
        "outside it over the stage named; at the recipe's micro-batch unless named; needed to fit: memory it saves.",
    ),
    (
        "Decision",
        "adopt: beyond noise{noise} or needed to fit · neutral: within noise, kept · not yet: faster; loss "
        "effect undecided, or not timed in the recipe · skip: slower, no gain, or worse loss.",
    ),
    (
        "Quality",
        "held-out loss, lever − reference, mean [95 % bounds]{shared}; holds within +{margin} nats. A short check "
        "(±{tolerance} nats) catches only a broken lever.",
    ),
)


def provenance_line(rep: Report) -> str:
    """One line: device, software, code, when and how long it took to measure, and the command that reproduces it."""
    dev, run = rep.env["device"], rep.run or {}
    count = dev.get("count") or 1
    commits, _ = store.code_commits(rep.run)
    runs = [r for r in [*run.get("earlier_runs", []), run] if r]
    seconds = store.measured_seconds(run)
    started = min((r.get("started") or "" for r in runs), default="")
    parts = [
        f"{count} × {dev['name']}" if count > 1 else dev["name"],
        f"PyTorch {rep.env.get('torch')}" + (f", CUDA {rep.env['cuda']}" if rep.env.get("cuda") else ""),
        "code " + ", ".join(c[:9] for c in commits) if commits else "code commit not recorded",
        f"measured {started[:10]}" if started else "",
        f"{fmt.duration(seconds / 60)} min of measuring" if seconds else "",
        f"reproduce: make report GPU={rep.params.name}",
    ]
    line = " · ".join(html.escape(p) for p in parts if p)
    if cut_short(rep):  # said where the reader starts, not only in section 6
        missing = [
            f"DDP as {m['nnodes']} machines of {m['gpus'] // m['nnodes']} GPUs"
            if m["nnodes"] > 1
            else f"DDP on {m['gpus']} GPUs"
            for m in ddp_not_measured(rep)
        ]
        what = f"{', '.join(missing)} not measured (section 2)" if missing else "stopped before its end (section 6)"
        line += f" · <strong class='warn'>incomplete</strong>: {what}"
    return line


def worth_text(row: dict, recipe_batch: int | None = None) -> str:
    """A lever's worth on one basis: the tokens/s it adds over the same configuration without it, in percent. In the
    recipe, the configuration is the recipe (leave-one-out, one optimizer step a micro-batch); outside it, the lever's
    own stack in the matrix (decisions._matrix_worth), named. The batch is said where it is not the recipe's; a lever
    the recipe cannot fit without gives its figure where both fit (the matrix), beside the batch it is needed for."""
    loo, m = row["leave_one_out"], row["matrix"]
    at = lambda b: "" if b == recipe_batch else f" at B={b}"  # noqa: E731

    def over_stack():
        within = ", within noise" if m["within_noise"] else ""
        return f"{fmt.signed_pct(m['ratio'] - 1)} over {stages.get(m['against']).title}{at(m['batch'])}{within}"

    if loo and loo["cannot_fit"]:
        needed = f"needed at B={loo['batch']}" + (" (by its memory estimate)" if loo["predicted"] else "")
        if m and m.get("memory_saved_bytes"):  # what it buys the recipe: the memory it takes off its stack
            saved = fmt.gib(m["memory_saved_bytes"], 1)
            return f"{needed}; saves {saved} GiB over {stages.get(m['against']).title}{at(m['batch'])}"
        return f"{needed}; {over_stack()}" if m else needed
    if loo and loo["worth"] is not None:
        # the noise floor is printed to two decimals: a worth judged against it is too (-0.76 % against 0.78 %)
        return fmt.signed_pct(loo["worth"], 2) + at(loo["batch"])
    if m and row.get("reason") == "slower than the recipe":  # decisions._decide: an alternative the recipe beats
        return f"{over_stack()}; {fmt.times(row['over_recipe']['ratio'], 2)} the recipe"
    if m:
        return over_stack()
    # the reason's first clause: the chapter of the lever says the rest
    return html.escape(re.split(r"[:;]", row["reason"] or "", maxsplit=1)[0].strip())


LONG_WORDS = {"adopt": "sooner to the same loss", "skip": "later to the same loss", "not yet": "undecided"}


def short_horizon(q: dict) -> str:
    """What a parity test trained: its tokens and how often it saw the text."""
    horizon = f"{fmt.tokens(q['tokens'])} tokens trained" if q.get("tokens") else "no seed paired yet"
    return horizon + (f", text seen {fmt.times(q['passes'], 1)}" if q.get("passes") else "")


def shared_horizon(rows: list[dict]) -> str | None:
    """The horizon every parity test on page 1 trained, where they share one: the legend says it once."""
    seen = {short_horizon(r["quality"]) for r in rows if (r["quality"] or {}).get("test") == "parity"}
    return seen.pop() if len(seen) == 1 else None


def quality_text(q: dict | None, whole_stack: bool = True, to_decide: bool = True, said: str | None = None) -> str:
    """The quality verdict and what it speaks for: a parity test's steps, tokens, passes and seeds, or the matrix's
    divergence check and its steps. whole_stack: add the stack's check against the canonical reference (page 1 shows
    it for the recipe's levers alone); to_decide: add the seeds that would decide it (not where Next says them);
    said: the horizon the legend already states for every test (shared_horizon), left out here."""
    if q is None:
        return "no loss comparison"
    if q.get("stack"):  # quality.cover_by_stack: the recipe's whole-stack test speaks for it (its long test's verdict
        # is on the recipe's row, its short one on the row of the recipe's stage; a pointer on every covered row cost
        # page 1 its Next)
        stack = q["stack"]
        return f"<strong>{LONG_WORDS[stack['verdict']] if stack.get('long') else stack['verdict']}</strong> with the whole recipe"
    if q["test"] == "divergence check":
        if q["verdict"] == "passed within noise":
            return (
                f"short check passed within noise: gap {fmt.loss(q['gap'])} nats, the drift between two repeated runs "
                f"{fmt.loss(q['drift'])}, {q['steps']} steps"
            )
        return f"short check {q['verdict']}, {q['steps']} steps"
    horizon = short_horizon(q)
    seeds = f"{q['seeds']} seeds" if q.get("seeds") else ""
    horizon = ", ".join(x for x in ("" if horizon == said else horizon, seeds) if x)
    held = q.get("held_out")
    diff = f" {fmt.nats(held['mean'])} nats" if held and held.get("mean") is not None else ""
    if held and held.get("hi") is not None and abs(held["hi"]) != float("inf"):
        diff += f" [{fmt.nats(held['lo'])}, {fmt.nats(held['hi'])}]"
    against = f" vs {html.escape(stages.get(q['reference']).title)}" + ("" if q["own_stack"] else " with all it adds")
    need = q.get("to_decide") or {}
    minutes = f" (~{fmt.duration(need['gpu_minutes'])} GPU-min)" if need.get("gpu_minutes") else ""
    more = f"; ~{need['seeds']} seeds{minutes} would decide" if need and to_decide else ""
    if q.get("out_of_reach"):
        more = f"; out of reach: more than {q['out_of_reach']['seeds_beyond']} seeds at its spread"
    whole = q.get("canonical")
    check = (
        f"; the whole recipe vs {html.escape(stages.get(whole['reference']).title)}: <strong>{whole['verdict']}</strong>"
        f" {fmt.nats(whole['held_out']['mean'])}, {whole['seeds']} seeds"
        if whole and whole_stack
        else ""
    )
    return f"<strong>{q['verdict']}</strong>{diff}{against}: {horizon}{more}{check}"


def budget_share(tokens: float, recipe: dict | None) -> str:
    """The long test's horizon as a share of the run page 1 prices (a reader asked how much of 10B tokens it covers)."""
    budget = (recipe or {}).get("token_budget")
    return f" ({fmt.pct(tokens / budget, 1)} of the {fmt.tokens(budget)} priced above)" if budget else ""


def long_plans(decided: dict) -> set:
    """The (batch, horizon) of every long test page 1 shows: one plan is said once, in the legend."""
    tests = [row["long"] for row in decided["levers"] if row.get("long")] + [(decided["recipe"] or {}).get("long")]
    return {(v["batch"], v["horizon_tokens"]) for v in tests if v}


def long_text(v: dict, said: bool = False, to_decide: bool = True) -> str:
    """A verdict in time to the same loss (decisions.long_verdicts): how much sooner (or later) the lever's run reaches
    the reference's held-out loss, net of its loss cost, with its interval, and the run it speaks for (said: the
    legend states the one plan every long test ran, so the row leaves it out)."""
    lo, hi = v["net_worth_interval"]
    more = (
        f"; ~{v['seeds_to_decide']} seeds would decide"
        if to_decide and v["decision"] == "not yet" and v["seeds_to_decide"]
        else ""
    )
    passes = f" (seen {fmt.times(v['passes'], 1)})" if v.get("passes") else ""
    after = "" if said else f" after {fmt.tokens(v['horizon_tokens'])} tokens{passes}"
    # a test against a stage further back than the lever's own stack judges the levers between too: named (a reviewer
    # read the loss-only forward's 1.059x over torch.compile as its own, where the BF16 residual stream shares it)
    chain = decide.lineage(v["lever"])
    between = chain[chain.index(v["reference"]) + 1 : -1] if v["reference"] in chain else []
    with_ = f" with {', '.join(stages.get(k).title for k in between)}" if between else ""
    return (
        f"<strong>{LONG_WORDS[v['decision']]}</strong>{html.escape(with_)}: {fmt.times(1 + v['net_worth'], 3)} as fast "
        f"[{fmt.times(1 + lo, 3)}, {fmt.times(1 + hi, 3)}] as {html.escape(stages.get(v['reference']).title)}, loss "
        f"{fmt.nats(v['mean_diff'])} nats{after}, {v['n']} seeds{more}"
    )


def group_heads(rep: Report) -> dict:
    """The lever table's two groups, where both have rows: the levers the recipe adds to the canonical trainer (its
    lead over that trainer comes from these alone) and those the canonical trainer has too; none where one is empty."""
    levers, r = rep.decided["levers"], rep.decided["recipe"] or {}
    if len({row.get("in_canonical") for row in levers}) < 2:
        return {}
    base = html.escape(stages.get(rep.params.evidence.baseline.stage).title)
    lead = f": the recipe's {fmt.times(r['ratio'], 3)} over it comes from these" if r.get("ratio") else ""
    return {
        False: f"<strong>Beyond the canonical trainer</strong>{lead}",
        True: f"<strong>In the canonical trainer too</strong> (nanoGPT's loop with {base})",
    }


def lever_table(rep: Report) -> str:
    rows, nxt = [], (rep.decided["next"] or {}).get("stage")
    recipe_batch = (rep.decided["recipe"] or {}).get("micro_batch")
    left = rep.decided.get("left_to_full_depth") or []
    heads, said = group_heads(rep), shared_horizon(rep.decided["levers"])
    for row in rep.decided["levers"]:
        if heads and (row["in_canonical"] in heads):  # the first row of its group: the group's head row
            rows.append(f"<tr class='group'><td colspan='4'>{heads.pop(row['in_canonical'])}</td></tr>")
        label, colour = fmt.DECISIONS[row["decision"]]
        quality = quality_text(row["quality"], row["in_recipe"], row["stage"] != nxt, said)
        if row["stage"] in left:  # its divergence check stays in its chapter: page 1 says what decides it
            quality = "<strong>not tested</strong> at this depth (section 6 says how)"
        if row.get("long"):  # the long test, where it ran, speaks for a training run: it goes first
            # a lever skipped for its speed needs no more seeds: its row does not say how many would decide it
            quality = long_text(row["long"], len(long_plans(rep.decided)) == 1, row["decision"] != "skip")
            if row["decision"] == "not yet" and row["long"]["decision"] == "adopt":  # decisions.long_verdicts' reason
                quality += "; next, timed in the recipe"
        rows.append(
            f"<tr><td>{html.escape(row['title'])}"
            + (
                f"<br><span class='note'>ran {html.escape(k)}'s kernel</span>"
                if (k := row.get("attention_kernel"))
                else ""
            )
            + "</td>"
            f"<td><strong style='color:{colour}'>{label}</strong></td>"
            f"<td>{worth_text(row, recipe_batch)}</td><td>{quality}</td></tr>"
        )
    recipe = rep.decided["recipe"]
    floor = rep.decided["noise_floor"]
    around = rep.decided.get("leave_one_out_stage")
    words = {
        # the stage the sitting switched levers off from, where it is not the recipe's (the leave-one-out ran before
        # a long test admitted the recipe's last lever)
        "loo_base": stages.get(around).title if around and recipe and around != recipe["stage"] else "the recipe",
        "margin": rep.params.evidence.parity_margin,
        "tolerance": rep.params.run.loss_tolerance,
        "noise": f" ({fmt.pct(floor, 2)}, the widest spread of repeats)" if floor else "",
    }
    # every parity test trained the same: said once, in the Quality term, not in each row
    shared = f" after {said}" if said else ""
    legend = [(term, text.format(**words, shared=shared)) for term, text in LEGEND]
    by, judged = rep.decided.get("long_measured_by"), [row["long"] for row in rep.decided["levers"] if row.get("long")]
    if by and (
        judged or (recipe or {}).get("long")
    ):  # the horizon a long verdict speaks for, and where it was measured, said once
        where = (  # where the records say (records written before provenance was stamped say nothing)
            f" Measured by {', '.join(by['commits'])} on {by['machines']} "
            f"{by['device'] or 'device'} machine{'s' if by['machines'] != 1 else ''}"
            + (f" ({by['gpus']} GPUs)" if by.get("gpus", by["machines"]) != by["machines"] else "")
            + (f", {fmt.duration(by['gpu_seconds'] / 60)} GPU-min" if by.get("gpu_seconds") else "")
            + "."
            if by["commits"]
            else ""
        )
        plans = long_plans(rep.decided)
        (batch_, tokens_), one = min(plans), len(plans) == 1  # one plan (batch, horizon) is said once
        legend.append(
            (
                "Sooner/later to the same loss",
                "the long test ("
                + (f"B={batch_}, {fmt.tokens(tokens_)} tokens{budget_share(tokens_, recipe)}, " if one else "")
                + "text seen at most 4×) prices the loss cost in the reference's steps: speed to its loss [95 % "
                f"bounds], for {'those' if one else 'the named'} tokens only.{where}",
            )
        )
    items = "".join(f"<li><strong>{html.escape(t)}</strong>: {html.escape(x)}</li>" for t, x in legend)
    return (
        '<table class="levers"><thead><tr><th>Lever</th><th>Decision</th><th>Worth</th>'
        f"<th>Quality (what it covers)</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"<ul class='note legend'>{items}</ul>"
    )


NOTHING_NEXT = "none: no lever measured here is left not yet."


def actions(rep: Report) -> list[str]:
    """Use and next: each line names what a team does (what it skips, the table's decisions say)."""
    d = rep.decided
    out = []  # Use: said with the levers the recipe has on (levers_on_html)
    # where no lever is left not yet, page 1 says so rather than dropping the line (reports/h200 once the FP8
    # classifier's long test put it in the recipe and the FP8 lm_head fell behind it)
    out.append(f"<strong>Next</strong> {next_text(rep) if d['next'] else NOTHING_NEXT}")
    return out


def page_html(rep: Report) -> str:
    """Page 1 below its title: what a CPU run is, provenance, the recipe, the levers, and the actions (the chart is
    drawn by its own cell, between the levers and the actions)."""
    first = f"<p class='cpu-note'><strong>{NOT_A_GPU}</strong></p>" if not rep.on_gpu else ""
    return f"{first}<p class='provenance'>{provenance_line(rep)}</p>" + recipe_row.recipe_table(rep) + lever_table(rep)


# The id of a mark at the very end of page 1's last action: the PDF's page 1 must hold it (tests/test_report.py), so
# the whole action stands on page 1, not only its first line.
PAGE_ONE_END = "page-one-end"


def actions_html(rep: Report) -> str:
    items = actions(rep)
    last = len(items) - 1
    end = f"<span id='{PAGE_ONE_END}'></span>"
    rows = "".join(f"<li>{a}{end if i == last else ''}</li>" for i, a in enumerate(items))
    return f"<ul class='actions'>{rows}</ul>"


def title_md(rep: Report) -> str:
    """The report's title: the model, the device, and the question."""
    dev = rep.env["device"]
    count = dev.get("count") or 1
    device = f"{count} × {dev['name']}" if count > 1 else dev["name"]
    return f"# {rep.params.model_preset} on {device}: what each lever buys"


def code_html(rep: Report) -> str:
    """The recipe as code to paste: each of its levers' switch with its worth (page 1's figure), the ones that pay
    first; torch.compile goes last whatever its worth, since it wraps the model after every other change."""
    d = rep.decided
    if not d["recipe"]:
        return ""
    rows = {r["stage"]: r for r in d["levers"] if r["in_recipe"]}
    keys = [k for k in rows if stages.get(k).switch]
    keys.sort(key=lambda k: (k == "compile", rows[k]["decision"] != "adopt"))
    lines = [f"# The recipe, {recipe_row.recipe_name(d['recipe'])}: its levers, each with what it adds to the others"]
    batch = d["recipe"]["micro_batch"]
    lines += [f"# {rows[k]['title']}: {worth_text(rows[k], batch)}\n{stages.get(k).switch}" for k in keys]
    return f'<pre class="page-one-code"><code>{html.escape(chr(10).join(lines))}</code></pre>'
