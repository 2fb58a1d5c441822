"""*How the report reads*, its charts: throughput, memory, step-time spread, loss curves and the
DDP scaling curve, saved under the report's figures/ as they are drawn."""
from __future__ import annotations

import numpy as np

from . import stages
from .report import GiB, Report, scaling_curve

def style():
    import matplotlib.pyplot as plt
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.axisbelow": True})
    return plt


def save(fig, rep: Report, name: str):
    out = rep.dir / "figures"
    out.mkdir(exist_ok=True)
    fig.savefig(out / f"{name}.png", bbox_inches="tight")
    return fig


def plot_throughput(rep: Report):
    plt = style()
    batches = rep.params["run"]["batch_sizes"]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(batches)
    x = np.arange(len(rep.stage_order))
    for j, b in enumerate(batches):
        for i, key in enumerate(rep.stage_order):
            r = rep.df[(rep.df["stage"] == key) & (rep.df["batch_size"] == b)]
            xpos = x[i] + (j - (len(batches) - 1) / 2) * width
            if r.empty or r["status"].iloc[0] not in ("ok", "diverged"):
                label = "n/a" if r.empty else {"oom": "OOM", "not_applicable": "n/a"}.get(r["status"].iloc[0], "err")
                ax.text(xpos, 0, label, ha="center", va="bottom", fontsize=7, color="firebrick", rotation=90)
                continue
            ax.bar(xpos, r["tokens_per_s"].iloc[0], width, color=f"C{j}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{j}") for j in range(len(batches))]
    ax.legend(handles, [f"B={b}" for b in batches], frameon=False, ncol=len(batches))
    ax.set_xticks(x, rep.stage_titles, fontsize=7, rotation=35, ha="right", rotation_mode="anchor")
    ax.set_ylabel("tokens / s (median step)")
    ax.set_title("Throughput by stage and batch size")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    return save(fig, rep, "throughput")


def plot_memory(rep: Report):
    plt = style()
    layers = ([("mem_tensors_bytes", "tensors (max allocated)"), ("mem_allocator_bytes", "allocator (max reserved)"),
               ("mem_device_bytes", "device (nvidia-smi)")] if rep.on_gpu
              else [("mem_device_bytes", "process peak RSS")])
    batches = rep.params["run"]["batch_sizes"]
    fig, axes = plt.subplots(1, len(batches), figsize=(9, 3.2), sharey=True, squeeze=False)
    x = np.arange(len(rep.stage_order))
    width = 0.8 / len(layers)
    for ax, b in zip(axes[0], batches):
        for j, (col, label) in enumerate(layers):
            vals = []
            for key in rep.stage_order:
                rec = rep.rec(key, b)
                v = rec.get(col) if rec and rec["status"] in ("ok", "diverged") else None
                vals.append(np.nan if v is None else v / GiB)
            ax.bar(x + (j - (len(layers) - 1) / 2) * width, vals, width, color=f"C{j}", label=label)
        for i, key in enumerate(rep.stage_order):
            rec = rep.rec(key, b)
            if rec and rec["status"] not in ("ok", "diverged"):
                ax.text(x[i], 0, {"oom": "OOM"}.get(rec["status"], "n/a"), ha="center", va="bottom",
                        fontsize=7, color="firebrick", rotation=90)
        ax.set_title(f"B={b}", fontsize=9)
        ax.set_xticks(x, [k for k in rep.stage_order], fontsize=7, rotation=35, ha="right", rotation_mode="anchor")
    axes[0][0].set_ylabel("GiB")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, fontsize=7,
               bbox_to_anchor=(0.5, -0.08))
    fig.suptitle("Peak memory by stage, three layers", fontsize=10)
    fig.tight_layout()
    return save(fig, rep, "memory")


