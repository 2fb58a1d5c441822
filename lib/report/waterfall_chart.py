"""Section 2's chart: the cumulative speed-up from the first stage to the recipe's, lever by lever, coloured by each
lever's decision (results.waterfall.waterfall and the lever table's decisions). Not page 1's: it adds the levers in
the matrix's order, where page 1's worth takes each out of the recipe, and readers took the two for a contradiction."""

from __future__ import annotations

from lib.report import formats as fmt
from lib.report.loader import Report


def plot_waterfall(rep: Report):
    """The cumulative speed-up from the first stage to the recipe's, lever by lever (each lever at the largest batch
    it and the stage before it ran, named on its bar), coloured by the lever's decision."""
    import matplotlib.pyplot as plt

    from lib.report.charts import save

    steps = rep.decided["waterfall"]
    if not steps:
        return None
    decision = {r["stage"]: r["decision"] for r in rep.decided["levers"]}
    fig, ax = plt.subplots(figsize=(7.2, 0.28 * len(steps) + 0.7))
    y = list(range(len(steps)))
    prev = 1.0
    for i, s in enumerate(steps):
        if s["cumulative"] is None:
            ax.text(prev, i, "  not measured", va="center", fontsize=7)
            continue
        colour = fmt.DECISIONS.get(decision.get(s["stage"]), ("", "#4c72b0"))[1] if i else "#4c72b0"
        left, width = (min(prev, s["cumulative"]), abs(s["cumulative"] - prev)) if i else (0.0, 1.0)
        direct = s.get("direct", True)
        ax.barh(i, width, left=left, color=colour, height=0.6, hatch=None if direct else "///")
        at = f" at B={s['batch']}" if direct else f" (×{fmt.times(s['ratio'], unit='')} at B={s['batch']}, chained)"
        label = fmt.times(s["cumulative"]) + (at if i else "")
        ax.text(max(s["cumulative"], prev), i, "  " + label, va="center", fontsize=7)
        prev = s["cumulative"]
    ax.set_yticks(y, [s["title"] for s in steps], fontsize=7)
    ax.set_ylim(len(steps) - 0.5, -0.5)
    ax.set_xlim(0, max(x["cumulative"] or 0 for x in steps) * 1.6)  # room for the longest label past its bar
    chained = "; hatched: chained" if any(not x.get("direct", True) for x in steps) else ""
    # The ladder adds each lever to the stages before it (eager until torch.compile), so a bar is not the lever's worth
    # in the recipe (the table's): the unpadded vocabulary costs 1.5x in eager at B=16 and 3.6 % in the compiled recipe
    ax.set_xlabel(
        f"× {steps[0]['title']} as each lever is added in turn, at the batch named{chained}; "
        "its worth in the recipe is page 1's",
        fontsize=7,
    )
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="y", visible=False)
    fig.tight_layout()
    return save(fig, rep, "waterfall")
