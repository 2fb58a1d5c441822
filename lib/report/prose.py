"""*How the report reads*, its prose: the method, the executive summary's findings, the
recommendations and each chapter's measured facts, every sentence computed from the records."""

from __future__ import annotations

import pandas as pd

from lib.core import data, stages
from lib.report import fidelity_view, frontier_view, parity_view
from lib.report.loader import ADOPT_ABOVE, CV_LIMIT, Report, gib, recommended, short, span, speedups, widest
from lib.results import decide, stats


def method_md(rep: Report) -> str:
    r, m = rep.params["run"], rep.params["model"]
    peaks = rep.params.get("peak_tflops")
    peak_txt = (
        ", ".join(f"{k} {v:g}" for k, v in peaks.items()) + " TFLOP/s"
        if peaks
        else "none for this device, so MFU is n/a"
    )
    timer = (
        "CUDA events around each step"
        if rep.on_gpu
        else "`time.perf_counter` around each step, after a device synchronize"
    )
    return f"""
* **Model**: GPT-2, {m["n_layer"]} layers, {m["n_head"]} heads, d={m["n_embd"]}, T={r["seq_len"]},
  vocabulary {m["vocab_size"]} (padded to {m["padded_vocab_size"]} in the vocab stage); AdamW
  (lr {r["learning_rate"]:g}, β=(0.9, 0.95), weight decay {r["weight_decay"]:g}), gradient clipping at {r["grad_clip"]:g}.
* **Isolation**: every (stage, batch) configuration runs in a fresh Python process, so memory peaks,
  allocator state and library workspaces never carry over. A process that compiles a shape an earlier one
  compiled loads inductor's kernels from its on-disk cache (a shorter first step); its timed steps run the
  same kernels. The model is initialised from seed
  {r["seed"]} on the CPU and every stage sees the same batches in the same order.
* **Initial weights**: {_init_note(rep)}
* **Timing**: {r["warmup_steps"]} warm-up steps (not counted), then {r["timed_steps"]} timed steps, {timer}.
  All batches are on the device before timing starts. We report the median, p10 and p90 of the step
  time and the coefficient of variation (CV = standard deviation / mean); tokens/s = B·T / median.
* **MFU** = FLOPs per token × tokens/s ÷ peak, with FLOPs per token = 6N + 12·L·d·T (N without
  position embeddings), against the bf16 dense peak for every stage, and beside it the peak of the precision
  its GEMMs run in ({_by_stage(rep, "peak")}). Peaks: {peak_txt}.
* **Compilation**: the first step of every configuration (which pays for `torch.compile`, cuBLAS
  heuristics and allocator growth) is timed on its own and reported as "first step"; it is a warm-up step.
* **Memory**, three layers: *tensors* = `max_memory_allocated` (live tensors at their peak),
  *allocator* = `max_memory_reserved` (what PyTorch's caching allocator held), *device* = memory in use
  on the device after the timed steps as `nvidia-smi` would show it (adds the CUDA context and library
  workspaces), and, in records that have it, the device's *peak* over the warm-up steps (NVML, sampled
  every 5 ms). On a CPU only the process's peak resident memory is known.
* **Loss gate**: every step after warm-up is compared with the stage's reference at the same batch
  size (same seed, same batches): a stage passes when the {stats.LOSS_GATE_WINDOW}-step moving average
  of the loss difference never leaves ±{r["loss_tolerance"]:g} nats; a gap beyond it by less than the drift of the
  same statistic between two processes of one configuration ({rep.loss_noise:.3f} nats here) is *within noise*, so
  the gate catches only a departure larger than {r["loss_tolerance"] + rep.loss_noise:.3f} nats (the parity test judges finer); a
  gap that one step's loss makes (the rest of the curve within half the gate) is reported as a *single-step spike* at that step; it fails the gate all the same.
  References: {_by_stage(rep, "reference")}.
  "Final loss" is the mean
  of the last {r["final_loss_window"]} steps. The loss is computed as nanoGPT computes it, over every column
  of the logits (the padded ones included; they are never targets).
{{fidelity}}* **Kernel profile**: after the timed steps, one more training step under `torch.profiler`; device
  kernel time (on a CPU, operators' self time) grouped into GEMM, attention, cross-entropy,
  normalisation/elementwise, optimizer and other by launching aten op, else kernel name, with today's rules
  (`lib/core/kernel_categories.py`, applied when the report is drawn); shares are of busy kernel time, not step time.
* **Energy**: {_energy_method(rep)}
* **Failures are results**: an out-of-memory configuration is an OOM row, a NaN loss a DIVERGED row,
  a stage the device cannot run a "not applicable" row.
""".replace("{fidelity}", _fidelity_method(rep))


