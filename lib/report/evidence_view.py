"""*How the evidence reads*: the tables and charts behind each chapter's explanation (memory
layers, sequence-length sweep, the padding under torch.compile, energy, DDP scaling), computed from
a report folder's records only (the sequence sweep by length and the memory layers' changes:
lib/results/evidence_points.py). Kernel-time profiles: profile_view.py; the lm_head GEMM sweep:
gemm_sweep_view.py."""

from __future__ import annotations

import html

import pandas as pd

from lib.core import config, stages
from lib.report import formats as fmt
from lib.report.charts import save, style
from lib.report.loader import DEVICE_PEAK, LAYERS, GiB, Report, best_single_gpu, ddp_not_measured, scaling_curve
from lib.results import evidence_points

OK = ("ok", "diverged")


def ok(r: dict | None) -> bool:
    """Whether `r` is a record that timed its steps (status ok or diverged)."""
    return bool(r) and r.get("status") in OK


def table(rows: list[dict], cls: str = "matrix") -> str:
    """Rows of formatted cells; a cell a row does not have (a stage with no profile) is blank, never NaN."""
    return pd.DataFrame(rows).fillna("").to_html(index=False, escape=False, classes=cls, border=0) if rows else ""


def none(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


# ---------------------------------------------------------------- memory layers


def memory_layers_html(rep: Report, stage: str, versus: str) -> str:
    """The three memory layers of `versus` and `stage` side by side at every batch both ran,
    plus what lives outside PyTorch's allocator (device - allocator: CUDA context, cuBLAS and
    cuDNN workspaces, NCCL buffers)."""
    rows = []
    for b in rep.params.run.batch_sizes:
        a, s = rep.rec(versus, b), rep.rec(stage, b)
        if not (a and s and a["status"] in OK and s["status"] in OK):
            continue
        for col, label in (*rep.layers, DEVICE_PEAK) if rep.on_gpu else rep.layers:
            va, vs = a.get(col), s.get(col)
            if va is None or vs is None:
                continue
            rows.append(
                {
                    "B": b,
                    "layer": label,
                    f"{versus} GiB": fmt.gib(va),
                    f"{stage} GiB": fmt.gib(vs),
                    "Δ GiB": fmt.gib(vs - va, sign="+"),
                    "Δ %": fmt.pct(vs / va - 1, sign="+"),
                }
            )
        if rep.on_gpu and all(
            x.get(c) is not None for x in (a, s) for c in ("mem_device_bytes", "mem_allocator_bytes")
        ):
            oa = a["mem_device_bytes"] - a["mem_allocator_bytes"]
            os_ = s["mem_device_bytes"] - s["mem_allocator_bytes"]
            rows.append(
                {
                    "B": b,
                    "layer": "outside the allocator (device − allocator)",
                    f"{versus} GiB": fmt.gib(oa),
                    f"{stage} GiB": fmt.gib(os_),
                    "Δ GiB": fmt.gib(os_ - oa, sign="+"),
                    "Δ %": fmt.pct(os_ / oa - 1, sign="+") if oa else "",
                }
            )
    if not rows:
        return none(f"No batch size where both {versus} and {stage} completed: no memory comparison.")
    return table(rows)


def memory_layers_md(rep: Report, stage: str, versus: str) -> str:
    """One sentence per layer: does `stage` change memory against `versus`, and where."""
    col_names = dict((*LAYERS, DEVICE_PEAK))
    changes = evidence_points.layer_changes(rep, stage, versus, col_names)
    if not changes:
        return f"No batch size where both {stages.get(versus).title} and {stages.get(stage).title} completed."
    parts = []
    for col, vals in changes.items():
        worst = max(vals, key=lambda v: abs(v[1]))
        word = "unchanged" if abs(worst[1]) < 0.005 else ("smaller" if worst[1] < 0 else "larger")
        parts.append(
            f"{col_names[col].split(' (')[0]}: {word} ({fmt.pct(worst[1], sign='+')}, {fmt.gib(worst[2], sign='+')} GiB at B={worst[0]})"
        )
    return (
        f"{stages.get(stage).title} against {stages.get(versus).title}, largest change per layer — "
        + "; ".join(parts)
        + "."
    )


# ---------------------------------------------------------------- sequence-length sweep


def seq_sweep_html(rep: Report) -> str:
    by = evidence_points.seq_by_length(rep)
    if not by and not config.runs_evidence(rep.params, "seq_curve"):
        return none("The sequence-length curve is measured at DEPTH=full only (page 1 names the command that adds it).")
    if not by:
        return none("The sequence-length sweep was not measured for this report.")

    def cell(r):
        return fmt.ms(r["median_ms"]) if ok(r) else (r["status"].upper().replace("_", " ") if r else "—")

    rows = []
    for t, pair in by.items():
        n, f = pair.get("bf16"), pair.get("flash")
        speed = fmt.times(n["median_ms"] / f["median_ms"]) if ok(n) and ok(f) else ""
        rows.append(
            {
                "T": t,
                "B": (f or n)["batch_size"],
                "naive ms/step": cell(n),
                "SDPA ms/step": cell(f),
                "SDPA speed-up": speed,
                "naive tensors GiB": fmt.gib(n.get("mem_tensors_bytes")) if n and n["status"] in OK else "",
                "SDPA tensors GiB": fmt.gib(f.get("mem_tensors_bytes")) if f and f["status"] in OK else "",
                "SDPA backend": (f or {}).get("sdpa_backend") or "",
            }
        )
    return table(rows)


def plot_seq_sweep(rep: Report):
    by = evidence_points.seq_by_length(rep)
    if not by:
        return None
    plt = style()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3))
    for key, label, c in (("bf16", "naive attention", "C3"), ("flash", "SDPA", "C0")):
        ts = [t for t in by if by[t].get(key) and by[t][key]["status"] in OK]
        a1.plot(ts, [by[t][key]["median_ms"] for t in ts], "o-", color=c, label=label)
        mem = [(t, by[t][key].get("mem_tensors_bytes") or by[t][key].get("mem_device_bytes")) for t in ts]
        a2.plot([t for t, v in mem if v], [v / GiB for t, v in mem if v], "o-", color=c, label=label)
        for t in by:
            r = by[t].get(key)
            if r and r["status"] == "oom":
                a1.annotate("OOM", (t, 0), color="firebrick", fontsize=7, ha="center")
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(by), [str(t) for t in by])
        ax.set_xlabel("sequence length T (B = tokens per step / T)")
        ax.legend(frameon=False, fontsize=7)
    a1.set_ylabel("ms / step (median)")
    a2.set_ylabel("peak tensor memory (GiB)" if rep.on_gpu else "process peak memory (GiB)")
    a1.set_title("Step time, same tokens per step", fontsize=9)
    a2.set_title("Memory", fontsize=9)
    fig.tight_layout()
    return save(fig, rep, "seq_sweep")


