"""Page 1, laid out from the report's decisions (lib/results/decisions.py) and nothing else: the provenance line,
the recipe a team trains with and what it buys, one row per lever (adopt / neutral / not yet / skip, its worth and
its quality verdict with the horizon it speaks for), the cumulative speed-up as a chart, and three action lines.
Every figure is stated here once; the chapters of the HTML report hold the depth."""

from __future__ import annotations

import html
import re

from lib.core import stages
from lib.report import formats as fmt
from lib.report.loader import Report, code_commits, cut_short, ddp_not_measured
from lib.results.decisions import NEUTRAL

NOT_A_GPU = (
    "This is the CPU default: it runs every chapter of the pipeline on a tiny GPT to check that the pipeline works "
    "end to end. Its timings mean nothing for a GPU, and its verdicts are judged against this machine's own noise."
)
LEGEND = (
    "Worth: in the recipe, what leaving the lever out costs; outside it, its speed-up over its own stack (the same "
    "configuration without it). adopt: costs beyond noise{noise} or needed to fit · neutral: within noise · not yet: "
    "faster, quality undecided or untested · skip: slower, no gain, or quality failed. Quality: held-out loss, lever − "
    "reference [one-sided 95 % bounds], against the lever's own stack, margin +{margin} nats, over the run named "
    "(passes: times a run saw its training text); else a divergence check (±{tolerance} nats), which catches only a "
    "broken lever."
)


def provenance_line(rep: Report) -> str:
    """One line: device, software, code, when and how long it took to measure, and the command that reproduces it."""
    dev, run = rep.env["device"], rep.run or {}
    count = dev.get("count") or 1
    commits, _ = code_commits(rep)
    runs = [r for r in [*run.get("earlier_runs", []), run] if r]
    seconds = sum((r.get("timings_s") or {}).get("total_s") or 0 for r in runs)
    calls, started = len(runs), min((r.get("started") or "" for r in runs), default="")
    parts = [
        f"{count} × {dev['name']}" if count > 1 else dev["name"],
        f"PyTorch {rep.env.get('torch')}" + (f", CUDA {rep.env['cuda']}" if rep.env.get("cuda") else ""),
        "code " + ", ".join(c[:9] for c in commits) if commits else "code commit not recorded",
        f"measured {started[:10]}" if started else "",
        f"{seconds:,.0f} s of measuring in {calls} call{'s' if calls > 1 else ''}" if seconds else "",
        f"reproduce: make report GPU={rep.params.name}",
    ]
    line = " · ".join(html.escape(p) for p in parts if p)
    if cut_short(rep):  # said where the reader starts, not only in section 6
        missing = [
            f"the {m['nnodes']}-node rehearsal ({m['nnodes']} × {m['gpus'] // m['nnodes']} GPUs)"
            if m["nnodes"] > 1
            else f"DDP on {m['gpus']} GPUs"
            for m in ddp_not_measured(rep)
        ]
        what = f"before {', '.join(missing)} (section 2)" if missing else "before its end (section 6)"
        line += f" · <strong class='warn'>incomplete</strong>: the last run stopped {what}"
    return line


def _recipe_name(title: str, r: dict) -> str:
    """'Loss-only forward, B=128 × 4 accumulation steps × 1 GPU': every factor of the global batch named (`r`: the
    recipe, or one of its DDP entries)."""
    acc = r.get("accumulation") or 1
    steps = f" × {acc} accumulation step{'s' if acc > 1 else ''}" if r.get("accumulation") else ""
    gpus = r.get("gpus") or 1
    return f"{title}, B={r['micro_batch']}{steps} × {gpus} GPU{'s' if gpus > 1 else ''}"


def _time_cell(r: dict) -> str:
    if not r.get("hours"):
        return "n/a"
    return fmt.hours(r["hours"]) + (f", {fmt.money(r['cost'])}" if r.get("cost") else "")


