"""*How the recommendation reads*: the batch-size sweep of the fastest verified stage, and the
recommended configuration with its speed over processes, its loss (the parity run), its memory,
the code switches that produce it and where its step time goes."""

from __future__ import annotations

import html


from lib.core import record, stages
from lib.report import export, parity_view
from lib.report import formats as fmt
from lib.report.charts import save, style
from lib.report.evidence_view import OK, none, table
from lib.report.loader import LAYERS, GiB, Report, gib, recommended
from lib.report.profile_view import top_kernels_html
from lib.results.recommendation import applied_switches
from lib.results import batch_sweep, decide, profiles


def sweep_html(rep: Report) -> str:
    sweeps = batch_sweep.sweeps(rep)
    if not sweeps:
        return none("The batch-size sweep was not measured for this report.")
    rows, notes, tps = [], [], decide.throughputs(rep.decisions)
    for key, pts in sweeps.items():
        for r in pts:
            ran = r["status"] in OK
            k = decide.median_of(tps, key, r["batch_size"], r["tokens_per_s"]) / r["tokens_per_s"] if ran else 1.0
            n = len(tps.get((key, r["batch_size"])) or [])  # the median over processes where several timed it
            rows.append(
                {
                    "Stage": r["stage_title"],
                    "B": r["batch_size"],
                    "ms/step": fmt.ms(r["median_ms"] / k) if ran else _not_timed(r),
                    "tok/s": fmt.tok(r["tokens_per_s"] * k) + (f" (median of {n})" if n > 1 else "") if ran else "",
                    "MFU": fmt.pct(r["mfu"] * k) if ran and r.get("mfu") is not None else ("n/a" if ran else ""),
                    "allocator GiB": gib(r.get("mem_allocator_bytes")),
                    "device GiB": gib(r.get("mem_device_bytes")),
                    "source": "sweep" if r.get("variant") == "batch sweep" else "matrix",
                }
            )
        heir = _inherited(rep, key, sweeps)
        if heir:
            notes.append(f"{stages.get(key).title}: {heir}")
            continue
        e = batch_sweep.end(pts)
        oom, predicted, last, largest = e["oom"], e["predicted"], e["last"], e["largest"]
        notes.append(
            f"{stages.get(key).title}: "
            + (
                f"out of memory at B={oom}, so B={largest} is the largest measured batch size that fits"
                if oom
                else f"B={predicted['batch_size']} {predicted['reason']}; B={largest} is the largest that ran"
                if predicted
                else (
                    f"measured up to B={last}; larger batch sizes were not measured (the run ended first)"
                    if last < max(rep.params.evidence.sweep_batch_sizes)
                    else f"every batch size up to B={last} fits"
                )
            )
        )
    rejected = parity_view.rejected(rep)
    notes += [
        f"{stages.get(k).title} is not recommended: {parity_view.rejected_reason(rep, k)}"
        for k in sweeps
        if k in rejected
    ]
    recipe = rep.decided["recipe"] or {}
    if recipe.get("stage") in rejected and recipe["stage"] not in sweeps:  # admitted by its long test (long_choice)
        notes.append(
            f"{recipe['title']} is the recipe by its long test (section 3), though its short test did not let it "
            f"stand; not swept, it trains at B={recipe['micro_batch']}, the batch the sweep chose for the stack below it"
        )
    unswept = [stages.get(k).title for k in rejected if k not in sweeps and k != recipe.get("stage")]
    if unswept:  # their tests' figures are in section 3, once
        notes.append(f"not swept, since their parity tests did not let them stand (section 3): {', '.join(unswept)}")
    note = '<p class="note">' + html.escape("; ".join(n.rstrip(".") for n in notes)) + ".</p>"
    # on one page (report.css): reports/h100's PDF split its rows two and two over pages 18 and 19
    return table(rows, "matrix keep-together") + note


def _inherited(rep: Report, key: str, sweeps: dict) -> str | None:
    """Why stage `key` was measured at one batch size and not swept (batch_sweep.inherited_from), in words."""
    found = batch_sweep.inherited_from(rep, key, sweeps, parity_view.rejected(rep))
    if found is None:
        return None
    k, batch = found
    return (
        f"measured at B={batch} alone, the batch size the sweep chose for "
        f"{stages.get(k).title}, whose parity test did not let it stand (the stage that takes over is "
        "measured there, not swept again)"
    )


def _not_timed(r: dict) -> str:
    return "predicted OOM" if record.is_predicted_oom(r) else r["status"].upper().replace("_", " ")