def _fidelity_method(rep: Report) -> str:
    """The method of the parity run, the cross-check and the repeats, or why the report has none."""
    ev = rep.params.get("evidence") or {}
    if "parity_steps" not in ev:
        return (
            f"* **Measurement method {rep.params.get('method', 1)}**: this report was measured before the one "
            "training-step core, the canonical loss path (its loss copied the logits to fp32 and sliced off "
            "the padding), the plain-loop cross-check, the repeats and the parity run existed; its figures "
            "carry none of them.\n"
        )
    return f"""* **Parity test**, the rule fixed before any number: {parity_view.rule(ev)}. Each run trains at the batch
  size recommended when it ran (the run names it) for at most {ev["parity_steps"]} steps and at most {ev["parity_passes"]:g}
  passes over the training text (more would measure how fast the model overfits this corpus), with nanoGPT's
  learning-rate shape (linear warm-up over the first quarter, cosine decay to a tenth), the reference
  accumulating gradients over micro-batches where the matrix did not time it at that batch; its held-out loss
  is read on {ev["held_out_batches"]} batches from the last {int(data.HELD_OUT * 100)} % of the corpus, which no run trains on.
* **Cross-check**: a plain training loop in nanoGPT's form (`lib/train/plain_loop.py`: its own model, only the
  data shared) runs beside the harness at the flash and vocab stages and at the configuration recommended
  when it ran (table below). Its figure is the wall time of its timed steps over their number, the host running ahead of
  the device as in nanoGPT's loop; it also times each step after `torch.cuda.synchronize()`, as
  build-nanogpt does.
* **Repeats and noise**: the recommended configuration, its runner-up and both sides of the timing claims
  the runs knew of run in a second fresh process{fidelity_view.repeats_rule(ev)} (the table below lists exactly which);
  {fidelity_view.noise_sentence(rep)}
* **Batch size**, the tie rule fixed before any number: {fidelity_view.BATCH_TIE_RULE}
"""


def _by_stage(rep: Report, fact: str) -> str:
    """One fact of every stage in the report, grouped by value, from the stage registry: which
    peak each stage's MFU is quoted against, or which stage its loss is held against."""
    groups: dict = {}
    for key in stages.single_gpu(rep.stage_order):
        st = stages.get(key)
        if fact == "reference" and st.reference == key:
            continue
        groups.setdefault(getattr(st, fact), []).append(st.title)
    name = (lambda v: f"{v} peak") if fact == "peak" else (lambda v: stages.get(v).title)
    verb = " for " if fact == "reference" else ": "
    return "; ".join(f"{name(v)}{verb}{', '.join(titles)}" for v, titles in groups.items()) or "none"


def _energy_method(rep: Report) -> str:
    found = [r["energy"] for r in rep.records if isinstance(r.get("energy"), dict)]
    measured = [e for e in found if e.get("energy_j")]
    if measured:
        return (
            f"GPU energy over the timed steps from {measured[0]['method']}, divided by the tokens trained "
            "in them (joules per token); average power = energy / elapsed time. Whole-board energy, "
            "as NVML reports it."
        )
    if found:
        return f"not measured on this device: {found[0].get('unavailable')}."
    return "not recorded for these results."