def plot_spread(rep: Report):
    """Each configuration's timed steps relative to its own median, so a 60 ms and a 700 ms
    configuration share one readable axis."""
    plt = style()
    data_, labels = [], []
    for r in _sorted(rep):
        if r["status"] in ("ok", "diverged") and r.get("step_ms"):
            t = np.asarray(r["step_ms"])
            data_.append((t / np.median(t) - 1) * 100)
            labels.append(f"{r['stage']}\nB={r['batch_size']}")
    fig, ax = plt.subplots(figsize=(9, 3.2))
    if data_:
        ax.boxplot(data_, whis=(10, 90), showfliers=True, flierprops={"markersize": 2})
        ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=6, rotation=45, ha="right", rotation_mode="anchor")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_ylabel("step time vs its median (%)")
    ax.set_title("Step-time spread per configuration (box: quartiles, whiskers: p10–p90, dots: outliers)")
    return save(fig, rep, "step_spread")


def _sorted(rep: Report):
    order = {k: i for i, k in enumerate(rep.stage_order)}
    return sorted(rep.records, key=lambda r: (order[r["stage"]], r["batch_size"]))


def _plot_multi_gpu_losses(rep: Report, stage: str):
    """Rank 0's loss per step next to the single-GPU configuration it replicates, at its batch:
    rank 0 trains on the same batches, but each update uses every rank's gradients."""
    plt = style()
    fig, ax = plt.subplots(figsize=(6, 2.9))
    rec = max((r for r in rep.records if r["stage"] == stage and r.get("losses")),  # the most GPUs measured
              key=lambda r: r.get("world_size") or 0, default=None)
    base = rec and next((r for r in rep.decisions
                         if r["stage"] == rec.get("base_stage") and r["batch_size"] == rec["batch_size"]
                         and r.get("variant") in (None, "batch sweep") and r.get("losses")), None)
    if rec is None:
        ax.text(0.5, 0.5, "no multi-GPU loss curve", ha="center", va="center", transform=ax.transAxes, fontsize=8)
    else:
        ax.plot(rec["losses"], color="C3", lw=1.0, label=f"rank 0 of {rec['world_size']} GPUs, B={rec['batch_size']} each")
        if base:
            ax.plot(base["losses"], color="C0", lw=1.0, label=f"{base['stage_title']} on one GPU, B={base['batch_size']}")
        ax.axvline(rep.params["run"]["warmup_steps"] - 0.5, color="grey", lw=0.6, ls=":")
        ax.legend(frameon=False, fontsize=7)
    ax.set_xlabel("step (dotted: end of warm-up)")
    ax.set_ylabel("training loss (nats)")
    fig.tight_layout()
    return save(fig, rep, f"loss_{stage}")


def plot_ddp_scaling(rep: Report):
    """The DDP scaling curve (report.scaling_curve) against GPU count: tokens/s beside the ideal
    (GPUs x the best single-GPU configuration), and the efficiency beside 100 %, each multi-GPU
    point labelled with the all-reduce's share of its step. None, and no figure, without a
    multi-GPU point (the chapter's table says so)."""
    curve = scaling_curve(rep)
    if not curve:
        return None
    plt = style()
    gpus = [p["gpus"] for p in curve]
    fig, (speed, eff) = plt.subplots(1, 2, figsize=(9, 3.2))
    counts = np.geomspace(1, gpus[-1], 64)  # dense: on the log axis below the ideal is a curve
    speed.plot(counts, counts * curve[0]["tokens_per_s"], color="grey", lw=0.8, ls="--", label="ideal: GPUs × one GPU")
    speed.plot(gpus, [p["tokens_per_s"] for p in curve], color="C0", marker="o", label="measured")
    speed.set_ylabel("tokens / s (all GPUs)")
    speed.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    speed.set_ylim(bottom=0)
    values = [p["efficiency"] * 100 for p in curve]
    eff.axhline(100, color="grey", lw=0.8, ls="--", label="ideal: 100 %")
    eff.plot(gpus, values, color="C3", marker="o", label="tokens/s ÷ (GPUs × one GPU)")
    for p, v in zip(curve[1:], values[1:]):
        if p["allreduce_share"] is not None:
            eff.annotate(f"all-reduce {p['allreduce_share'] * 100:.1f} %", (p["gpus"], v), textcoords="offset points",
                         xytext=(0, -12), ha="center", fontsize=7)
    eff.set_ylabel("scaling efficiency (%)")
    eff.set_ylim(0, max(110, max(values) + 10))
    for ax in (speed, eff):
        ax.set_xscale("log", base=2)  # 1, 2, 4, 8 evenly spaced
        ax.set_xticks(gpus, [str(g) for g in gpus])
        ax.minorticks_off()
        ax.set_xlabel("GPUs")
    speed.legend(frameon=False, fontsize=7, loc="upper left")
    eff.legend(frameon=False, fontsize=7, loc="lower left")
    fig.suptitle("Data-parallel scaling against the best single-GPU configuration", fontsize=10)
    fig.tight_layout()
    return save(fig, rep, "ddp_scaling")