def plot_sweep(rep: Report):
    sweeps = {k: [r for r in pts if r["status"] in OK] for k, pts in batch_sweep.sweeps(rep).items()}
    sweeps = {k: v for k, v in sweeps.items() if v}
    if not sweeps:
        return None
    plt = style()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3))
    for i, (key, ran) in enumerate(sweeps.items()):
        b = [r["batch_size"] for r in ran]
        tps = decide.throughputs(rep.decisions)  # each point the median over processes where several timed it
        a1.plot(
            b,
            [decide.median_of(tps, key, x, r["tokens_per_s"]) for x, r in zip(b, ran)],
            "o-",
            color=f"C{i}",
            label=stages.get(key).title,
        )
        mem = [(r["batch_size"], r.get("mem_allocator_bytes") or r.get("mem_device_bytes")) for r in ran]
        a2.plot(
            [x for x, v in mem if v], [v / GiB for x, v in mem if v], "s-", color=f"C{i}", label=stages.get(key).title
        )
    for key, pts in batch_sweep.sweeps(rep).items():
        for r in pts:
            if r["status"] == "oom":
                a2.annotate(
                    f"OOM at B={r['batch_size']}",
                    (r["batch_size"], 0),
                    color="firebrick",
                    fontsize=7,
                    ha="right",
                    va="bottom",
                )
    if rep.env["device"].get("memory_bytes"):
        a2.axhline(rep.env["device"]["memory_bytes"] / GiB, color="grey", lw=0.7, ls=":", label="device memory")
    a1.set_ylabel("tokens / s")
    a1.set_ylim(bottom=0)  # from zero: an axis cut near the data made a 1.5 % rise look steep (a reviewer, H100)
    a1.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: fmt.tok(v)))
    a2.set_ylabel("peak allocator memory (GiB)" if rep.on_gpu else "process peak memory (GiB)")
    a2.set_ylim(bottom=0)  # from zero, as the throughput: growth toward the device's memory at its true slope
    a1.set_ylim(0, a1.get_ylim()[1] * 1.06)  # the top points clear of the frame
    for ax, title in ((a1, "Throughput"), (a2, "Memory")):
        ax.set_xlabel("batch size B (sequences of T tokens)")
        ax.set_title(title, fontsize=9)
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    return save(fig, rep, "batch_sweep")


def recommended_md(rep: Report) -> str:
    best = recommended(rep)
    if best is None:
        return "No configuration completed with its loss verified, so there is no recommendation."
    st = stages.get(best["stage"])
    ref = rep.rec(st.reference, best["batch_size"])
    parity = parity_view.recommended_check(rep)
    if parity and parity["stage"] == best["stage"]:  # the PDF has it in its executive summary: a pointer there
        delta = (
            f'<span class="html-only">{parity_view.recommended_md(rep)}</span><span class="print-only">its parity '
            f"test {parity_view.WORDS[parity['verdict']]}, as section 1 states it with its interval</span>"
        )
    elif ref and ref["status"] in OK and best.get("final_loss") is not None:
        delta = f"{fmt.nats(best['final_loss'] - ref['final_loss'], 3)} nats against {stages.get(st.reference).title} at the same batch"
    else:
        delta = (
            f"no {stages.get(st.reference).title} run at B={best['batch_size']} to compare with; the stage's loss "
            "held wherever it could be compared"
        )
    peak = (rep.params.peak_tflops or {}).get("bf16")
    p = best["processes"]
    achieved = best["achieved_tflops"] * p["median"] / best["tokens_per_s"] if best.get("achieved_tflops") else None
    mfu = (
        f"{fmt.pct(achieved / peak)} of the {fmt.setting(peak)} TFLOP/s bf16 dense peak "
        f"({fmt.tflops(achieved)} TFLOP/s achieved, at the median)"
        if peak and achieved
        else "n/a (no datasheet peak)"
    )
    switches = applied_switches(best["stage"])
    mem = ", ".join(
        f"{label.split(' (')[0]} {gib(best.get(col))} GiB" for col, label in LAYERS if best.get(col) is not None
    )
    spread = f" (median of {p['n']} processes, range {fmt.tok(p['lo'])}–{fmt.tok(p['hi'])})" if p["n"] > 1 else ""
    return (
        f"**{st.title} at B={best['batch_size']}** (T={best['seq_len']}): **{fmt.tok(p['median'])} tokens/s**{spread}, "
        f"{fmt.ms(best['median_ms'])} ms/step in the first process (p10–p90 {fmt.ms(best['p10_ms'])}–"
        f"{fmt.ms(best['p90_ms'])}), MFU {mfu}. "
        f"Memory: {mem}. {energy_and_cost(rep, best)} Loss: {delta.rstrip('.')}.\n\n"
        + export.html_only_block(
            "The code switches that produce it, in the order they are applied:\n\n```python\n"
            + "\n".join(switches)
            + "\n```",
            "The code switches that produce it, in order of their worth: section 1.",
            markdown=True,
        )
    )


def energy_and_cost(rep: Report, best: dict) -> str:
    """Energy per token of the recommended configuration (its first process's timed steps, NVML),
    and the cost per million tokens at the median throughput where a price per GPU-hour is given."""
    e = best.get("energy") or {}
    parts = []
    if j := e.get("joules_per_token"):
        parts.append(
            f"Energy: {fmt.reading(j * 1e3, 2)} mJ per token ({fmt.reading(j * 1e6 / 3600, 2)} Wh per million tokens; "
            f"GPU board, {e.get('method', 'NVML')}, average {fmt.reading(e.get('avg_power_w', 0))} W)."
        )
    else:
        parts.append(f"Energy: not measured ({e.get('reason') or 'no energy reading in this record'}).")
    r = rep.decided["recipe"] or {}
    if r.get("cost"):  # the recipe's, as page 1 states it
        parts.append(
            f"Cost: {fmt.money(r['cost'] / r['token_budget'] * 1e6, 3)} per million tokens at "
            f"${fmt.setting(r['price_per_gpu_hour'])} per GPU-hour ({r['price_source']}; `make render "
            "PRICE_PER_GPU_HOUR=...` states your own)."
        )
    else:
        parts.append(
            "Cost: no price per GPU-hour known for this device; `make render PRICE_PER_GPU_HOUR=2.49` adds one."
        )
    return " ".join(parts)


def recommended_profile_html(rep: Report) -> str:
    best = recommended(rep)
    if best is None:
        return ""
    if not best.get("kernel_profile"):
        return none("No kernel profile for the recommended configuration.")
    cats = ", ".join(f"{c} {v} %" for c, v in profiles.ranked_percents(best["kernel_profile"]))
    return f"<p>Share of busy kernel time by category: {cats}.</p>" + top_kernels_html(best, limit=10)