def _init_note(rep: Report) -> str:
    """Whether every stage really started from the same weights (checksums recorded per run)."""
    sums = {r["stage"]: r.get("init_checksum") for r in rep.records if r["status"] in ("ok", "diverged", "oom")}
    if not sums or any(v is None for v in sums.values()):
        return (
            "not verified for this report: its results were measured before the initial-weight checksum "
            "was recorded (and before a fix that gives the padded-vocabulary stage the same initial "
            "weights as the others), so the vocab stage's loss difference includes initialisation noise."
        )
    if len(set(sums.values())) == 1:
        return f"identical for every stage (checksum {next(iter(sums.values()))} over the real vocabulary)."
    groups = {}
    for stage, v in sums.items():
        groups.setdefault(v, []).append(stage)
    return (
        "**differ between stages**: "
        + "; ".join(", ".join(g) for g in groups.values())
        + ": their loss differences include initialisation noise."
    )


def efficiency_reference(r) -> str:
    """What a DDP row's scaling efficiency divides by, in words, with the figures."""
    single = "" if pd.isna(r.get("single_gpu_tokens_per_s")) else f"{r['single_gpu_tokens_per_s']:,.0f} tokens/s"
    if not pd.isna(r.get("one_rank_tokens_per_s")):
        return f"one rank of the same DDP job ({r['one_rank_tokens_per_s']:,.0f} tokens/s" + (
            f"; the single-GPU row: {single})" if single else ")"
        )
    return f"one GPU at the same setting ({single or 'n/a'})"


def _ddp_finding(st, r) -> str:
    """DDP runs once, at the best single-GPU setting, so it is judged against that setting on
    one GPU rather than against the previous stage at the same batch size."""
    base = stages.get(r["base_stage"]).title if r.get("base_stage") in stages.STAGES else "the best setting"
    text = (
        f"**{st.title}** ({st.lever}): {int(r['world_size'])} GPUs × B={r['batch_size']} ({base}), "
        f"{r['tokens_per_s']:,.0f} tokens/s in all"
    )
    if not pd.isna(r["scaling_efficiency"]):
        text += (
            f", {r['world_size'] * r['scaling_efficiency']:.2f}× {efficiency_reference(r)}: "
            f"scaling efficiency {r['scaling_efficiency'] * 100:.1f} %"
        )
    if not pd.isna(r.get("allreduce_share")):
        text += f"; the gradient all-reduce costs {r['allreduce_share'] * 100:.1f} % of the step"
    return text + "."