# ---------------------------------------------------------------- the padding under torch.compile


def compile_vocab_html(rep: Report) -> str:
    """The padding's effect with and without torch.compile, at the batch size of the variant."""
    var = next((r for r in rep.evidence["variants"] if r.get("variant") == "unpadded vocab"), None)
    if var is None:
        return none("The compile stage at the unpadded vocabulary was not measured for this report.")
    b = var["batch_size"]
    control = (
        next(
            (r for r in rep.evidence["variants"] if r.get("variant") == "unpadded vocab, Inductor shape padding off"),
            None,
        )
        if config.runs_evidence(rep.params, "shape_padding_control")
        else None  # left to DEPTH=full (page 1 lists it)
    )
    pairs = [
        ("eager (flash → vocab stage)", rep.rec("flash", b), rep.rec("vocab", b)),
        ("torch.compile (same stage at 50257 → 50304)", var, rep.rec("compile", b)),
        ("torch.compile, Inductor's own shape padding off at 50257 (the control)", control, rep.rec("compile", b)),
    ]
    if control is None:  # left to DEPTH=full (the report lists it under what was not measured)
        pairs.pop()

    def ms(r):  # a matrix configuration's figure is the median over its processes, as in the matrix table
        if r is None or r["status"] not in OK:
            return None
        row = rep.df[(rep.df["stage"] == r["stage"]) & (rep.df["batch_size"] == r["batch_size"])]
        return float(row["median_ms"].iloc[0]) if not r.get("variant") and len(row) else r["median_ms"]

    rows = []
    for label, un, pad in pairs:
        un_ms, pad_ms = ms(un), ms(pad)
        rows.append(
            {
                "B": b,
                "mode": label,
                "50257 ms/step": fmt.ms(un_ms) if un_ms else (un or {}).get("status", "—"),
                "50304 ms/step": fmt.ms(pad_ms) if pad_ms else (pad or {}).get("status", "—"),
                "padding speed-up": fmt.times(un_ms / pad_ms) if un_ms and pad_ms else "",
            }
        )
    return table(rows)


