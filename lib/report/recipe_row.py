"""Page 1's recipe rows: the recipe a team trains with beside the canonical trainer of the same sitting (and on the
host's GPUs where DDP ran), in the units a team decides in (tokens/s, × the canonical trainer, MFU, memory, and the
hours, GPU-hours and cost of the token budget), then the levers it has on by name. Laid out from decisions.json's
recipe (lib/results/recipe_decision.py)."""

from __future__ import annotations

import html

from lib.core import stages
from lib.report import formats as fmt
from lib.report.loader import Report
from lib.results.decisions import ADOPT, NEUTRAL, NOT_YET


def recipe_name(r: dict, device: str = "GPU") -> str:
    """'128 × 4 × 1 GPU': micro-batch × accumulation steps × GPUs, as the table's first header names them (`r`: the
    recipe, one of its DDP entries, or the canonical trainer's side; `device`: the word for what it ran on,
    device_word's)."""
    gpus = r.get("gpus") or 1
    return f"{r['micro_batch']} × {r.get('accumulation') or 1} × {gpus} {device}{'s' if gpus > 1 else ''}"


def device_word(params) -> str:
    """What the report's devices are called: 'CPU' on the CPU default (which ran on no GPU), else 'GPU'."""
    return "CPU" if params.backend == "cpu" else "GPU"


def budget_cells(t: dict | None, saves: dict | None = None) -> list[str]:
    """Hours, GPU-hours and cost of the token budget (decisions' _time), 'n/a' where not known; with `saves` (the
    recipe's, over the canonical trainer), what it saves beneath each."""
    t, saves = t or {}, saves or {}

    def saved(key, f=fmt.gpu_hours):  # a recipe slower than the canonical trainer (a loaded CPU) costs more
        v = saves.get(key)
        said = f"saves {f(v)}" if v and v > 0 else f"costs {f(-v)} more" if v else ""
        return f"<br><span class='note'>{said}</span>" if said else ""

    return [
        fmt.hours(t["hours"]) if t.get("hours") else "n/a",
        f"{fmt.gpu_hours(t['gpu_hours'], 1)}{saved('gpu_hours')}" if t.get("gpu_hours") else "n/a",
        f"{fmt.money(t['cost'])}{saved('cost', fmt.money)}" if t.get("cost") else "n/a",
    ]


def host_memory_cell(host: dict, total=None) -> str:
    """A several-GPU host's memory, a GPU's device peak where its job sampled one; n/a where it did not."""
    return memory_cell(host["mem_device_peak_bytes"], total) + " a GPU" if host.get("mem_device_peak_bytes") else "n/a"


def memory_cell(peak, total) -> str:
    return f"{fmt.gib(peak)} of {fmt.gib(total)} GiB" if peak and total else f"{fmt.gib(peak)} GiB" if peak else "n/a"


