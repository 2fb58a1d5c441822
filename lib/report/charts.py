"""*How the report reads*, its charts: throughput, memory, step-time spread, loss curves and the
DDP scaling curve, saved under the report's figures/ as they are drawn. Stages are rows (their
titles never overlap), and a configuration without a value says why in its place. Which loss
curves go side by side: lib/results/loss_curves.py."""

from __future__ import annotations

import textwrap

import numpy as np

from lib.core import stages
from lib.core.record import TIMED
from lib.report import formats as fmt
from lib.report.loader import GiB, Report, no_value
from lib.results import decide, loss_curves


def style():
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.axisbelow": True,
        }
    )
    return plt


def save(fig, rep: Report, name: str):
    out = rep.dir / "figures"
    out.mkdir(exist_ok=True)
    fig.savefig(out / f"{name}.png", bbox_inches="tight")
    return fig


def legend_below(fig, handles, labels, ncol: int):
    """Lay the figure out, then put its legend under everything in it (the saved image grows to
    hold it), where no bar, label or axis title can be. A figure with nothing drawn (a stage
    with no curve: each panel says why) has no legend."""
    fig.tight_layout()
    if not handles:
        return
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol, frameon=False, fontsize=7)


def stage_rows(ax, keys) -> np.ndarray:
    """One horizontal row per stage, titled on the y axis, the first stage on top: long titles
    never overlap, however many stages there are."""
    y = np.arange(len(keys))
    ax.set_yticks(y, [stages.get(k).title for k in keys], fontsize=7)
    ax.set_ylim(len(keys) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    return y


def _missing(rep: Report, key: str, batch: int, name_batch: bool = True) -> str:
    """What a chart writes in a (stage, batch) slot without a value."""
    rec, others = rep.rec(key, batch), [r for r in rep.records if r["stage"] == key]
    text = "not measured at this batch" if rec is None and others else no_value(rec)
    text = "not applicable on this host" if rep.inapplicable(key) else text  # DDP on one GPU: at no batch
    return f"B={batch}: {text}" if name_batch else text


def _grouped_rows(ax, rep: Report, groups, value):
    """Horizontal bars, one row per stage and one bar per group, a group being (batch, legend
    label, argument of value(record, argument)). A slot whose record has no timing gets its label
    (OOM, error, n/a...) as text in its place, once per row where every group is the same batch:
    no configuration is ever just an empty space."""
    keys = rep.stage_order
    y = stage_rows(ax, keys)
    h = 0.8 / len(groups)
    one_batch = len({b for b, _, _ in groups}) == 1
    for j, (batch, label, arg) in enumerate(groups):
        off = (j - (len(groups) - 1) / 2) * h
        recs = [rep.rec(k, batch) for k in keys]
        vals = [value(r, arg) if r and r["status"] in TIMED else None for r in recs]
        ax.barh(y + off, [np.nan if v is None else v for v in vals], h, color=f"C{j}", label=label)
        for i, (key, r) in enumerate(zip(keys, recs)):
            whole_row = one_batch or rep.inapplicable(key)  # the H100's DDP row named B=16 and 64, its record 128
            if not (r and r["status"] in TIMED) and (j == 0 or not whole_row):
                ax.text(
                    0.005,
                    y[i] + (0 if whole_row else off),
                    _missing(rep, key, batch, not whole_row),
                    va="center",
                    fontsize=6.5,
                    color="firebrick",
                    transform=ax.get_yaxis_transform(),
                )
    return y


def plot_throughput(rep: Report):
    plt = style()
    batches, tps = rep.params.run.batch_sizes, decide.throughputs(rep.decisions)
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.14 * len(rep.stage_order) * (len(batches) + 1)))

    def value(r, _):  # the median over processes where several timed it, as every ratio of the report takes it
        return decide.median_of(tps, r["stage"], r["batch_size"], r["tokens_per_s"])

    y = _grouped_rows(ax, rep, [(b, f"B={b}", None) for b in batches], value)
    for i, key in enumerate(rep.stage_order):  # a several-GPU bar is all its GPUs together: said on the bar
        recs = [r for b in batches if (r := rep.rec(key, b)) and r["status"] in TIMED and r.get("world_size")]
        if stages.is_multi_gpu(key) and recs:
            r = max(recs, key=lambda r: r["tokens_per_s"])
            ax.text(r["tokens_per_s"], y[i], f" {r['world_size']} GPUs together", va="center", fontsize=7)
    ax.set_xlabel("tokens / s (median step; median over processes where several ran)")
    ax.set_title("Throughput by stage and batch size", fontsize=10)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: fmt.tok(v)))
    legend_below(fig, *ax.get_legend_handles_labels(), len(batches))
    return save(fig, rep, "throughput")


