"""*How the report reads*, its summary prose: the executive summary's findings and the
recommendations, every sentence computed from the records. The method: method_text.py; a chapter's
measured facts: stage_facts.py."""

from __future__ import annotations

import pandas as pd

from lib.report import fidelity_view
from lib.report.loader import Report, gib, pct, tok
from lib.results.scaling import ONE_RANK
from lib.results import decide


def efficiency_reference(r) -> str:
    """What a DDP row's scaling efficiency divides by, in words, with the figure."""
    single = "" if pd.isna(r.get("single_gpu_tokens_per_s")) else f"{tok(r['single_gpu_tokens_per_s'])} tokens/s"
    if r.get("efficiency_reference") == ONE_RANK:  # an old record: its efficiency divides by one rank
        return f"one rank of the same DDP job ({tok(r['one_rank_tokens_per_s'])} tokens/s" + (
            f"; the single-GPU row: {single})" if single else ")"
        )
    if isinstance(r.get("efficiency_reference"), str):
        return f"{r['efficiency_reference']}: {single}"
    return f"one GPU at the same setting ({single or 'n/a'})"


def one_rank_text(r) -> str:
    """One rank of the same DDP job, beside the efficiency and named as such (what the wrapper costs
    alone); empty for a record whose efficiency already divides by it, or without one."""
    if r.get("efficiency_reference") == ONE_RANK or pd.isna(r.get("one_rank_efficiency")):
        return ""
    single = r.get("single_gpu_tokens_per_s")
    # with nothing to reduce, how far DDP alone falls from the one-GPU figure; the rest of the loss is the other ranks'
    own = f", {pct(r['one_rank_tokens_per_s'] / single)} of the one-GPU figure" if single else ""
    return (
        f" One rank of this same DDP job: {tok(r['one_rank_tokens_per_s'])} tokens/s{own} "
        f"({pct(r['one_rank_efficiency'])} against it)."
    )


def memory_change(rep: Report, key: str) -> str | None:
    """Allocator-level (or, on CPU, process-level) memory against the stage the lever is added to,
    at the largest batch size both completed."""
    col = "mem_allocator_bytes" if rep.on_gpu else "mem_device_bytes"
    ok = rep.ok()
    cur = ok[ok["stage"] == key].set_index("batch_size")[col].dropna()
    prev = ok[ok["stage"] == decide.previous_stage(key)].set_index("batch_size")[col].dropna()
    common = sorted(set(cur.index) & set(prev.index))
    if not common:
        return None
    b = common[-1]
    change = cur[b] / prev[b] - 1
    layer = "allocator memory" if rep.on_gpu else "process peak memory"
    return f"{layer} {pct(change, sign='+')} at B={b} ({gib(prev[b])} → {gib(cur[b])} GiB)"


def recommended_line(rep: Report, best: dict) -> str:
    """The recommendation in one sentence: its median over processes, their range, its MFU at
    that median, and why it was preferred over a faster-looking batch size."""
    p = best["processes"]
    line = (
        f"**Recommended configuration: {best['stage_title']} at B={best['batch_size']}**, {tok(p['median'])} tokens/s"
    )
    if p["n"] > 1:
        line += f" (median of {p['n']} processes, range {tok(p['lo'])}–{tok(p['hi'])})"
    if best.get("mfu") is not None:
        line += f", MFU {pct(best['mfu'] * p['median'] / best['tokens_per_s'])} of the {best['peak_precision']} peak"
    line += "; the fastest verified micro-batch that reaches the global batch by whole accumulation steps"
    return line + "." + tie_call(best, rep.decided["process_floor"])


def tie_call(best: dict, floor: float | None = None) -> str:
    """The tie rule's nearest call in numbers: the recommendation against the next-fastest batch size of its stage
    timed in several processes, and the noise the difference was judged against; where the report's noise floor
    (the widest spread of any configuration, `floor`) would have called it otherwise, that reading beside it."""
    a = best.get("against")
    if not a:
        return ""
    gap = f"Against B={a['batch_size']} it is {pct(abs(a['ratio'] - 1), 2)} {'faster' if a['ratio'] >= 1 else 'slower'}"
    if a["band"] is None:
        return f" {gap}, not judged against noise: the offset between the machines that timed them is not measured."
    tie = a["tie"]
    call = "a tie, so the smaller is listed as a memory saver" if tie else "not a tie"
    other = (
        f" Against the report's noise floor ({pct(floor, 2)}, the widest spread of any configuration timed in "
        "several processes) the two would tie; the rule, stated before the numbers, judges the two compared by their "
        "own ranges."
        if not tie and floor is not None and abs(a["ratio"] - 1) <= floor
        else ""
    )
    return f" {gap}, {'within' if tie else 'beyond'} {fidelity_view.tie_basis(a)}: {call}.{other}"