def recipe_table(rep: Report) -> str:
    """The recipe a team trains with beside the canonical trainer of the same sitting (and on the host's GPUs where
    DDP ran): tokens/s with range, × the canonical trainer, MFU, memory, and the hours, GPU-hours and cost of the token
    budget; then the levers it has on, by name."""
    r = rep.decided["recipe"]
    if r is None:
        return "<p><strong>No recipe:</strong> no configuration completed with its loss verified.</p>"
    side, canon = r["recipe"] or r["micro_batch_alone"], r["canonical"]

    def rng(s):
        return f"<br><span class='note'>{fmt.tok(s['lo'])}–{fmt.tok(s['hi'])}</span>" if s["n"] > 1 else ""

    versus = (
        f"{fmt.times(r['ratio'], 3)}<br><span class='note'>{fmt.times(r['ratio_range'][0], 3, '')}–{fmt.times(r['ratio_range'][1], 3, '')}</span>"
        if r["ratio"]
        else "not measured at the global batch"
    )
    if v := r.get("long"):  # the whole recipe in time to the canonical trainer's loss (decisions.whole_stack_long)
        lo, hi = v["net_worth_interval"]
        versus += f"<br>{fmt.times(1 + v['net_worth'], 3)} at equal loss<br><span class='note'>{fmt.times(1 + lo, 3, '')}–{fmt.times(1 + hi, 3, '')}</span>"
    mfu = lambda v: fmt.pct(v) if v else "n/a"  # noqa: E731
    device = device_word(rep.params)
    rows = [
        [
            f"<strong>Recipe: {html.escape(recipe_name(r, device))}</strong>",
            fmt.tok(r["tokens_per_s"]) + rng(side),
            versus,
            mfu(r["mfu_bf16"]),
            memory_cell(r["mem_device_peak_bytes"] or r["mem_allocator_bytes"], r["device_memory_bytes"]),
            *budget_cells(r, r.get("saves")),
        ]
    ]
    if canon and r["canonical_time"]:
        b = rep.params.evidence.baseline
        rows.append(
            [
                f"Canonical trainer ({html.escape(stages.get(b.stage).title)}): "
                f"{html.escape(recipe_name({'micro_batch': canon['batch'], 'accumulation': canon['micro_steps']}, device))}",
                fmt.tok(canon["median"]) + rng(canon),
                "1×",
                mfu(r["canonical_time"]["mfu_bf16"]),
                "n/a",
                *budget_cells(r["canonical_time"]),
            ]
        )
    host = r["host"]
    if host:  # the recipe as this host trains it, on all its GPUs; the points between are the DDP chapter's curve
        rows.append(
            [
                f"<strong>Recipe, DDP: {html.escape(recipe_name(host))}</strong>"
                + (
                    f"<br><span class='note'>{fmt.pct(host['efficiency'])} of {host['gpus']} × one GPU</span>"
                    if host["efficiency"]
                    else ""
                ),
                fmt.tok(host["tokens_per_s"]) + rng(host["processes"] or {"n": 1}),  # over its processes, as above
                "n/a",  # no canonical trainer ran on several GPUs
                mfu(host["mfu_bf16"]),
                host_memory_cell(host, r["device_memory_bytes"]),
                *budget_cells(host),
            ]
        )
    budget = fmt.tokens(r["token_budget"]) if r["token_budget"] else "the"
    head = [
        f"micro-batch × accumulation steps × {device}s",
        "tokens/s",
        "× canonical trainer",
        "MFU (bf16)",
        "memory (device peak)",
        f"time for {budget} tokens",
        "GPU-hours",
        "cost",
    ]
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    table = (
        '<table class="recipe-row"><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + f"</tr></thead><tbody>{body}</tbody></table>"
    )
    return table + levers_on_html(rep) + f"<p class='note'>{html.escape('; '.join(recipe_notes(rep)))}.</p>"


def levers_on_html(rep: Report) -> str:
    """The recipe spelled out: the levers it has on, those that pay first, then those kept though within noise."""
    d = rep.decided
    by = {row["stage"]: row for row in d["levers"]}
    on = [by[k] for k in d["recipe"]["levers_on"] if k in by]

    def titled(decision):
        return [html.escape(row["title"]) for row in on if row["decision"] == decision]

    line = "<strong>On in the recipe:</strong> " + (", ".join(titled(ADOPT)) or "none beyond the baseline")
    if kept := titled(NEUTRAL):  # on in the recipe as measured: taking one out is a configuration not timed as trained
        line += f"; also on, with no measurable effect either way: {', '.join(kept)}"
    if doubted := titled(NOT_YET):  # decisions._decide: faster without it in the leave-one-out
        line += f"; kept on, the recipe ran faster without it (not yet measured as trained): {', '.join(doubted)}"
    hand = f"<code>optimal_config()</code> or reports/{html.escape(rep.dir.name)}/recommended.json" + (
        " (one GPU and the DDP host)" if d["recipe"]["host"] else ""
    )
    return f"<p class='levers-on'>{line}. <strong>Use</strong> it: {hand}.</p>"


def recipe_notes(rep: Report) -> list[str]:
    """What the recipe's figures are: the global batch, the canonical trainer, how it was timed, and the price."""
    r = rep.decided["recipe"]
    notes = [f"every row trains {fmt.global_batch(r['global_batch_tokens'])} (T={r['seq_len']})"]
    if r["ratio"]:
        notes.append(
            "canonical trainer: nanoGPT's loop on the same machine; tokens/s of each side's mean step; ranges: repeated runs"
        )
    if not r["measured_as_trained"]:  # how the recipe was timed is section 2's, unless it was not as trained
        notes.append(f"tokens/s of B={r['micro_batch']} alone: the global batch was not measured for this recipe")
    if r["price_per_gpu_hour"]:
        notes.append(
            f"at ${fmt.setting(r['price_per_gpu_hour'])} per GPU-hour ({r['price_source']}; PRICE_PER_GPU_HOUR= sets yours)"
        )
    else:
        notes.append("no price per GPU-hour known for this device: PRICE_PER_GPU_HOUR= adds the cost")
    if r["memory_saver"]:
        m = r["memory_saver"]
        notes.append(
            f"as fast within noise and lighter: B={m['micro_batch']} × {m['accumulation']}, "
            f"{fmt.tok(m['tokens_per_s'])} tokens/s, {fmt.gib(m['mem_allocator_bytes'])} GiB allocator peak"
        )
    return notes