def plot_memory(rep: Report):
    """The memory layers (loader.LAYERS, named as they are measured: two peaks and the device's
    use after the timed steps) per stage, one panel per batch size."""
    plt = style()
    batches = rep.params.run.batch_sizes
    fig, axes = plt.subplots(
        1, len(batches), figsize=(9, 1.2 + 0.32 * len(rep.stage_order)), sharex=True, sharey=True, squeeze=False
    )
    for ax, b in zip(axes[0], batches):
        _grouped_rows(
            ax,
            rep,
            [(b, label, col) for col, label in rep.layers],
            lambda r, col: None if r.get(col) is None else r[col] / GiB,
        )
        if rep.env["device"].get("memory_bytes"):
            ax.axvline(rep.env["device"]["memory_bytes"] / GiB, color="grey", lw=0.7, ls=":", label="device memory")
        ax.set_title(f"B={b}", fontsize=9)
        ax.set_xlabel("GiB")
    fig.suptitle(
        "Memory by stage" + (": two peaks, and the device's memory in use after the timed steps" if rep.on_gpu else ""),
        fontsize=10,
    )
    handles, labels = axes[0][0].get_legend_handles_labels()
    legend_below(fig, handles, labels, len(labels))
    return save(fig, rep, "memory")


def plot_spread(rep: Report):
    """Each configuration's timed steps relative to its own median, so a 60 ms and a 700 ms
    configuration share one readable axis; one row per stage, one box per batch size."""
    import matplotlib

    plt = style()
    # matplotlib 3.10 replaced boxplot's vert=False (deprecated since) by orientation=
    horizontal = (
        {"orientation": "horizontal"}
        if tuple(map(int, matplotlib.__version__.split(".")[:2])) >= (3, 10)
        else {"vert": False}
    )
    batches = rep.params.run.batch_sizes
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.14 * len(rep.stage_order) * (len(batches) + 1)))
    y = stage_rows(ax, rep.stage_order)
    h = 0.8 / len(batches)
    for j, b in enumerate(batches):
        off = (j - (len(batches) - 1) / 2) * h
        for i, key in enumerate(rep.stage_order):
            r = rep.rec(key, b)
            if r and r["status"] in TIMED and r.get("step_ms"):
                t = np.asarray(r["step_ms"])
                ax.boxplot(
                    [(t / np.median(t) - 1) * 100],
                    positions=[y[i] + off],
                    widths=h * 0.8,
                    **horizontal,
                    whis=(10, 90),
                    manage_ticks=False,
                    patch_artist=True,
                    flierprops={"markersize": 2},
                    boxprops={"facecolor": f"C{j}", "alpha": 0.6},
                    medianprops={"color": "black"},
                )
            else:
                ax.text(
                    0.005,
                    y[i] + off,
                    _missing(rep, key, b),
                    transform=ax.get_yaxis_transform(),
                    va="center",
                    fontsize=6.5,
                    color="firebrick",
                )
    ax.axvline(0, color="grey", lw=0.6)
    ax.set_xlabel("step time vs its median (%)")
    ax.set_title("Step-time spread per configuration (box: quartiles, whiskers: p10–p90, dots: outliers)", fontsize=10)
    legend_below(
        fig,
        [plt.Rectangle((0, 0), 1, 1, color=f"C{j}", alpha=0.6) for j in range(len(batches))],
        [f"B={b}" for b in batches],
        len(batches),
    )
    return save(fig, rep, "step_spread")


def _plot_multi_gpu_losses(rep: Report, stage: str):
    """Rank 0's loss per step next to the single-GPU configuration it replicates, at its batch:
    rank 0 trains on the same batches, but each update uses every rank's gradients."""
    plt = style()
    fig, ax = plt.subplots(figsize=(6, 2.9))
    rec, base = loss_curves.multi_gpu_pair(rep, stage)
    if rec is None:
        ax.text(0.5, 0.5, "no multi-GPU loss curve", ha="center", va="center", transform=ax.transAxes, fontsize=8)
    else:
        ax.plot(
            rec["losses"], color="C3", lw=1.0, label=f"rank 0 of {rec['world_size']} GPUs, B={rec['batch_size']} each"
        )
        if base:
            ax.plot(
                base["losses"], color="C0", lw=1.0, label=f"{base['stage_title']} on one GPU, B={base['batch_size']}"
            )
        ax.axvline(rep.params.run.warmup_steps - 0.5, color="grey", lw=0.6, ls=":")
        ax.legend(frameon=False, fontsize=7)
    ax.set_xlabel("step (dotted: end of warm-up)")
    ax.set_ylabel("training loss (nats)")
    fig.tight_layout()
    return save(fig, rep, f"loss_{stage}")


LINESTYLES = ("-", "--", "-.", ":")