# ---------------------------------------------------------------- energy


def energy_html(rep: Report) -> str:
    rows, why = [], None
    for r in rep.records:
        e = r.get("energy") or {}
        if r["status"] not in OK or stages.is_multi_gpu(r["stage"]):
            continue
        if not e.get("joules_per_token"):
            why = why or e.get("unavailable")
            continue
        rows.append(
            {
                "Stage": r["stage_title"],
                "B": r["batch_size"],
                "avg. power W": fmt.reading(e["avg_power_w"]),
                "mJ / token": fmt.reading(e["joules_per_token"] * 1e3, 3),
                "tokens / kJ": fmt.count(1e3 / e["joules_per_token"]),
                # the tokens/s of the window the energy was read over (its steps, end to end): power / this is the
                # mJ per token, where the matrix's figure is the median step's, and the median of processes
                "tok/s in that window": fmt.tok(e["energy_j"] / e["joules_per_token"] / e["seconds"]),
            }
        )
    if not rows:
        return none("Energy was not measured on this device: " + (why or "no energy record in these results") + ".")
    order = {k: i for i, k in enumerate(rep.stage_order)}
    rows.sort(key=lambda x: (order[next(k for k in rep.stage_order if stages.get(k).title == x["Stage"])], x["B"]))
    return table(rows)


# ---------------------------------------------------------------- DDP scaling


def ddp_curve_html(rep: Report) -> str:
    """The DDP chapter's account: the scaling table, then the jobs of this host left unmeasured."""
    return ddp_curve_table_html(rep) + ddp_missing_html(rep)


def ddp_curve_table_html(rep: Report) -> str:
    """The scaling curve as a table (loader.scaling_curve), under a line that names the single-GPU
    configuration every efficiency divides by (the summary says what was not measured in host_html, above it)."""
    curve, single = scaling_curve(rep), best_single_gpu(rep)
    if not curve:
        return none(
            "No multi-GPU measurement with a timing in this report, so no scaling curve: a host with "
            "one GPU cannot measure one; a run on a host with several, resumed into this folder, adds its point."
        )
    ref = (
        f"{single['source']}, {fmt.tok(single['tokens_per_s'])} tokens/s"
        if single.get("source")
        else f"{stages.get(single['stage']).title} at B={single['batch_size']} on one GPU, "
        f"{fmt.tok(single['tokens_per_s'])} tokens/s, "
        + (
            "the recommended configuration (the median of its processes)"
            if single["recommended"]
            else "the fastest single-GPU configuration measured (no stage's loss could be verified)"
        )
    )
    rows = []
    for p in curve:
        title = stages.get(p["stage"]).title if p["stage"] in stages.STAGES else (p["stage"] or "the best setting")
        config = f"{title}, B={p['per_gpu_batch']}" + (" per GPU" if p["gpus"] > 1 else "")
        if not p["same_config"]:
            config += ' <span class="warn">(not the 1-GPU configuration)</span>'
        rows.append(
            {
                "GPUs": f"{p['gpus']}" + (f" ({p['nnodes']} nodes)" if p["nnodes"] > 1 else ""),
                "configuration": config,
                "tok/s": fmt.tok(p["tokens_per_s"]),
                "tok/s per GPU": fmt.tok(p["per_gpu_tokens_per_s"]),
                "× 1 GPU": fmt.times(p["speedup"]),
                "efficiency<br><small>vs the 1-GPU row</small>": fmt.pct(p["efficiency"]),
                **_lost_cells(p["lost"]),
                "final loss<br><small>− the 1-GPU recipe's</small>": _loss_cell(p["loss"]),
            }
        )
    return (
        f"<p>Efficiency: tokens/s ÷ (GPUs × the 1-GPU row: {html.escape(ref)}). What it lost, as shares of the step "
        "(they add up to 100 % − efficiency): the DDP wrapper, the same job on one rank with no peer against the 1-GPU "
        "row; all GPUs at once, the ranks' step with no all-reduce against that one rank; the all-reduce, the step "
        "with it against the step without it, on the same ranks (what overlap does not hide). Each step of a job trains the "
        "sequences of the same step on one GPU; its final loss is the ranks' mean.</p>" + table(rows)
    )


