"""*How the evidence reads*: the tables and charts behind each chapter's explanation (memory
layers, sequence-length sweep, lm_head GEMM sweep and kernels, energy, DDP scaling), computed from
a report folder's records only. Kernel-time profiles: profile_view.py."""

from __future__ import annotations

import html
import re

import numpy as np
import pandas as pd

from lib.core import stages
from lib.report.charts import save, style
from lib.report.loader import DEVICE_PEAK, LAYERS, GiB, Report, best_single_gpu, gib, pct, scaling_curve, tok

OK = ("ok", "diverged")


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
    for b in rep.params["run"]["batch_sizes"]:
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
                    f"{versus} GiB": gib(va),
                    f"{stage} GiB": gib(vs),
                    "Δ GiB": f"{(vs - va) / GiB:+.2f}",
                    "Δ %": f"{(vs / va - 1) * 100:+.1f} %",
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
                    f"{versus} GiB": gib(oa),
                    f"{stage} GiB": gib(os_),
                    "Δ GiB": f"{(os_ - oa) / GiB:+.2f}",
                    "Δ %": f"{(os_ / oa - 1) * 100:+.1f} %" if oa else "",
                }
            )
    if not rows:
        return none(f"No batch size where both {versus} and {stage} completed: no memory comparison.")
    return table(rows)


def memory_layers_md(rep: Report, stage: str, versus: str) -> str:
    """One sentence per layer: does `stage` change memory against `versus`, and where."""
    col_names = dict((*LAYERS, DEVICE_PEAK))
    changes = {}
    for b in rep.params["run"]["batch_sizes"]:
        a, s = rep.rec(versus, b), rep.rec(stage, b)
        if a and s and a["status"] in OK and s["status"] in OK:
            for col in col_names:
                if a.get(col) and s.get(col) is not None:
                    changes.setdefault(col, []).append((b, s[col] / a[col] - 1, (s[col] - a[col]) / GiB))
    if not changes:
        return f"No batch size where both {stages.get(versus).title} and {stages.get(stage).title} completed."
    parts = []
    for col, vals in changes.items():
        worst = max(vals, key=lambda v: abs(v[1]))
        word = "unchanged" if abs(worst[1]) < 0.005 else ("smaller" if worst[1] < 0 else "larger")
        parts.append(
            f"{col_names[col].split(' (')[0]}: {word} ({worst[1] * 100:+.1f} %, {worst[2]:+.2f} GiB at B={worst[0]})"
        )
    return (
        f"{stages.get(stage).title} against {stages.get(versus).title}, largest change per layer — "
        + "; ".join(parts)
        + "."
    )


# ---------------------------------------------------------------- sequence-length sweep


def _seq(rep: Report):
    recs = rep.evidence["seq"]
    by = {}
    for r in recs:
        by.setdefault(r["seq_len"], {})[r["stage"]] = r
    return dict(sorted(by.items()))


def seq_sweep_html(rep: Report) -> str:
    by = _seq(rep)
    if not by:
        return none("The sequence-length sweep was not measured for this report.")

    def cell(r):
        return (
            f"{r['median_ms']:.1f}"
            if r and r["status"] in OK
            else (r["status"].upper().replace("_", " ") if r else "—")
        )

    rows = []
    for t, pair in by.items():
        n, f = pair.get("bf16"), pair.get("flash")
        speed = f"{n['median_ms'] / f['median_ms']:.2f}×" if n and f and n["status"] in OK and f["status"] in OK else ""
        rows.append(
            {
                "T": t,
                "B": (f or n)["batch_size"],
                "naive ms/step": cell(n),
                "SDPA ms/step": cell(f),
                "SDPA speed-up": speed,
                "naive tensors GiB": gib(n.get("mem_tensors_bytes")) if n and n["status"] in OK else "",
                "SDPA tensors GiB": gib(f.get("mem_tensors_bytes")) if f and f["status"] in OK else "",
                "SDPA backend": (f or {}).get("sdpa_backend") or "",
            }
        )
    return table(rows)


def plot_seq_sweep(rep: Report):
    by = _seq(rep)
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


# ---------------------------------------------------------------- lm_head GEMM sweep


def _gemm(rep: Report):
    rec = rep.evidence["gemm"]
    return rec if rec and rec.get("status") == "ok" else None


