"""The data-parallel scaling curve, decided once (decisions.json's `scaling`): one point per GPU count against the
single-GPU configuration the DDP jobs replicate, and where each point's lost efficiency goes.

A DDP step of `t` ms on every rank loses 1 - efficiency = (t - t1) / t against t1, the time one GPU takes for a rank's
share of the batch at the single-GPU reference's speed. That loss is split three ways, each as a share of the step
(they add up to it):
  wrapper   the same DDP job on one rank with no peer (ddp_launch's one-rank job) against t1: DDP's own work
  at_once   the ranks' step with no all-reduce (`no_sync()`) against that one rank: what running every GPU of the
            host at once costs before any gradient moves
  allreduce the step with the all-reduce against the step without it: what overlap does not hide
Where the one-rank job did not run, the first two are one part, `rest`."""

from __future__ import annotations

import numpy as np

from lib.core import record, stages
from lib.results import decide

ONE_RANK = "one rank of this DDP job"  # the efficiency_reference of DDP records from before the same-sitting reference


def single_gpu(matrix: list[dict], best: dict | None, records: list[dict]) -> dict | None:
    """What a DDP point is judged against: the single-GPU reference its record carries (the recipe's configuration on
    one GPU in the same sitting, `source` naming it); for a record from before that, the recommended configuration
    `best` on one GPU (the median over its processes) or, where no stage's loss could be verified, the fastest
    single-GPU configuration of the decision `records` (`recommended` False). None when nothing ran on one GPU."""
    carried = [
        r
        for r in matrix
        if stages.is_multi_gpu(r["stage"])
        and r["status"] == record.Status.OK
        and r.get("single_gpu_tokens_per_s")
        and "one_rank_efficiency" in r  # the record's efficiency divides by the reference it carries
    ]
    if carried:  # measured in the same sitting as the DDP job, at its global batch (ddp_launch.efficiency)
        r = max(carried, key=lambda r: r["world_size"])
        return {
            "stage": r["base_stage"],
            "batch_size": r["batch_size"],
            "tokens_per_s": r["single_gpu_tokens_per_s"],
            "recommended": True,
            "source": r["efficiency_reference"],
        }
    if best is not None:
        return {
            "stage": best["stage"],
            "batch_size": best["batch_size"],
            "tokens_per_s": best["processes"]["median"],
            "recommended": True,
        }
    medians = {key: float(np.median(v)) for key, v in decide.throughputs(records).items()}
    if not medians:
        return None
    (stage, batch), tps = max(medians.items(), key=lambda kv: kv[1])
    return {"stage": stage, "batch_size": batch, "tokens_per_s": tps, "recommended": False}


def curve(matrix: list[dict], single: dict | None, single_loss: float | None = None, tolerance: float = 0.0) -> list:
    """One row per GPU count, fewest first: the single-GPU reference itself as the 1-GPU point, then every timed
    multi-GPU record (one per GPU count and node count, whichever hosts measured them), each with its speed-up over
    the reference, efficiency = tokens/s / (GPUs x its tokens/s), where the rest went (lost) and its loss held to the
    reference's final loss `single_loss` within `tolerance` (loss). A point that replicates another configuration
    than the reference's is flagged (same_config False)."""
    # the runner keeps one record per GPU count; of two left in a folder by hand, the later file wins
    multi = {  # one node, and several (a real multi-node run, or two nodes rehearsed on one host) beside it
        (int(r["world_size"]), int(r.get("nnodes") or 1)): r
        for r in matrix
        if stages.is_multi_gpu(r["stage"]) and r["status"] == record.Status.OK and (r.get("world_size") or 0) > 1
    }
    if single is None or not multi:
        return []
    ref = single["tokens_per_s"]
    rows = [
        {
            "gpus": 1,
            "nnodes": 1,
            "per_gpu_batch": single["batch_size"],
            "stage": single["stage"],
            "tokens_per_s": ref,
            "per_gpu_tokens_per_s": ref,
            "speedup": 1.0,
            "efficiency": 1.0,
            "allreduce_share": None,
            "one_rank_efficiency": None,
            "lost": None,
            "loss": None,
            "same_config": True,
            "source": single.get("source"),  # what the record names as its one-GPU reference, where it carries one
        }
    ]
    for (gpus, _), r in sorted(multi.items()):
        efficiency = r["tokens_per_s"] / (gpus * ref)
        one_rank = r.get(
            "one_rank_efficiency", r.get("scaling_efficiency") if r.get("efficiency_reference") == ONE_RANK else None
        )
        rows.append(
            {
                "gpus": gpus,
                "nnodes": r.get("nnodes") or 1,
                "per_gpu_batch": r["batch_size"],
                "stage": r.get("base_stage"),
                "tokens_per_s": r["tokens_per_s"],
                "per_gpu_tokens_per_s": r["tokens_per_s"] / gpus,
                "speedup": r["tokens_per_s"] / ref,
                "efficiency": efficiency,
                "allreduce_share": r.get("allreduce_share"),
                "one_rank_efficiency": one_rank,
                "lost": lost(r, efficiency, ref),
                "loss": loss_check(r, single_loss, tolerance),
                "same_config": (r.get("base_stage"), r["batch_size"]) == (single["stage"], single["batch_size"]),
            }
        )
    return rows


def lost(r: dict, efficiency: float, single_tps: float) -> dict | None:
    """Where a DDP point's lost efficiency goes, as shares of its step (module docstring); None without the
    all-reduce share."""
    share = r.get("allreduce_share")
    if share is None:
        return None
    one = r.get("one_rank_tokens_per_s")
    # a rank's share of the step at one rank's speed, as a fraction of the DDP step: per-GPU speed over one rank's
    wrapper = efficiency * (single_tps / one - 1) if one else None
    before = 1 - efficiency - share  # everything the all-reduce does not explain
    return {
        "wrapper": wrapper,
        "at_once": before - wrapper if wrapper is not None else None,
        "allreduce": share,
        "rest": None if wrapper is not None else before,
    }


def loss_check(r: dict, single_loss: float | None, tolerance: float) -> dict | None:
    """The DDP job's final loss (the ranks' mean, each step the same sequences as the one-GPU recipe's: lib/measure/
    ddp.py) against the one-GPU recipe's, within the loss gate's tolerance; None where either is missing, or the job
    was not the recipe's (a record from before the ranks shared the recipe's batches reads none: `shares_batches`)."""
    if single_loss is None or r.get("final_loss") is None or not r.get("shares_batches"):
        return None
    diff = r["final_loss"] - single_loss
    return {
        "one_gpu": single_loss,
        "ddp": r["final_loss"],
        "diff": diff,
        "tolerance": tolerance,
        "holds": abs(diff) <= tolerance,
    }