def _loss_cell(loss: dict | None) -> str:
    """A point's final loss against the one-GPU recipe's (scaling.loss_check), within the loss gate's tolerance."""
    if loss is None:
        return ""
    word = "within" if loss["holds"] else '<span class="warn">beyond</span>'
    return f"{fmt.nats(loss['diff'])} nats, {word} ±{fmt.setting(loss['tolerance'])}"


LOST = (("wrapper", "DDP wrapper"), ("at_once", "all GPUs at once"), ("allreduce", "all-reduce"))


def _lost_cells(lost: dict | None) -> dict:
    """A point's lost efficiency by part (scaling.lost), one cell each."""
    cells = {key: fmt.pct(lost[key]) if lost and lost[key] is not None else "" for key, _ in LOST}
    if lost and lost["wrapper"] is None:  # no one-rank job: the wrapper's part is not told apart from the rest
        cells["at_once"] = f"{fmt.pct(lost['rest'])}, the wrapper's too"
    return {f"lost: {name}<br><small>share of the step</small>": cells[key] for key, name in LOST}


def host_html(rep: Report) -> str:
    """Section 2's account of the recipe over the host's GPUs in the PDF: each point of the scaling curve in words
    and what was not measured (the table and the chart follow, HTML only); nothing on a host of one GPU with no
    multi-GPU record."""
    curve = [p for p in scaling_curve(rep) if p["gpus"] > 1]
    if int((rep.env.get("device") or {}).get("count") or 1) < 2 and not curve:
        return ""
    said = "; ".join(
        f"{p['gpus']} GPUs"
        + (f" as {p['nnodes']} nodes" if p["nnodes"] > 1 else "")
        + f": {fmt.tok(p['tokens_per_s'])} tokens/s, {fmt.tok(p['per_gpu_tokens_per_s'])} a GPU, efficiency "
        + fmt.pct(p["efficiency"])
        + (f", all-reduce {fmt.pct(p['allreduce_share'])} of the step" if p["allreduce_share"] is not None else "")
        for p in curve
    )
    return (
        f"<p><strong>Across the host's GPUs</strong> (DDP, the recipe's batch shared): {html.escape(said)} (the "
        "scaling table and chart: the HTML report).</p>"
        if curve
        else ""
    ) + ddp_missing_html(rep)


def ddp_missing_html(rep: Report) -> str:
    """The jobs of this host's DDP chapter that have no timing, each with why (loader.ddp_not_measured)."""
    missing = ddp_not_measured(rep)
    if not missing:
        return ""
    jobs = [
        f"{m['gpus']} GPUs"
        + (
            f" as {m['nnodes']} nodes of {m['gpus'] // m['nnodes']} rehearsed on this host"
            if m["nnodes"] > 1
            else " on one node"
        )
        + f": {m['reason']}"
        for m in missing
    ]
    return f"<p class='warn'><strong>Not measured:</strong> {html.escape('; '.join(jobs))}.</p>"
