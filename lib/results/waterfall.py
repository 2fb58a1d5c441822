"""The recipe's speed-up as parts: the cumulative speed-up from the first stage, lever by lever (page 1's chart), and
the recipe's lead over the canonical trainer split into the levers it adds after the canonical trainer's stage."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lib.core import stages
from lib.results import decide


def waterfall(df, recipe: dict | None, first: str) -> list[dict]:
    """The cumulative speed-up from the first stage to the recipe's stage, lever by lever. Each stage's figure is the
    matrix's own × over the first stage at the largest batch both ran (`direct`), so a bar reads as the matrix does;
    a stage never timed at a batch the first stage ran at continues the chain by its ratio over the stage before it
    at the largest batch both ran (`direct` False: the chart marks it)."""
    if not recipe:
        return []
    out, total = [], 1.0
    for key in decide.lineage(recipe["stage"])[1:]:
        direct = df[(df["stage"] == key) & df["speedup_vs_baseline"].notna()]
        chained = df[(df["stage"] == key) & df["speedup_vs_previous"].notna()]
        if direct.empty and chained.empty:
            out.append({"stage": key, "title": stages.get(key).title, "ratio": None, "batch": None, "cumulative": None})
            continue
        row = (chained if direct.empty else direct).loc[(chained if direct.empty else direct)["batch_size"].idxmax()]
        ratio = float(row["speedup_vs_previous"]) if not pd.isna(row["speedup_vs_previous"]) else None
        total = float(row["speedup_vs_baseline"]) if not direct.empty else total * ratio
        out.append(
            {
                "stage": key,
                "title": stages.get(key).title,
                "ratio": ratio,
                "batch": int(row["batch_size"]),
                "cumulative": total,
                "direct": not direct.empty,
            }
        )
    head = {"stage": first, "title": stages.get(first).title, "ratio": 1.0, "batch": None, "cumulative": 1.0}
    return [{**head, "direct": True}, *out]


def beyond_canonical(wf: list[dict], recipe: dict | None) -> dict | None:
    """The recipe's lead over the canonical trainer in parts: each lever the recipe adds after the canonical trainer's
    stage, by its ratio in the waterfall (the matrix, over the stage before it), and the rest (the recipe's micro-batch
    and accumulation, and the harness against the plain loop) as what the measured ratio leaves over their product.
    Where two GPUs' leads differ, these parts say which lever's share moved."""
    if not recipe or not recipe.get("ratio") or not recipe.get("canonical"):
        return None
    after = [k for k in decide.lineage(recipe["stage"]) if k not in decide.lineage(recipe["canonical"]["stage"])]
    parts = [
        {k: w[k] for k in ("stage", "title", "ratio", "batch")} for w in wf if w["stage"] in after and w.get("ratio")
    ]
    product = float(np.prod([p["ratio"] for p in parts])) if parts else 1.0
    return {"canonical_stage": recipe["canonical"]["stage"], "levers": parts, "rest": recipe["ratio"] / product}
