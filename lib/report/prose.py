"""*How the report reads*, its summary prose: the executive summary's findings and the
recommendations, every sentence computed from the records. The method: method_text.py; a chapter's
measured facts: stage_facts.py."""

from __future__ import annotations

import pandas as pd

from lib.core import stages
from lib.report import ablation_view, fidelity_view, frontier_view, parity_view
from lib.report.loader import ADOPT_ABOVE, CV_LIMIT, ONE_RANK, Report, gib, recommended, span, speedups, widest
from lib.results import decide, noise, stats


def efficiency_reference(r) -> str:
    """What a DDP row's scaling efficiency divides by, in words, with the figure."""
    single = "" if pd.isna(r.get("single_gpu_tokens_per_s")) else f"{r['single_gpu_tokens_per_s']:,.0f} tokens/s"
    if r.get("efficiency_reference") == ONE_RANK:  # an old record: its efficiency divides by one rank
        return f"one rank of the same DDP job ({r['one_rank_tokens_per_s']:,.0f} tokens/s" + (
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
    own = f", {r['one_rank_tokens_per_s'] / single * 100:.1f} % of the one-GPU figure" if single else ""
    return (
        f" One rank of this same DDP job: {r['one_rank_tokens_per_s']:,.0f} tokens/s{own} "
        f"({r['one_rank_efficiency'] * 100:.1f} % against it)."
    )


def _ddp_finding(st, r) -> str:
    """DDP runs once, at the best single-GPU setting, so it is judged against that setting on
    one GPU rather than against the previous stage at the same batch size."""
    base = stages.get(r["base_stage"]).title if r.get("base_stage") in stages.STAGES else "the best setting"
    micro = "" if pd.isna(r.get("micro_steps")) or r["micro_steps"] == 1 else f" × {int(r['micro_steps'])} micro-steps"
    text = (
        f"**{st.title}** ({st.lever}): {int(r['world_size'])} GPUs × B={r['batch_size']}{micro} ({base}), "
        f"{r['tokens_per_s']:,.0f} tokens/s in all"
    )
    if not pd.isna(r["scaling_efficiency"]):
        text += (
            f": scaling efficiency {r['scaling_efficiency'] * 100:.1f} %, "
            f"{r['world_size'] * r['scaling_efficiency']:.2f}× {efficiency_reference(r)}"
        )
    text += "."
    if not pd.isna(r.get("allreduce_share")):
        text += f" The gradient all-reduce costs {r['allreduce_share'] * 100:.1f} % of the step."
    return text + one_rank_text(r)


def findings(rep: Report, stages_too: bool = True) -> list[str]:
    """Key findings, each with its number, from the table alone; `stages_too`: with each stage's line
    (stage_findings), which the PDF leaves to the chapters."""
    out = []
    order = rep.stage_order
    ok = rep.ok()
    if ok.empty:
        return ["No configuration completed; see the matrix for each row's status."]
    clean = ok[ok["status"] == "ok"]
    if clean.empty:
        return ["No configuration completed with a finite loss; see the matrix for each row's status."]

    rec = recommended(rep)
    if rec is not None:
        out.append(recommended_line(rep, rec))
    for line in (
        frontier_view.recipe_finding(rep),
        fidelity_view.crosscheck_finding(rep),
        parity_view.recommended_md(rep) if rec else None,
    ):
        if line:
            out.append(line)
    one_gpu = clean[~clean["stage"].map(stages.is_multi_gpu)]  # several GPUs' aggregate: its own line below
    pool = one_gpu if not one_gpu.empty else clean
    best = pool.loc[pool["tokens_per_s"].idxmax()]  # rep.df: the median over processes where several timed it
    n = len(decide.throughputs(rep.decisions).get((best["stage"], best["batch_size"])) or [None])
    base = clean[clean["stage"] == order[0]]
    line = (
        f"Fastest in the stage matrix: {best['stage_title']} at B={best['batch_size']}, "
        f"{best['tokens_per_s']:,.0f} tokens/s"
        + (f" (median of {n} processes" if n > 1 else f" ({best['median_ms']:.1f} ms/step")
    )
    if not pd.isna(best["mfu"]):
        line += f", MFU {best['mfu'] * 100:.1f} % of the {best['peak_precision']} peak"
    line += ")"
    if not base.empty:
        b0 = base.loc[base["tokens_per_s"].idxmax()]
        line += (
            f", {best['tokens_per_s'] / b0['tokens_per_s']:.2f}× the best FP32 baseline "
            f"({b0['tokens_per_s']:,.0f} tokens/s at B={b0['batch_size']})."
        )
    out.append(line)
    out += [f"{stages.get(k).title}: {parity_view.rejected_reason(rep, k)}" for k in parity_view.rejected(rep)]
    if stages_too:
        out += stage_findings(rep)
    failed = rep.df[~rep.df["status"].isin(["ok", "diverged"])]
    if not failed.empty:
        items = ", ".join(
            f"{r.stage_title} B={r.batch_size}: {r.status.replace('_', ' ').replace('oom', 'OOM')}"
            for r in failed.itertuples()
        )
        out.append(f"**Rows without a timing**: {items}.")
    if rep.on_gpu:
        out.append(_stability(rep))
    else:
        out.append(
            "This is the CPU embedded default (a tiny GPT): it proves the pipeline end to end; "
            "its timings say nothing about any GPU."
        )
    return out


def stage_findings(rep: Report) -> list[str]:
    """Each stage's line: what its lever bought over the stage it is added to, its memory and its loss gate."""
    out, ok = [], rep.ok()
    for key in rep.stage_order[1:]:
        st = stages.get(key)
        effect = decide.lever_effect(rep.df, key)
        if st.multi_gpu and not ok[ok["stage"] == key].empty:
            out.append(_ddp_finding(st, widest(ok[ok["stage"] == key])))
            continue
        ran = not ok[ok["stage"] == key].empty
        if effect["values"].empty and (not ran or not effect["previous_measured"]):
            out.append(_unjudged(rep, st, effect))
            continue
        previous = stages.get(effect["previous"]).title
        text = f"**{st.title}** ({st.lever}): " + (
            f"{span(effect['values'].values)} the speed of {previous}{fidelity_view.noise_note(rep, key)}"
            if not effect["values"].empty
            else f"no speed-up to give: {previous} has no timing at the same batch size"
        )
        diverged = rep.df[(rep.df["stage"] == key) & (rep.df["status"] == "diverged")]["batch_size"].tolist()
        if diverged:
            text += f"; **the loss diverged (NaN) at B={', '.join(map(str, diverged))}**"
        mem = memory_change(rep, key)
        if mem:
            text += f"; {mem}"
        gate = _loss_gate_text(rep, key)
        if gate:
            text += "; " + gate
        out.append(text + ".")
    return out


def _process_name(r: dict) -> str:
    """A timed process in a few words; a leave-one-out's by what it left out (it read "Loss-only forward B=64
    (without loss-only forward)")."""
    if str(r.get("variant", "")).startswith("without "):
        return f"the leave-one-out at B={r['batch_size']} {r['variant']}"
    return f"{r['stage_title']} B={r['batch_size']}" + (f" ({r['variant']})" if r.get("variant") else "")


SHOWN_NOISY = 6  # the noisiest processes named; the rest counted with their range (17 named filled a page)


def _stability(rep: Report) -> str:
    """Step-time CV over every timed process of the report: matrix, sweep, repeats, variants, leave-one-out."""
    ev = rep.evidence
    timed = [
        r
        for r in rep.records + ev["sweep"] + ev["repeats"] + ev["variants"] + ev["ablation"]
        if r.get("status") == "ok" and r.get("cv") is not None and not stages.is_multi_gpu(r.get("stage"))
    ]
    noisy = [r for r in timed if r["cv"] > CV_LIMIT]
    if not noisy:
        return (
            f"Step times are stable: every timed GPU process has CV ≤ {CV_LIMIT * 100:.0f} % "
            f"(largest {max(r['cv'] for r in timed) * 100:.2f} %)."
        )
    noisy.sort(key=lambda r: -r["cv"])
    shown, rest = noisy[:SHOWN_NOISY], noisy[SHOWN_NOISY:]
    return (
        f"Step-time CV above {CV_LIMIT * 100:.0f} % in {len(noisy)} of {len(timed)} timed processes: "
        + ", ".join(f"{_process_name(r)} {r['cv'] * 100:.1f} %" for r in shown)
        + (f" and {len(rest)} more of {rest[-1]['cv'] * 100:.1f} to {rest[0]['cv'] * 100:.1f} %" if rest else "")
        # not "robust to outliers": a CV of 3-4 % on every compiled stage of reports/h200 is no outlier
        + "; each process's figure is its median step, and every decision is judged against the spread between "
        "processes, not against this spread within one."
    )


def _unjudged(rep: Report, st, effect: dict) -> str:
    """Why a lever has no effect to show: it did not run, or the stage it adds to was not measured."""
    ran = not rep.ok()[rep.ok()["stage"] == st.key].empty
    if ran and not effect["previous_measured"]:
        base = speedups(rep, st.key, "speedup_vs_baseline")
        return (
            f"**{st.title}**: not judged: the stage it is added to, {stages.get(effect['previous']).title}, has "
            f"no measurement in this report"
            + (
                f" ({span(base.values)} the {stages.get(rep.stage_order[0]).title} with every lever between them)"
                if not base.empty
                else ""
            )
            + "."
        )
    status = [x.replace("_", " ").replace("oom", "OOM") for x in rep.df[rep.df["stage"] == st.key]["status"].unique()]
    return f"**{st.title}**: no measurement ({', '.join(status) or 'the stage did not run'})."


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
    return f"{layer} {change * 100:+.1f} % at B={b} ({gib(prev[b])} → {gib(cur[b])} GiB)"


GATE_LABELS = {
    "beyond": "**beyond** tolerance of",
    "spike": "**beyond** tolerance, by a single-step spike, of",
    "within noise": "beyond the tolerance but within noise of",
    "within": "within tolerance of",
}


def _loss_gate_text(rep: Report, key: str) -> str | None:
    """The loss gate's verdict on one stage, naming the batch sizes it could judge (a spike: its step)."""
    rows = rep.df[(rep.df["stage"] == key) & rep.df["loss_gap"].notna()]
    tol, ref, parts = rep.params.run.loss_tolerance, stages.get(stages.get(key).reference).title, []
    for verdict, label in GATE_LABELS.items():
        hit = rows[rows["loss_verdict"] == verdict]
        at = ", ".join(
            f"B={b} {g:.3f}" + (f" at step {int(k)}" if verdict == "spike" else "")
            for b, g, k in zip(hit["batch_size"], hit["loss_gap"], hit.get("loss_spike_step", hit["loss_gap"]))
        )
        if at:
            parts.append(
                f"loss {label} {ref} (largest 5-step-average gap after warm-up: {at}; tolerance {tol:g} nats"
                + (
                    f", run-to-run noise {rep.loss_noise:.3f}: the widest drift here, {rep.loss_noise_from}'s"
                    if verdict != "within"
                    else ""
                )
                + ")"
            )
    return "; ".join(parts) or None


def recommendations(rep: Report) -> list[str]:
    """Keep a lever when it made the step faster without breaking loss parity."""
    out, keep = [], []
    for key in rep.stage_order[1:]:
        st = stages.get(key)
        effect = decide.lever_effect(rep.df, key)
        delta = rep.df[rep.df["stage"] == key]["loss_gap"].dropna()
        multi = rep.ok()[rep.ok()["stage"] == key] if st.multi_gpu else None
        if multi is not None and not multi.empty:  # judged against one GPU at its own setting, not the stage before
            r = widest(multi)
            eff = (
                ""
                if pd.isna(r["scaling_efficiency"])
                else f" at {r['scaling_efficiency'] * 100:.1f} % scaling efficiency"
            )
            out.append(
                f"**{st.title}**: adopt to train faster with more GPUs: {int(r['world_size'])} GPUs give "
                f"{r['tokens_per_s']:,.0f} tokens/s{eff}."
            )
            continue
        med = effect["median"]
        if (rep.df[rep.df["stage"] == key]["status"] == "diverged").any():
            out.append(f"**{st.title}**: do not adopt as is: its loss diverged (NaN).")
        elif key in parity_view.rejected(rep):
            out.append(
                f"**{st.title}**: do not adopt as is (median {med:.2f}× over "
                f"{stages.get(effect['previous']).title}): {parity_view.rejected_reason(rep, key)}"
            )
        elif (rep.df[rep.df["stage"] == key]["loss_verdict"].isin(stats.GATE_FAILS)).any():
            out.append(
                f"**{st.title}**: do not adopt as is: the loss moved {delta.max():.3f} nats from "
                f"{stages.get(st.reference).title} (5-step average)."
            )
        elif effect["values"].empty:
            out.append(_unjudged(rep, st, effect)[:-1] + ", no recommendation.")
        elif fidelity_view.noise_note(rep, key):
            out.append(
                f"**{st.title}**: neutral on this device (median {med:.2f}×, within noise); weigh its other "
                f"effects: {_other_effects(rep, key)}."
            )
        elif med >= ADOPT_ABOVE:
            keep.append(st.title)
            # its worth stated both ways: over the stage it is added to, and on top of every other lever
            alone = ablation_view.worth_at_recommendation(rep, key)
            out.append(
                f"**{st.title}**: adopt (median {med:.2f}× over {stages.get(effect['previous']).title}, "
                "loss within tolerance)"
                + (f"; on top of the recommendation's other levers (leave-one-out): {alone}." if alone else ".")
            )
        elif med > 0.98:
            out.append(
                f"**{st.title}**: neutral on this device (median {med:.2f}×); weigh its other effects: "
                f"{_other_effects(rep, key)}."
            )
        else:
            out.append(
                f"**{st.title}**: slower here (median {med:.2f}×; {_other_effects(rep, key)}); investigate "
                "before adopting."
            )
    best = recommended(rep)
    if best is not None:
        peak = best.get("mem_allocator_bytes")
        out.insert(0, recommended_line(rep, best) + (f" Allocator peak {gib(peak)} GiB." if peak else ""))
    return out


def _other_effects(rep: Report, key: str) -> str:
    """Besides speed, against the stage it is added to: memory, a first step (compilation) over twice as long, failures."""
    ok, prev = rep.ok(), decide.previous_stage(key)
    first = {k: ok[ok["stage"] == k].set_index("batch_size")["first_step_s"].dropna() for k in (key, prev)}
    b = min(set(first[key].index) & set(first[prev].index), default=None)
    failed = rep.df[(rep.df["stage"] == key) & (rep.df["status"] == "error")]["batch_size"].tolist()
    return "; ".join(
        [memory_change(rep, key) or "no memory comparison"]
        + (
            [f"first step {first[key][b]:.0f} s against {first[prev][b]:.0f} s at B={b}"]
            if b is not None and first[key][b] > 2 * first[prev][b] and first[key][b] >= 1
            else []
        )
        + (["failed at B=" + ", ".join(map(str, failed))] if failed else [])
    )


def recommended_line(rep: Report, best: dict) -> str:
    """The recommendation in one sentence: its median over processes, their range, its MFU at
    that median, and why it was preferred over a faster-looking batch size."""
    p = best["processes"]
    line = (
        f"**Recommended configuration: {best['stage_title']} at B={best['batch_size']}**, {p['median']:,.0f} tokens/s"
    )
    if p["n"] > 1:
        line += f" (median of {p['n']} processes, range {p['lo']:,.0f}–{p['hi']:,.0f})"
    if best.get("mfu") is not None:
        line += (
            f", MFU {best['mfu'] * p['median'] / best['tokens_per_s'] * 100:.1f} % of the {best['peak_precision']} peak"
        )
    c = best.get("chosen_over")
    line += (
        f"; tied by the tie rule (section 3) with the fastest measured setting that passed its loss checks, "
        f"B={c['batch_size']}, and preferred to it for its smaller memory footprint"
        if c
        else "; the fastest measured setting that passed its loss checks"
    )
    return line + "." + tie_call(best, noise.noise_floor(decide.throughputs(rep.decisions)))


def tie_call(best: dict, floor: float | None = None) -> str:
    """The tie rule's nearest call in numbers: the recommendation against the next-fastest batch size of its stage
    timed in several processes, and the noise the difference was judged against; where the report's noise floor
    (the widest spread of any configuration, `floor`) would have called it otherwise, that reading beside it."""
    a = best.get("against")
    if not a:
        return ""
    gap = f"Against B={a['batch_size']} it is {abs(a['ratio'] - 1) * 100:.2f} % " + (
        "faster" if a["ratio"] >= 1 else "slower"
    )
    if a["band"] is None:
        return f" {gap}, not judged against noise: the offset between the machines that timed them is not measured."
    tie = a["tie"]
    call = "not a tie" if not tie else "a tie; it is also the faster" if a["ratio"] >= 1 else "a tie, settled by memory"
    other = (
        f" Against the report's noise floor ({floor * 100:.2f} %, the widest spread of any configuration timed in "
        "several processes) the two would tie; the rule, stated before the numbers, judges the two compared by their "
        "own ranges."
        if not tie and floor is not None and abs(a["ratio"] - 1) <= floor
        else ""
    )
    return f" {gap}, {'within' if tie else 'beyond'} {fidelity_view.tie_basis(a)}: {call}.{other}"