def recipe_table(rep: Report) -> str:
    """The recipe's row: micro-batch × accumulation (× GPUs), its tokens/s with range, × the canonical trainer in the
    same sitting, MFU, memory, and the hours (and cost) of the token budget."""
    r = rep.decided["recipe"]
    if r is None:
        return "<p><strong>No recipe:</strong> no configuration completed with its loss verified.</p>"
    side = r["recipe"] or r["micro_batch_alone"]
    rng = (
        f"<br><span class='note'>{side['lo']:,.0f}–{side['hi']:,.0f}, {side['n']} processes</span>"
        if side["n"] > 1
        else ""
    )
    canon = r["canonical"]
    if r["ratio"]:
        versus = f"{r['ratio']:.3f}×<br><span class='note'>{r['ratio_range'][0]:.3f}–{r['ratio_range'][1]:.3f}</span>"
    else:
        versus = "not measured at the global batch"
    mem = (
        f"{fmt.gib(r['mem_device_peak_bytes'])} of {fmt.gib(r['device_memory_bytes'])} GiB"
        if r["mem_device_peak_bytes"] and r["device_memory_bytes"]
        else f"{fmt.gib(r['mem_allocator_bytes'])} GiB"
        if r["mem_allocator_bytes"]
        else "n/a"
    )
    cells = [
        f"<strong>{html.escape(_recipe_name(r['title'], r))}</strong>",
        f"{r['tokens_per_s']:,.0f}{rng}",
        versus,
        fmt.pct(r["mfu_bf16"]) if r["mfu_bf16"] else "n/a",
        mem,
        _time_cell(r),
    ]
    head = ["Recipe", "tokens/s", "× canonical trainer", "MFU (bf16)", "device peak (NVML)", "time"]
    rows = [cells]
    # the recipe as this host trains it, on all its GPUs; the points between are the DDP chapter's scaling curve
    for d in [r["host"]] if r["host"] else []:
        rows.append(
            [
                f"<strong>{html.escape(_recipe_name('DDP', d))}</strong>",  # the recipe's stage, on the host's GPUs
                f"{d['tokens_per_s']:,.0f}",
                f"scaling {fmt.pct(d['efficiency'])} of {d['gpus']} × one GPU" if d["efficiency"] else "",
                fmt.pct(d["mfu_bf16"]) if d["mfu_bf16"] else "n/a",  # a GPU's, as the row above
                f"{fmt.gib(d['mem_device_peak_bytes'] or d['mem_device_after_bytes'])} GiB a GPU"
                if d["mem_device_peak_bytes"] or d["mem_device_after_bytes"]
                else "n/a",
                _time_cell(d),
            ]
        )
    notes = [f"B × accumulation × GPUs × T={r['seq_len']} = {fmt.global_batch(r['global_batch_tokens'])}"]
    if r["ratio"]:
        b = rep.params.evidence.baseline
        notes.append(
            f"× canonical trainer: over {stages.get(b.stage).title}, B={b.batch_size} in a plain loop "
            f"({canon['median']:,.0f} tokens/s), range over every pair of processes"
        )
    if r["token_budget"]:
        notes.append(
            f"time for {fmt.tokens(r['token_budget'])} tokens"
            + ("" if r["cost"] else " (PRICE_PER_GPU_HOUR= adds cost)")
        )
    if r["measured_as_trained"]:
        st = r["recipe_steps"]
        notes.append(f"median of {st['timed']} global-batch steps after {st['warmup']} warm-up (plain loop: mean)")
        host = r["host"]
        if host and host["steps"] != st and host["steps"]["timed"]:
            notes.append(f"DDP row: median of {host['steps']['timed']} after {host['steps']['warmup']}")
    else:
        notes.append(f"tokens/s of B={r['micro_batch']} alone: the global batch was not measured for this recipe")
    if r["host"] and not r["host"]["mem_device_peak_bytes"] and r["host"]["mem_device_after_bytes"]:
        notes.append("its memory in use after the steps")
    if r["memory_saver"]:
        m = r["memory_saver"]
        notes.append(
            f"memory saver, level with it by the tie rule: B={m['micro_batch']} × {m['accumulation']}, "
            f"{m['tokens_per_s']:,.0f} tokens/s, {fmt.gib(m['mem_allocator_bytes'])} GiB allocator peak"
        )
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        '<table class="recipe-row"><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + f"</tr></thead><tbody>{body}</tbody></table><p class='note'>{html.escape('; '.join(notes))}.</p>"
    )


def worth_text(row: dict, noise_said: bool = False) -> str:
    """A lever's worth: on top of the recipe (leave-one-out) where it is in it, else over its own stack in the matrix
    (decisions._matrix_worth). noise_said: its decision word already says it is within noise (page 1's neutral), so
    the worth does not say it again."""
    loo, m = row["leave_one_out"], row["matrix"]
    if loo:
        if loo["cannot_fit"]:
            return f"needed to fit B={loo['batch']}" + (" (predicted)" if loo["predicted"] else "")
        if loo["worth"] is not None:
            noise = {True: "" if noise_said else ", within noise", None: ", not judged"}.get(loo["within_noise"], "")
            # the noise floor is printed to two decimals: a worth judged against it is too (-0.76 % against 0.78 %).
            # "× 1": the ablation steps the optimizer every micro-batch, where the recipe's row says its accumulation
            # (B=128 × 4): an optimizer-side lever's worth reads higher here than in the recipe.
            return f"{fmt.signed_pct(loo['worth'], 2)} at B={loo['batch']} × 1{noise}"
    if m:
        noise = ", within noise" if m["within_noise"] else ""
        return f"{m['ratio']:.2f}× {stages.get(m['against']).title}, B={m['batch']}{noise}"
    # the reason's first clause: the chapter of the lever says the rest
    return html.escape(re.split(r"[:;]", row["reason"] or "", maxsplit=1)[0].strip())


