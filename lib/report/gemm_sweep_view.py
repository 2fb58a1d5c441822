"""*How the lm_head GEMM sweep reads* (the vocab chapter's evidence): the output projection's time at
every multiple of 8 around the padded vocabulary width, the multiples of 128 against the others, the
real width against the padded one, and the kernels each ran; computed from a report folder's records."""

from __future__ import annotations

import html

from lib.report import formats as fmt
from lib.report.charts import save, style
from lib.report.evidence_view import table
from lib.report.loader import Report
from lib.results.gemm_alignment import kernel_name, width_figures


def _gemm(rep: Report):
    rec = rep.evidence["gemm"]
    return rec if rec and rec.get("status") == "ok" else None


def plot_gemm(rep: Report):
    rec = _gemm(rep)
    if rec is None:
        return None
    plt = style()
    real, padded = rep.params.model.vocab_size, rep.params.model.padded_vocab_size
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
        ax.set_ylim(bottom=0)  # from zero: an axis cut near the data made the widths' scatter look like a cliff
    axes[0][0].legend(frameon=False, fontsize=7, loc="lower center")
    fig.suptitle(f"lm_head GEMM, m = {fmt.count(rec['m'])}, k = {rec['k']}", fontsize=10)
    fig.tight_layout()
    return save(fig, rep, "gemm_sweep")


def gemm_md(rep: Report) -> str:
    """Per dtype: the multiples of 128 against the other multiples of 8 (is 128 special?), then the
    real width against the padded one, time and kernels (what the padding buys, and why)."""
    rec = _gemm(rep)
    if rec is None:
        return "The lm_head GEMM sweep was not measured for this report."
    real, padded = rep.params.model.vocab_size, rep.params.model.padded_vocab_size
    parts = []
    for dt in rec["dtypes"]:
        w = width_figures(rec, dt, real, padded)
        if w is None:
            continue
        ms, m128, m8 = w["other"], w["m128"], w["m8"]
        reading = (
            f"the multiples of 128 run {w['128_is']} than every other multiple of 8"
            if w["128_is"]
            else "every multiple of 8 runs about as fast"
        )
        a, b, kr, kp = w["real_ms"], w["padded_ms"], w["real_kernels"], w["padded_kernels"]
        kernels = (
            ""
            if not (kr and kp)
            else ", with the same kernels"
            if kr == kp
            else f", running other kernels (forward: `{kernel_name(kr.get('fwd'))}` against "
            f"`{kernel_name(kp.get('fwd'))}`)"
        )
        parts.append(
            f"**{dt}**, forward + backward: the {w['aligned']} multiples of 128 take a median {fmt.ms(m128, None)} ms, "
            f"the {len(ms)} other multiples of 8 {fmt.ms(m8, None)} ms ({fmt.times(m8 / m128)} the time; "
            f"{fmt.ms(min(ms), None)} ms to {fmt.ms(max(ms), None)} ms among themselves): {reading}. "
            f"n={real}{', not a multiple of 8,' if real % 8 else ''} takes {fmt.ms(a, None)} ms against "
            f"{fmt.ms(b, None)} ms at n={padded}: {fmt.times(a / b)} the time for "
            f"{fmt.pct(1 - real / padded, 2)} less arithmetic{kernels}."
        )
    return " ".join(parts) or "The sweep has no point at the real or padded width."


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
