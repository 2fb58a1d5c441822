"""*How a kernel profile reads*: where each stage's profiled step spends its busy kernel time, by
category (the chart and the table of the summary), and a configuration's largest kernels with the
op that launched them (the chapters). Every profile is read by today's rules
(kernel_categories.current, applied when the report loads)."""

from __future__ import annotations

import html
import re

import numpy as np

from lib.core import kernel_categories, stages
from lib.core.kernel_categories import kernel_label
from lib.report import formats as fmt
from lib.report.charts import legend_below, save, stage_rows, style
from lib.report.evidence_view import OK, none, table
from lib.report.loader import Report, no_value, pct
from lib.results import profiles

COLORS = dict(zip(kernel_categories.CATEGORIES, ("C0", "C3", "C1", "C2", "C4", "C7")))


def plot_profile(rep: Report):
    """Per stage, its profiled step's busy kernel time by category (ms), and each category's
    share of that busy time; a stage without a profile at the chart's batch says why."""
    batch, by = profiles.profiled(rep)
    if not by:
        return None
    plt = style()
    fig, (ms_ax, share_ax) = plt.subplots(
        1, 2, figsize=(9, 0.9 + 0.26 * len(by)), sharey=True, gridspec_kw={"width_ratios": (1, 1.4)}
    )
    y = stage_rows(share_ax, list(by))
    left_ms, left_share = np.zeros(len(by)), np.zeros(len(by))
    for cat, (ms, share) in profiles.by_category(by).items():
        ms, share = np.array(ms), np.array(share)
        ms_ax.barh(y, ms, 0.7, left=left_ms, color=COLORS[cat], label=cat)
        share_ax.barh(y, share, 0.7, left=left_share, color=COLORS[cat])
        for i, v in enumerate(share):
            if v >= 7:
                share_ax.text(
                    left_share[i] + v / 2, y[i], pct(v / 100, 0, ""), ha="center", va="center", fontsize=6, color="w"
                )
        left_ms += ms
        left_share += share
    for i, r in enumerate(by.values()):
        if profiles.has_profile(r):
            ms_ax.text(left_ms[i], y[i], f" {fmt.ms(left_ms[i], 0)}", va="center", fontsize=6)
        else:
            for ax in (ms_ax, share_ax):
                ax.text(
                    0.01,
                    y[i],
                    no_value(r) if r is None or r["status"] not in OK else "no profile",
                    transform=ax.get_yaxis_transform(),
                    va="center",
                    fontsize=7,
                    color="firebrick",
                )
    unit = profiles.unit(next(r for r in by.values() if profiles.has_profile(r))["kernel_profile"])
    ms_ax.set_xlabel(f"busy {unit} time per step (ms)")
    share_ax.set_xlabel(f"share of busy {unit} time (%; labels where ≥ 7 %)")
    share_ax.set_xlim(0, 100)
    fig.suptitle(f"Where one training step's {unit} time goes, B={batch}", fontsize=10)
    legend_below(fig, *ms_ax.get_legend_handles_labels(), len(kernel_categories.CATEGORIES))
    return save(fig, rep, "kernel_profile")


def profile_table_html(rep: Report) -> str:
    """Each category's share of busy kernel time per stage (whole percentages summing to 100), at
    the batch size of the chart, and how much of that time today's rules classified."""
    batch, by = profiles.profiled(rep)
    if not by:
        return none("No kernel profile was recorded for these results.")
    rows = []
    for key, r in by.items():
        row = {
            "Stage": stages.get(key).title,
            f"busy ms/step<br><small>B={batch}</small>": "",
            "step ms<br><small>timed</small>": fmt.ms(r["median_ms"]) if r and r["status"] in OK else no_value(r),
        }
        if profiles.has_profile(r):
            p = r["kernel_profile"]
            row[f"busy ms/step<br><small>B={batch}</small>"] = fmt.ms(p["busy_ms"])
            row.update({c: f"{v} %" for c, v in kernel_categories.percents(kernel_categories.shares(p)).items()})
            share = profiles.classified(p)
            row["classified by today's rules"] = pct(share, 0) if share is not None else ""
        rows.append(row)
    unit = profiles.unit(next(r for r in by.values() if profiles.has_profile(r))["kernel_profile"])
    what = "the GPU's summed kernel time" if unit == "kernel" else "the operators' summed self CPU time"
    return table(rows) + (
        f'<p class="note">Shares of busy {unit} time ({what} in the profiled step, not the '
        "step's wall time), each row summing to 100 %. A kernel counts in the category of the aten "
        "op that launched it where that op names one, else by its own name "
        "(lib/core/kernel_categories.py). A record taken before every kernel was stored names only its "
        "largest kernels: the rest of its time keeps the categories it was recorded with "
        "(last column).</p>"
    )


def top_kernels_html(rec: dict | None, limit: int = 8) -> str:
    """The record's largest kernels: name (shortened at token boundaries, the full name in its
    title) with the op that launched it, category, time and share of busy kernel time."""
    if not rec or not rec.get("kernel_profile"):
        return none("No kernel profile for this configuration.")
    p = rec["kernel_profile"]
    head = (
        "kernel ← the op that launched it"
        if profiles.unit(p) == "kernel"
        else "operator ← the optimizer step it ran in"
    )
    rows = [
        {
            head: f'<code title="{html.escape(k["name"])}">{_wrappable(kernel_label(k["name"]))}</code>'
            + (f"<br><small>← <code>{html.escape(k['op'])}</code></small>" if k.get("op") else ""),
            "category": k["category"],
            "ms/step": fmt.ms(k["ms"], 2),
            f"share of busy<br>{profiles.unit(p)} time": pct(k["share"]),
            "calls/step": fmt.count(k["calls"]),
        }
        for k in p["kernels"][:limit]
    ]
    return table(rows, "matrix kernels") + (
        f'<p class="note">{p["source"]}, one step of {rec["stage_title"]} at B={rec["batch_size"]}; '
        f"the GPU busy {fmt.ms(p['busy_ms'])} ms in that profiled step (the timed steps' median: "
        f"{fmt.ms(rec.get('median_ms'))} ms). Template arguments "
        "and parameter lists shown as … are in each name's tooltip in the HTML report (report.html).</p>"
    )


def _wrappable(text: str) -> str:
    """Escaped, with line-break opportunities after the separators of a kernel name's tokens."""
    return re.sub(r"(::|_|,)", r"\1<wbr>", html.escape(text))