def _loss_panel_all(ax, rep: Report, b: int, tol: float) -> list[str]:
    """Every single-GPU stage's loss minus its reference stage's (stages.reference), step by step,
    at batch b, each stage its own colour and line style; returns what could not be drawn."""
    ax.axhspan(-tol, tol, color="C2", alpha=0.12, label=f"±{fmt.setting(tol)} nats tolerance")
    ax.axhline(0, color="grey", lw=0.6)
    missing: dict[str, list[str]] = {}
    for i, key in enumerate(rep.stage_order):
        st, ref_key = stages.get(key), loss_curves.reference(rep.stage_order, key)
        if st.multi_gpu or ref_key == key:
            continue
        rec, ref, ref_title = rep.rec(key, b), rep.rec(ref_key, b), stages.get(ref_key).title
        if not (rec and rec.get("losses")):
            missing.setdefault(no_value(rec), []).append(st.title)
        elif not (ref and ref.get("losses")):
            missing.setdefault(f"no {ref_title} loss to compare with ({no_value(ref)})", []).append(st.title)
        else:
            n = min(len(rec["losses"]), len(ref["losses"]))
            ax.plot(
                np.asarray(rec["losses"][:n]) - np.asarray(ref["losses"][:n]),
                color=f"C{i % 10}",
                ls=LINESTYLES[i % len(LINESTYLES)],
                lw=1.0,
                label=f"{st.title} − {ref_title}",
            )
    return [f"{why}: {', '.join(titles)}" for why, titles in missing.items()]


def plot_losses(rep: Report, stage: str | None = None):
    """Summary (stage None): every stage's loss minus its reference stage's (FP32, or the vocab
    stage for the later levers), step by step, so the stages do not hide behind one another.
    Chapter: this stage's loss minus its reference's, or for a baseline its own loss curve. Both
    with the tolerance band the divergence check judges against; a configuration without a curve says
    why (OOM, error...) in its panel."""
    if stage is not None and stages.get(stage).multi_gpu:
        return _plot_multi_gpu_losses(rep, stage)
    plt = style()
    batches = rep.params.run.batch_sizes
    tol = rep.params.run.loss_tolerance
    fig, axes = plt.subplots(
        1, len(batches), figsize=(9, 3.2 if stage is None else 2.9), squeeze=False, sharex=True, sharey=True
    )
    drawn = [
        (_loss_panel_all(ax, rep, b, tol), "loss − its reference stage's loss (nats)")
        if stage is None
        else _loss_panel_stage(ax, rep, stage, b, tol)
        for ax, b in zip(axes[0], batches)
    ]
    notes = [[textwrap.fill(n, 70) for n in panel_notes] for panel_notes, _ in drawn]
    lines = max(sum(n.count("\n") + 1 for n in panel) for panel in notes) if stage is None else 0
    for ax, b, panel in zip(axes[0], batches, notes):
        # What a panel could not draw (OOM, no reference...): in a chapter's panel, which then has no
        # curve, in its middle; in the summary's, above it, never over the other stages' curves.
        ax.text(
            *((0.0, 1.02) if stage is None else (0.5, 0.5)),
            "\n".join(panel),
            transform=ax.transAxes,
            va="bottom" if stage is None else "center",
            ha="left" if stage is None else "center",
            fontsize=6.5 if stage is None else 9,
            color="firebrick",
        )
        ax.axvline(rep.params.run.warmup_steps - 0.5, color="grey", lw=0.6, ls=":")
        ax.set_title(f"B={b}", fontsize=9, pad=6 + 8.5 * lines)
        ax.set_xlabel("step (dotted: end of warm-up)")
    ylabel = drawn[0][1]
    axes[0][0].set_ylabel(ylabel)
    handles, labels = [], []
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    if stage is None:
        fig.suptitle("Each stage's training loss minus its reference stage's, same seed and batches", fontsize=10)
    legend_below(fig, handles, labels, min(3, len(labels)))
    return save(fig, rep, f"loss_{stage or 'all'}")


def _loss_panel_stage(ax, rep: Report, stage: str, b: int, tol: float) -> tuple[list[str], str]:
    """A chapter's panel at batch b: the stage's loss minus its reference's, or for a stage that
    is its own reference its loss curve. Returns (what could not be drawn, the y label)."""
    st, ref_key = stages.get(stage), loss_curves.reference(rep.stage_order, stage)
    rec, ref, ref_title = rep.rec(stage, b), rep.rec(ref_key, b), stages.get(ref_key).title
    ylabel = "training loss (nats)" if ref_key == stage else f"loss − {ref_key} loss (nats)"
    if not (rec and rec.get("losses")):
        return [f"{st.title}: {no_value(rec)} at B={b}"], ylabel
    if ref_key == stage:
        ax.plot(rec["losses"], color="C0", lw=1.0, label=st.title)
        later = [v for v in rec["losses"][3:] if np.isfinite(v)]
        if later:  # the first steps (loss ~ ln V) would squash everything else
            ax.set_ylim(min(later) - 0.1, max(later) + 0.3)
        return [], ylabel
    ax.axhspan(-tol, tol, color="C2", alpha=0.12, label=f"±{fmt.setting(tol)} nats tolerance")
    ax.axhline(0, color="grey", lw=0.6)
    if not (ref and ref.get("losses")):
        return [f"no {ref_title} loss at B={b} ({no_value(ref)})"], ylabel
    n = min(len(rec["losses"]), len(ref["losses"]))
    ax.plot(
        np.asarray(rec["losses"][:n]) - np.asarray(ref["losses"][:n]),
        color="C3",
        lw=1.0,
        label=f"{st.title} − {ref_title}",
    )
    return [], ylabel