def findings(rep: Report) -> list[str]:
    """Key findings, each with its number, from the table alone."""
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
    best = pool.loc[pool["tokens_per_s"].idxmax()]
    base = clean[clean["stage"] == order[0]]
    line = (
        f"Fastest in the stage matrix: {best['stage_title']} at B={best['batch_size']}, "
        f"{best['tokens_per_s']:,.0f} tokens/s ({best['median_ms']:.1f} ms/step"
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
    for key in order[1:]:
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
        mem = _memory_change(rep, key)
        if mem:
            text += f"; {mem}"
        gate = _loss_gate_text(rep, key)
        if gate:
            text += "; " + gate
        out.append(text + ".")
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


def _stability(rep: Report) -> str:
    """Step-time CV over every timed process of the report: matrix, sweep, repeats, variants."""
    ev = rep.evidence
    timed = [
        r
        for r in rep.records + ev["sweep"] + ev["repeats"] + ev["variants"]
        if r.get("status") == "ok" and r.get("cv") is not None and not stages.is_multi_gpu(r.get("stage"))
    ]
    noisy = [r for r in timed if r["cv"] > CV_LIMIT]
    if not noisy:
        return (
            f"Step times are stable: every timed GPU process has CV ≤ {CV_LIMIT * 100:.0f} % "
            f"(largest {max(r['cv'] for r in timed) * 100:.2f} %)."
        )
    return (
        f"Step-time CV above {CV_LIMIT * 100:.0f} % in {len(noisy)} of {len(timed)} timed processes: "
        + ", ".join(
            f"{r['stage_title']} B={r['batch_size']}{' (' + r['variant'] + ')' if r.get('variant') else ''} "
            f"{r['cv'] * 100:.1f} %"
            for r in noisy
        )
        + "; the medians are robust to such outliers."
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


def _memory_change(rep: Report, key: str) -> str | None:
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
    tol, ref, parts = rep.params["run"]["loss_tolerance"], stages.get(stages.get(key).reference).title, []
    for verdict, label in GATE_LABELS.items():
        hit = rows[rows["loss_verdict"] == verdict]
        at = ", ".join(
            f"B={b} {g:.3f}" + (f" at step {int(k)}" if verdict == "spike" else "")
            for b, g, k in zip(hit["batch_size"], hit["loss_gap"], hit.get("loss_spike_step", hit["loss_gap"]))
        )
        if at:
            parts.append(
                f"loss {label} {ref} (largest 5-step-average gap after warm-up: {at}; tolerance {tol:g} nats"
                + (f", run-to-run noise {rep.loss_noise:.3f}" if verdict != "within" else "")
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
            out.append(
                f"**{st.title}**: adopt (median {med:.2f}× over {stages.get(effect['previous']).title}, "
                "loss within tolerance)."
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
        [_memory_change(rep, key) or "no memory comparison"]
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
        f"; within noise of the fastest measured setting that passed its loss checks, B={c['batch_size']}, and preferred "
        "to it for its smaller memory footprint"
        if c
        else "; the fastest measured setting that passed its loss checks"
    )
    return line + "."


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
        mem = _memory_change(rep, key)
        if mem:
            parts.append(f"Memory: {mem}.")
    ok = rows[rows["status"].isin(["ok", "diverged"])]
    best = ok.loc[ok["tokens_per_s"].idxmax()]
    parts.append(
        f"Best throughput {best['tokens_per_s']:,.0f} tokens/s at B={best['batch_size']}"
        + (
            f" (MFU {best['mfu'] * 100:.1f} % of the {best['peak_precision']} peak)."
            if not pd.isna(best["mfu"])
            else "."
        )
    )
    if st.multi_gpu:
        r = widest(ok)
        eff = "n/a" if pd.isna(r["scaling_efficiency"]) else f"{r['scaling_efficiency'] * 100:.1f} %"
        parts.append(
            f"{'The most GPUs measured, ' if len(ok) > 1 else ''}{int(r['world_size'])} GPUs at B={r['batch_size']} per GPU: {r['tokens_per_s']:,.0f} tokens/s "
            f"in all, {r['per_gpu_tokens_per_s']:,.0f} per GPU; **scaling efficiency {eff}** against "
            f"{efficiency_reference(r)}; the gradient all-reduce costs **{r['allreduce_share'] * 100:.1f} %** of "
            "the step (step time with and without gradient synchronisation)."
        )

    for c in fidelity_view.crosscheck_rows(rep):
        if c["stage"] == key and c["difference"] is not None:
            parts.append(
                f"A plain nanoGPT-form loop at B={c['batch_size']}: {c['plain_ms']:.1f} ms/step against the "
                f"harness's {c['harness_ms']:.1f} ms ({c['difference'] * 100:+.1f} %)."
            )
    sdpa = ok["sdpa_backend"].dropna().unique()
    if len(sdpa):
        parts.append(f"SDPA backend that ran: **{', '.join(sdpa)}** (read from the dispatched operators).")
    for r in rows[rows["status"] != "ok"].itertuples():
        parts.append(f"B={r.batch_size}: **{r.status.replace('_', ' ')}** — {short(r.reason)}")
    if key in parity_view.rejected(rep):  # the chapter says what the summary says: a long run outranks 30 steps
        parts.append(f"**Not recommended**: {parity_view.rejected_reason(rep, key)}")
    return " ".join(parts)