def quality_text(q: dict | None, whole_stack: bool = True, to_decide: bool = True) -> str:
    """The quality verdict and what it speaks for: a parity test's steps, tokens, passes and seeds, or the matrix's
    divergence check and its steps. whole_stack: add the stack's check against the canonical reference (page 1 shows
    it for the recipe's levers alone); to_decide: add the seeds that would decide it (not where Next says them)."""
    if q is None:
        return "no loss comparison"
    if q.get("stack"):  # quality.cover_by_stack: the recipe's whole-stack test speaks for it (its row says how)
        via = html.escape(stages.get(q["stack"]["via"]).title)
        return f"<strong>{q['stack']['verdict']}</strong> in {via}'s whole-stack test"
    if q["test"] == "divergence check":
        if q["verdict"] == "passed within noise":
            return (
                f"divergence check passed within noise: gap {q['gap']:.3f} nats, the drift between two processes "
                f"{q['drift']:.3f}, {q['steps']} steps"
            )
        return f"divergence check {q['verdict']}, {q['steps']} steps"
    horizon = f"{q['steps']} steps, {fmt.tokens(q['tokens'])} tok" if q.get("tokens") else "no seed paired yet"
    if q.get("passes"):
        horizon += f", {q['passes']:.2f} passes"
    seeds = f", {q['seeds']} seeds" if q.get("seeds") else ""
    held = q.get("held_out")
    diff = f" {fmt.nats(held['mean'])} nats" if held and held.get("mean") is not None else ""
    if held and held.get("hi") is not None and abs(held["hi"]) != float("inf"):
        diff += f" [{fmt.nats(held['lo'])}, {fmt.nats(held['hi'])}]"
    against = f" vs {html.escape(stages.get(q['reference']).title)}" + ("" if q["own_stack"] else ", its whole stack")
    need = q.get("to_decide") or {}
    minutes = f" (~{need['gpu_minutes']:.0f} GPU-min)" if need.get("gpu_minutes") else ""
    more = f"; ~{need['seeds']} seeds{minutes} would decide" if need and to_decide else ""
    if q.get("out_of_reach"):
        more = f"; out of reach: more than {q['out_of_reach']['seeds_beyond']} seeds at its spread"
    whole = q.get("canonical")
    check = (
        f"; whole stack vs {html.escape(stages.get(whole['reference']).title)}: <strong>{whole['verdict']}</strong>"
        f" {fmt.nats(whole['held_out']['mean'])}, {whole['seeds']} seeds"
        if whole and whole_stack
        else ""
    )
    return f"<strong>{q['verdict']}</strong>{diff}{against}: {horizon}{seeds}{more}{check}"


def lever_table(rep: Report) -> str:
    rows, nxt = [], (rep.decided["next"] or {}).get("stage")
    left = rep.decided.get("left_to_full_depth") or []
    for row in rep.decided["levers"]:
        label, colour = fmt.DECISIONS[row["decision"]]
        quality = quality_text(row["quality"], row["in_recipe"], row["stage"] != nxt)
        if row["stage"] in left:  # its divergence check stays in its chapter: page 1 says what decides it
            quality = "<strong>not tested</strong> at this depth (DEPTH=full tests it)"
        rows.append(
            f"<tr><td>{html.escape(row['title'])}</td>"
            f"<td><strong style='color:{colour}'>{label}</strong></td>"
            f"<td>{worth_text(row, noise_said=row['decision'] == NEUTRAL)}</td><td>{quality}</td></tr>"
        )
    batch, recipe = rep.decided["leave_one_out_batch"], rep.decided["recipe"]
    floor = rep.decided["noise_floor"]
    legend = LEGEND.format(
        margin=rep.params.evidence.parity_margin,
        tolerance=rep.params.run.loss_tolerance,
        noise=f" ({fmt.pct(floor, 2)}, the widest spread between processes)" if floor else "",
    )
    lacks = (
        f" The leave-one-out of these records ran at B={batch}, not the recipe's B={recipe['micro_batch']}: they "
        "were measured under an earlier rule, which recommended micro-batches that need not divide the global batch."
        if batch and recipe and batch != recipe["micro_batch"]
        else ""
    )
    return (
        '<table class="levers"><thead><tr><th>Lever</th><th>Decision</th><th>Worth</th>'
        f"<th>Quality (horizon)</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"<p class='note'>{html.escape(legend + lacks)}</p>"
    )


