"""Which training-loss curves a report sets side by side: the stage each stage's loss is judged against, and a
multi-GPU stage's curve with the single-GPU configuration it replicates. A Report is passed in, not imported."""

from __future__ import annotations

from lib.core import stages


def reference(stage_order: list[str], key: str) -> str:
    """The stage whose loss `key` is judged against: its registry reference, or itself for the report's first stage
    (its baseline)."""
    return key if key == stage_order[0] else stages.get(key).reference


def multi_gpu_pair(rep, stage: str) -> tuple[dict | None, dict | None]:
    """(the record of `stage` with a loss curve over the most GPUs, the single-GPU decision record with a loss curve of
    its base stage at its batch, matrix or batch sweep); None for what has none."""
    rec = max(
        (r for r in rep.records if r["stage"] == stage and r.get("losses")),  # the most GPUs measured
        key=lambda r: r.get("world_size") or 0,
        default=None,
    )
    base = rec and next(
        (
            r
            for r in rep.decisions
            if r["stage"] == rec.get("base_stage")
            and r["batch_size"] == rec["batch_size"]
            and r.get("variant") in (None, "batch sweep")
            and r.get("losses")
        ),
        None,
    )
    return rec, base
