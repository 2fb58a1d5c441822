"""The quality tests' loss curves (summary, section 3, in the PDF too): for each quality test, the
lever's and its reference's training loss step by step, mean and range over the test's seeds, and beneath it their
paired difference with the margin, so a reader sees where in training the verdict's difference arises."""

from __future__ import annotations

import numpy as np

from lib.core import stages
from lib.report.formats import setting
from lib.report.charts import legend_below, save, style
from lib.report.loader import Report
from lib.results import parity
from lib.results.decisions import ADOPT, NEUTRAL, NOT_YET

MAX_PANELS = 4  # columns on one PDF page's width


def tests(rep: Report) -> list[dict]:
    """The tests to draw: each lever's own test and the whole stack's check against the canonical reference, for the
    levers page 1 adopts, keeps neutral or leaves 'not yet', fastest first as the checks list them."""
    keep = {r["stage"] for r in rep.decided["levers"] if r["decision"] in (ADOPT, NEUTRAL, NOT_YET)}
    recipe = (rep.decided.get("recipe") or {}).get("stage")
    out = []
    for key, c in rep.quality_checks.items():
        if key not in keep and key != recipe:
            continue
        out += [c] + ([c["canonical"]] if c.get("canonical") else [])
    return out[:MAX_PANELS]


def _curves(runs_by_seed: dict, seeds: list[int]) -> np.ndarray:
    losses = [runs_by_seed[s][0]["losses"] for s in seeds if runs_by_seed.get(s) and runs_by_seed[s][0].get("losses")]
    n = min((len(x) for x in losses), default=0)
    return np.asarray([x[:n] for x in losses], dtype=float)


def plot(rep: Report):
    """One column per test: the two sides' loss (mean, and the range over seeds shaded), and their paired difference
    (mean, the range shaded) against the margin. None where the report has no such test."""
    drawn = tests(rep)
    if not drawn:
        return None
    plt = style()
    by = parity.runs(rep.decisions)
    fig, axes = plt.subplots(2, len(drawn), figsize=(9, 4.4), squeeze=False, sharex="col")
    for col, c in enumerate(drawn):
        top, bottom = axes[0][col], axes[1][col]
        lever = _curves(by.get((c["stage"], c["batch_size"]), {}), c["seeds"])
        ref = _curves(by.get((c["reference"], c["batch_size"]), {}), c["seeds"])
        n = min(lever.shape[-1], ref.shape[-1]) if lever.size and ref.size else 0
        if not n:
            top.text(0.5, 0.5, "no loss curves recorded", transform=top.transAxes, ha="center", fontsize=8)
            continue
        steps = np.arange(1, n + 1)
        for data, colour, label in ((ref[:, :n], "C0", "reference"), (lever[:, :n], "C3", "lever")):
            top.plot(steps, data.mean(axis=0), color=colour, lw=1.0, label=label)
            top.fill_between(steps, data.min(axis=0), data.max(axis=0), color=colour, alpha=0.15, lw=0)
        later = ref[:, n // 4 :]
        top.set_ylim(float(later.min()) - 0.2, float(later.max()) + 0.4)  # past the first steps' drop from ~11
        diff = lever[:, :n] - ref[:, :n]
        bottom.plot(steps, diff.mean(axis=0), color="C3", lw=1.0, label="lever − reference, mean over seeds")
        bottom.fill_between(steps, diff.min(axis=0), diff.max(axis=0), color="C3", alpha=0.15, lw=0)
        bottom.axhline(0, color="grey", lw=0.6)
        bottom.axhline(c["margin"], color="firebrick", lw=0.8, ls="--", label=f"margin +{setting(c['margin'])} nats")
        top.set_title(
            f"{stages.get(c['stage']).title}\nvs {stages.get(c['reference']).title}: {c['verdict']}, "
            f"{len(c['seeds'])} seeds",
            fontsize=8,
        )
        bottom.set_xlabel(f"step (B={c['batch_size']}; {c['steps']} steps = the horizon)", fontsize=8)
    axes[0][0].set_ylabel("training loss (nats)")
    axes[1][0].set_ylabel("paired difference (nats)")
    handles, labels = [], []
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    fig.suptitle(
        "Quality tests: each side's loss over its seeds (shaded: their range), and the paired difference", fontsize=10
    )
    legend_below(fig, handles, labels, min(4, len(labels)))
    return save(fig, rep, "quality_curves")