def plot_gemm(rep: Report):
    rec = _gemm(rep)
    if rec is None:
        return None
    plt = style()
    real, padded = rep.params["model"]["vocab_size"], rep.params["model"]["padded_vocab_size"]
    fig, axes = plt.subplots(1, len(rec["dtypes"]), figsize=(9, 3.1), squeeze=False)
    for ax, dt in zip(axes[0], rec["dtypes"]):
        pts = sorted((p for p in rec["points"] if p["dtype"] == dt and p.get("tflops")), key=lambda p: p["n"])
        ax.plot([p["n"] for p in pts], [p["tflops"] for p in pts], "-", color="grey", lw=0.7)
        for mult, marker in (
            (1, dict(marker="o", s=10, color="C7", label="multiple of 8")),
            (64, dict(marker="s", s=26, color="C1", label="multiple of 64")),
            (128, dict(marker="D", s=34, color="C2", label="multiple of 128")),
        ):
            sel = [p for p in pts if (p["multiple_of"] >= mult if mult > 1 else 8 <= p["multiple_of"] < 64)]
            ax.scatter([p["n"] for p in sel], [p["tflops"] for p in sel], zorder=3, **marker)
        for n, label, c in ((real, str(real), "C3"), (padded, str(padded), "C0")):
            p = next((p for p in pts if p["n"] == n), None)
            if p:
                ax.scatter([n], [p["tflops"]], s=70, facecolors="none", edgecolors=c, lw=1.5, zorder=4)
                ax.annotate(
                    label, (n, p["tflops"]), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7, color=c
                )
        ax.set_title(f"{dt}: forward + backward", fontsize=9)
        ax.set_xlabel("n (vocabulary width)")
        ax.set_ylabel("TFLOP/s")
    axes[0][0].legend(frameon=False, fontsize=7, loc="lower left")
    fig.suptitle(f"lm_head GEMM, m = {rec['m']:,}, k = {rec['k']}", fontsize=10)
    fig.tight_layout()
    return save(fig, rep, "gemm_sweep")


def alignment_groups(rec: dict | None, dtype: str, multiple: int = 128) -> tuple[list[dict], list[dict]]:
    """The sweep's timed `dtype` points at multiples of `multiple`, and at the other multiples of 8.
    A width that is not a multiple of 8 (GPT-2's 50257) is in neither: it runs other kernels
    altogether, and counting it among "the others" would credit `multiple` with what 8 already buys."""
    pts = [p for p in (rec or {}).get("points", []) if p["dtype"] == dtype and p.get("total_ms")]
    return [p for p in pts if p["n"] % multiple == 0], [p for p in pts if p["n"] % 8 == 0 and p["n"] % multiple]


def kernel_name(names) -> str:
    """The first kernel of a pass, short enough for a sentence: a CUTLASS kernel by its template
    argument (`void cutlass::Kernel2<NAME>(NAME::Params)`), which says its alignment (align1, align8)."""
    if not names:
        return "none recorded"
    name = re.sub(r"^void \w+::\w+<(\w+)>\(.*\)$", r"\1", names[0])
    return name if len(name) <= 60 else name[:57] + "…"


def gemm_md(rep: Report) -> str:
    """Per dtype: the multiples of 128 against the other multiples of 8 (is 128 special?), then the
    real width against the padded one, time and kernels (what the padding buys, and why)."""
    rec = _gemm(rep)
    if rec is None:
        return "The lm_head GEMM sweep was not measured for this report."
    real, padded = rep.params["model"]["vocab_size"], rep.params["model"]["padded_vocab_size"]
    parts = []
    for dt in rec["dtypes"]:
        pts = {p["n"]: p for p in rec["points"] if p["dtype"] == dt and p.get("total_ms")}
        aligned, other = alignment_groups(rec, dt)
        if real not in pts or padded not in pts or not aligned or not other:
            continue
        ms = [p["total_ms"] for p in other]
        m128, m8 = np.median([p["total_ms"] for p in aligned]), np.median(ms)
        # "About as fast": the multiples of 128 (median) inside the range of the other multiples of 8.
        reading = (
            "every multiple of 8 runs about as fast"
            if min(ms) <= m128 <= max(ms)
            else f"the multiples of 128 run {'faster' if m128 < min(ms) else 'slower'} than every other multiple of 8"
        )
        a, b = pts[real]["total_ms"], pts[padded]["total_ms"]
        kr, kp = (rec.get("kernels", {}).get(dt, {}).get(str(n)) for n in (real, padded))
        kernels = (
            ""
            if not (kr and kp)
            else ", with the same kernels"
            if kr == kp
            else f", running other kernels (forward: `{kernel_name(kr.get('fwd'))}` against "
            f"`{kernel_name(kp.get('fwd'))}`)"
        )
        parts.append(
            f"**{dt}**, forward + backward: the {len(aligned)} multiples of 128 take a median {_ms(m128)}, "
            f"the {len(ms)} other multiples of 8 {_ms(m8)} ({m8 / m128:.2f}× the time; {_ms(min(ms))} to "
            f"{_ms(max(ms))} among themselves): {reading}. n={real}{', not a multiple of 8,' if real % 8 else ''}"
            f" takes {_ms(a)} against {_ms(b)} at n={padded}: {a / b:.2f}× the time for "
            f"{(1 - real / padded) * 100:.2f} % less arithmetic{kernels}."
        )
    return " ".join(parts) or "The sweep has no point at the real or padded width."


