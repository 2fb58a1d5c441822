"""A stage chapter's paragraph of measured facts (its "Measured" view): the speed-up over the stage
its lever is added to, memory, best throughput, DDP scaling, the plain-loop cross-check, the SDPA
backend that ran and each row without a timing, every sentence computed from the records."""

from __future__ import annotations

import pandas as pd

from lib.core import stages
from lib.report import formats as fmt
from lib.report import fidelity_view, parity_view
from lib.report.loader import Report, short, span, speedups, widest
from lib.report.prose import efficiency_reference, memory_change, one_rank_text
from lib.results import decide


def stage_summary(rep: Report, key: str) -> str:
    """One paragraph of measured facts for a stage chapter."""
    st = stages.get(key)
    rows = rep.df[rep.df["stage"] == key]
    if rows.empty:
        return f"No results for {st.title}."
    if not rows["status"].isin(["ok", "diverged"]).any():
        return f"{st.title} has no timing on this device: " + "; ".join(
            f"B={r.batch_size}: {r.status.replace('_', ' ')} ({r.reason})" for r in rows.itertuples()
        )
    parts = []
    effect = decide.lever_effect(rep.df, key)
    prev = effect["values"]
    if key != rep.stage_order[0] and not prev.empty and not st.multi_gpu:  # DDP: judged against one GPU below
        base = speedups(rep, key, "speedup_vs_baseline")
        parts.append(
            f"Against {stages.get(effect['previous']).title} the step is {span(prev.values)} as fast "
            + ("" if effect["previous"] == rep.stage_order[0] else f"({span(base.values)} against FP32) ")
            + f"at batch size{'s' if len(prev) > 1 else ''} "
            f"{', '.join(map(str, prev.index))}."
        )
        mem = memory_change(rep, key)
        if mem:
            parts.append(f"Memory: {mem}.")
    ok = rows[rows["status"].isin(["ok", "diverged"])]
    best = ok.loc[ok["tokens_per_s"].idxmax()]
    parts.append(
        f"Best throughput {fmt.tok(best['tokens_per_s'])} tokens/s at B={best['batch_size']}"
        + (f" (MFU {fmt.pct(best['mfu'])} of the {best['peak_precision']} peak)." if not pd.isna(best["mfu"]) else ".")
    )
    if st.multi_gpu:
        r = widest(ok)
        eff = fmt.pct(r["scaling_efficiency"])
        parts.append(
            f"{'The most GPUs measured, ' if len(ok) > 1 else ''}{int(r['world_size'])} GPUs at B={r['batch_size']} per GPU"
            f"{micro_text(r)}: {fmt.tok(r['tokens_per_s'])} tokens/s in all, {fmt.tok(r['per_gpu_tokens_per_s'])} per GPU"
            f"{processes_text(r)}; **scaling efficiency {eff}** against {efficiency_reference(r)}. The gradient "
            f"all-reduce costs **{fmt.pct(r['allreduce_share'])}** of the step." + one_rank_text(r)
        )

    for c in fidelity_view.crosscheck_rows(rep):
        if c["stage"] == key and c["difference"] is not None:
            parts.append(
                f"A plain nanoGPT-form loop at B={c['batch_size']}: {fmt.ms(c['plain_ms'])} ms/step against the "
                f"harness's {fmt.ms(c['harness_ms'])} ms ({fmt.pct(c['difference'], sign='+')})."
            )
    sdpa = ok["sdpa_backend"].dropna().unique()
    if len(sdpa):
        parts.append(f"SDPA backend that ran: **{', '.join(sdpa)}** (read from the dispatched operators).")
    for r in rows[rows["status"] != "ok"].itertuples():
        parts.append(f"B={r.batch_size}: **{r.status.replace('_', ' ')}** — {short(r.reason)}")
    if key in parity_view.rejected(rep):  # the chapter says what the summary says: a long run outranks 30 steps
        parts.append(f"**Not recommended**: {parity_view.rejected_reason(rep, key)}")
    return " ".join(parts)


def micro_text(r) -> str:
    """A DDP row's accumulation: the micro-steps each rank takes per optimizer step, and the global batch."""
    if pd.isna(r.get("micro_steps")) or r["micro_steps"] == 1:
        return ""
    tokens = r["batch_size"] * r["micro_steps"] * r["world_size"]
    return f" × {int(r['micro_steps'])} micro-steps ({fmt.count(tokens)} sequences per optimizer step)"


def processes_text(r) -> str:
    """Over how many fresh processes a DDP row's figures are medians, and their spread."""
    p = r.get("processes")
    if not isinstance(p, dict) or p.get("n", 1) < 2:
        return ""
    return f" (median of {p['n']} processes, {fmt.pct(p['spread'], 2)} apart)"
