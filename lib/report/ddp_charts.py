"""The DDP scaling curve as a chart (loader.scaling_curve): tokens/s and efficiency against GPU count, the points of
several nodes (a real multi-node run, or two nodes rehearsed on one host) marked apart from the one-node line."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lib.report.charts import save, style
from lib.report.loader import Report, pct, scaling_curve, tok


def plot_ddp_scaling(rep: Report):
    """The DDP scaling curve (loader.scaling_curve) against GPU count: tokens/s beside the ideal
    (GPUs x the best single-GPU configuration), and the efficiency beside 100 %, each multi-GPU
    point labelled with the all-reduce's share of its step. None, and no figure, without a
    multi-GPU point (the chapter's table says so)."""
    curve = scaling_curve(rep)
    if not curve:
        return None
    plt = style()
    nodes = [p for p in curve if p["nnodes"] > 1]  # several nodes (or their rehearsal on one host): marked apart
    curve = [p for p in curve if p["nnodes"] == 1]
    gpus = [p["gpus"] for p in curve]
    fig, (speed, eff) = plt.subplots(1, 2, figsize=(9, 2.6))
    counts = np.geomspace(1, gpus[-1], 64)  # dense: on the log axis below the ideal is a curve
    speed.plot(counts, counts * curve[0]["tokens_per_s"], color="grey", lw=0.8, ls="--", label="ideal: GPUs × one GPU")
    speed.plot(gpus, [p["tokens_per_s"] for p in curve], color="C0", marker="o", label="measured")
    speed.set_ylabel("tokens / s (all GPUs)")
    speed.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: tok(v)))
    speed.set_ylim(bottom=0)
    values = [p["efficiency"] * 100 for p in curve]
    eff.axhline(100, color="grey", lw=0.8, ls="--", label="ideal: 100 %")
    eff.plot(gpus, values, color="C3", marker="o", label="tokens/s ÷ (GPUs × one GPU)")
    for p, v in zip(curve[1:], values[1:]):
        if p["allreduce_share"] is not None:
            eff.annotate(
                f"all-reduce {pct(p['allreduce_share'])}",
                (p["gpus"], v),
                textcoords="offset points",
                xytext=(0, -12),
                ha="center",
                fontsize=7,
            )
    for p in nodes:
        speed.plot(
            p["gpus"], p["tokens_per_s"], "s", color="C2", label=f"{p['nnodes']} nodes of {p['gpus'] // p['nnodes']}"
        )
        eff.plot(
            p["gpus"],
            p["efficiency"] * 100,
            "s",
            color="C2",
            label=f"{p['nnodes']} nodes of {p['gpus'] // p['nnodes']}",
        )
    eff.set_ylabel("scaling efficiency (%)")
    eff.set_ylim(0, max(110, max(values) + 10))
    for ax in (speed, eff):
        ax.set_xscale("log", base=2)  # 1, 2, 4, 8 evenly spaced
        ax.set_xticks(gpus, [str(g) for g in gpus])
        ax.minorticks_off()
        ax.set_xlabel("GPUs")
    speed.legend(frameon=False, fontsize=7, loc="upper left")
    eff.legend(frameon=False, fontsize=7, loc="lower left")
    fig.suptitle("Data-parallel scaling against the one-GPU configuration it replicates", fontsize=10)
    fig.tight_layout()
    return save(fig, rep, "ddp_scaling")


def plot_scaling_compare(reps: dict[str, Report], out_dir=None):
    """The reports' scaling curves on one chart (a four-GPU host's beside an eight-GPU host's): each point's
    efficiency against its own report's one-GPU configuration, several nodes marked apart. None without two reports
    that measured DDP (the comparison's table says what each did)."""
    curves = {name: scaling_curve(rep) for name, rep in reps.items()}
    curves = {name: c for name, c in curves.items() if len(c) > 1}
    if len(curves) < 2:
        return None
    plt = style()
    fig, eff = plt.subplots(figsize=(6, 2.8))
    eff.axhline(100, color="grey", lw=0.8, ls="--", label="ideal: 100 %")
    counts = set()
    for i, (name, curve) in enumerate(curves.items()):
        one = [p for p in curve if p["nnodes"] == 1]
        counts |= {p["gpus"] for p in curve}
        eff.plot([p["gpus"] for p in one], [p["efficiency"] * 100 for p in one], marker="o", color=f"C{i}", label=name)
        for p in (p for p in curve if p["nnodes"] > 1):
            eff.plot(
                p["gpus"],
                p["efficiency"] * 100,
                "s",
                color=f"C{i}",
                mfc="none",
                label=f"{name}: {p['nnodes']} nodes of {p['gpus'] // p['nnodes']}",
            )
    eff.set_xscale("log", base=2)
    eff.set_xticks(sorted(counts), [str(g) for g in sorted(counts)])
    eff.minorticks_off()
    eff.set_xlabel("GPUs")
    eff.set_ylabel("scaling efficiency (%)")
    low = min(p["efficiency"] * 100 for c in curves.values() for p in c)
    eff.set_ylim(min(80, low - 5), 105)
    eff.legend(frameon=False, fontsize=7, loc="lower left")
    fig.tight_layout()
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(out_dir) / "ddp_scaling_compare.png", bbox_inches="tight")
    return fig