def actions(rep: Report) -> list[str]:
    """Use and next: each line names what a team does (what it skips, the table's decisions say)."""
    d = rep.decided
    out = []
    if d["recipe"]:
        out.append(  # the recipe itself is named once, in the table above
            f"<strong>Use</strong> the {'DDP ' if d['recipe']['host'] else ''}recipe above (its adopt and neutral "
            "levers): <code>optimal_config()</code> or recommended.json."
        )
    nxt = d["next"]
    if nxt:
        out.append(f"<strong>Next</strong> {next_text(rep)}")
    return out


def next_text(rep: Report) -> str:
    """The next experiment as decisions.next_experiment chose it: the lever, what it would add, the command that
    decides it; then the faster levers it passed over, whose test no stated number of seeds would decide."""
    nxt, profile, looks = rep.decided["next"], rep.params.name, rep.params.evidence.parity_looks
    over = [
        f"{html.escape(r['title'])} ({r['over_recipe']['ratio']:.2f}×) stays not yet: at its seeds' spread after "
        f"{r['seeds_run']} seeds, more than {r['seeds_beyond']} would be needed to decide it"
        for r in nxt["passed_over"]
    ]
    if nxt["stage"] is None:
        return "none that seeds can decide: " + "; ".join(over) + "."
    stage, seeds = nxt["stage"], nxt["seeds"]
    command = (
        f"python tools/parity_probe.py {profile} {stage} --batch {nxt['batch']}"
        + (f" --micro-steps {nxt['micro_steps']}" if nxt["micro_steps"] > 1 else "")
        + (f" --seeds {seeds}" if seeds else "")
    )
    if not nxt["tested"]:
        said = (
            f"not tested at this depth: <code>{html.escape(command)}</code> or "
            f"<code>make report GPU={profile} DEPTH=full</code>"
        )
    else:
        minutes = (nxt["to_decide"] or {}).get("gpu_minutes")
        said = f"undecided after {nxt['seeds_run']} seeds" + (
            f"; ~{seeds} seeds"
            + (f" (~{minutes:.0f} GPU-min)" if minutes else "")
            + f" would decide it {rep.params.evidence.parity_power * 100:.0f} % of the time"  # the power it is sized by
            if seeds
            else ""
        )
        said += f": <code>{html.escape(command)}</code>"
        if pay := nxt.get("payoff"):  # what it would pay were it to hold, in the recipe's own GPU-hours
            said += (
                f"; if it holds, it saves {pay['gpu_hours_saved']:.2f} GPU-h per {fmt.tokens(pay['tokens'])} tokens"
                + (
                    f", repaying the test after {fmt.tokens(pay['break_even_tokens'])}"
                    if pay["break_even_tokens"]
                    else ""
                )
            )
    # with --seeds the command states its runs; without, the profile's looks
    runs = (
        ""
        if seeds
        else f" (looks at {', '.join(map(str, looks))} seeds)"
        if looks
        else f" ({rep.params.evidence.parity_seeds} seeds)"
    )
    return (
        f"{'decide' if nxt['tested'] else 'test'} {html.escape(nxt['title'])}"  # its worth: its row's, said once
        + (f" (with {html.escape(', '.join(nxt['with']))}, also not yet)" if nxt.get("with") else "")
        + f"; {said}{runs}"
        + "".join(f". {o}" for o in over)
        + "."
    )


def page_html(rep: Report) -> str:
    """Page 1 below its title: what a CPU run is, provenance, the recipe, the levers, and the actions (the chart is
    drawn by its own cell, between the levers and the actions)."""
    first = f"<p class='cpu-note'><strong>{NOT_A_GPU}</strong></p>" if not rep.on_gpu else ""
    return f"{first}<p class='provenance'>{provenance_line(rep)}</p>" + recipe_table(rep) + lever_table(rep)


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
    lines = [
        f"# {_recipe_name(d['recipe']['title'], d['recipe'])}: its levers, each with its worth on top of the others"
    ]
    lines += [f"# {rows[k]['title']}: {worth_text(rows[k])}\n{stages.get(k).switch}" for k in keys]
    return f'<pre class="page-one-code"><code>{html.escape(chr(10).join(lines))}</code></pre>'