def _ms(v: float) -> str:
    return f"{v:.2f} ms" if v >= 0.1 else f"{v:.2g} ms"  # CPU widths take hundredths of a millisecond


def gemm_kernels_html(rep: Report) -> str:
    rec = _gemm(rep)
    if rec is None:
        return ""
    rows = []
    for dt, by_n in rec.get("kernels", {}).items():
        for n, phases in by_n.items():
            for phase in ("fwd", "bwd"):
                names = phases.get(phase) or []
                rows.append(
                    {
                        "dtype": dt,
                        "n": n,
                        "pass": {"fwd": "forward", "bwd": "backward"}[phase],
                        "kernels (in launch order)": "<br>".join(f"<code>{html.escape(k)}</code>" for k in names)
                        or "—",
                    }
                )
    return table(rows, "matrix kernels gemm")


def compile_vocab_html(rep: Report) -> str:
    """The padding's effect with and without torch.compile, at the batch size of the variant."""
    var = next((r for r in rep.evidence["variants"] if r.get("variant") == "unpadded vocab"), None)
    if var is None:
        return none("The compile stage at the unpadded vocabulary was not measured for this report.")
    b = var["batch_size"]
    control = next(
        (r for r in rep.evidence["variants"] if r.get("variant") == "unpadded vocab, Inductor shape padding off"), None
    )
    pairs = [
        ("eager (flash → vocab stage)", rep.rec("flash", b), rep.rec("vocab", b)),
        ("torch.compile (same stage at 50257 → 50304)", var, rep.rec("compile", b)),
        ("torch.compile, Inductor's own shape padding off at 50257 (the control)", control, rep.rec("compile", b)),
    ]
    rows = []
    for label, un, pad in pairs:
        ok = un and pad and un["status"] in OK and pad["status"] in OK
        rows.append(
            {
                "B": b,
                "mode": label,
                "50257 ms/step": f"{un['median_ms']:.1f}"
                if un and un["status"] in OK
                else (un or {}).get("status", "—"),
                "50304 ms/step": f"{pad['median_ms']:.1f}"
                if pad and pad["status"] in OK
                else (pad or {}).get("status", "—"),
                "padding speed-up": f"{un['median_ms'] / pad['median_ms']:.2f}×" if ok else "",
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
                "avg. power W": f"{e['avg_power_w']:.0f}",
                "mJ / token": f"{e['joules_per_token'] * 1e3:.3f}",
                "tokens / kJ": f"{1e3 / e['joules_per_token']:,.0f}",
                "tok/s": f"{r['tokens_per_s']:,.0f}",
            }
        )
    if not rows:
        return none("Energy was not measured on this device: " + (why or "no energy record in these results") + ".")
    order = {k: i for i, k in enumerate(rep.stage_order)}
    rows.sort(key=lambda x: (order[next(k for k in rep.stage_order if stages.get(k).title == x["Stage"])], x["B"]))
    return table(rows)


# ---------------------------------------------------------------- DDP scaling


def ddp_curve_html(rep: Report) -> str:
    """The scaling curve as a table (loader.scaling_curve), under a line that names the single-GPU
    configuration every efficiency divides by."""
    curve, single = scaling_curve(rep), best_single_gpu(rep)
    if not curve:
        return none(
            "No multi-GPU measurement with a timing in this report, so no scaling curve: a host with "
            "one GPU cannot measure one; a run on a host with several, resumed into this folder, adds its point."
        )
    ref = (
        f"{stages.get(single['stage']).title} at B={single['batch_size']} on one GPU, {single['tokens_per_s']:,.0f} "
        "tokens/s, "
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
                "tok/s": tok(p["tokens_per_s"]),
                "tok/s per GPU": tok(p["per_gpu_tokens_per_s"]),
                "× 1 GPU": f"{p['speedup']:.2f}×",
                "efficiency<br><small>vs the 1-GPU row</small>": pct(p["efficiency"]),
                "efficiency<br><small>vs one rank of the job</small>": pct(p["one_rank_efficiency"])
                if p["gpus"] > 1
                else "",
                "all-reduce<br><small>share of the step</small>": pct(p["allreduce_share"])
                if p["gpus"] > 1
                else "none",
            }
        )
    return (
        f"<p>Efficiency = tokens/s ÷ (GPUs × the 1-GPU row): {html.escape(ref)}. The all-reduce's share is "
        "1 − step time without gradient synchronisation ÷ step time with it, on the same ranks.</p>" + table(rows)
    )