def plot_losses(rep: Report, stage: str | None = None):
    """Summary: every stage's loss per step. Chapter: this stage's loss minus its reference's
    (FP32, or the vocab stage for the later levers), step by step, with the tolerance band the
    final loss is judged against."""
    if stage is not None and stages.get(stage).multi_gpu:
        return _plot_multi_gpu_losses(rep, stage)
    plt = style()
    batches = rep.params["run"]["batch_sizes"]
    tol = rep.params["run"]["loss_tolerance"]
    base_key = stages.get(stage).reference if stage not in (None, rep.stage_order[0]) else rep.stage_order[0]
    base_title = stages.get(base_key).title
    fig, axes = plt.subplots(1, len(batches), figsize=(9, 2.9), squeeze=False, sharey=True)
    for ax, b in zip(axes[0], batches):
        base = rep.rec(base_key, b)
        base_losses = np.asarray(base["losses"]) if base and base.get("losses") else None
        if stage is None or stage == base_key:
            keys = rep.stage_order if stage is None else [base_key]
            for key in keys:
                i = rep.stage_order.index(key)
                rec = rep.rec(key, b)
                if rec and rec.get("losses"):
                    ax.plot(rec["losses"], color=f"C{i}", lw=1.0, label=stages.get(key).title)
            later = [v for k in rep.stage_order for r in [rep.rec(k, b)] if r and r.get("losses")
                     for v in r["losses"][3:] if np.isfinite(v)]
            if later:  # the first steps (loss ~ ln V) would squash everything else
                ax.set_ylim(min(later) - 0.1, max(later) + 0.3)
            ylabel = "training loss (nats)"
        else:
            rec = rep.rec(stage, b)
            ax.axhspan(-tol, tol, color="C2", alpha=0.12, label=f"±{tol:g} nats tolerance")
            ax.axhline(0, color="grey", lw=0.6)
            if rec and rec.get("losses") and base_losses is not None:
                n = min(len(rec["losses"]), len(base_losses))
                ax.plot(np.asarray(rec["losses"][:n]) - base_losses[:n], color="C3", lw=1.0,
                        label=f"{stages.get(stage).title} − {base_title}")
            else:
                ax.text(0.5, 0.5, f"no {base_title} loss\nat this batch size" if rec and rec.get("losses")
                        else "no loss curve", ha="center", va="center", transform=ax.transAxes, fontsize=8)
                ax.set_xticks([])
            ylabel = f"loss − {base_key} loss (nats)"
        ax.axvline(rep.params["run"]["warmup_steps"] - 0.5, color="grey", lw=0.6, ls=":")
        ax.set_title(f"B={b}", fontsize=9)
        ax.set_xlabel("step (dotted: end of warm-up)")
    axes[0][0].set_ylabel(ylabel)
    handles, labels = [], []
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, fontsize=7,
                   bbox_to_anchor=(0.5, -0.1))
    return save(fig, rep, f"loss_{stage or 'all'}")
