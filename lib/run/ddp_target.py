"""*What a DDP job replicates*: the recipe's configuration with its accumulation steps shared among the ranks (GPT-2's
global batch, against the recipe's tokens/s on one GPU), or, where the recipe gives none, the matrix's best
single-GPU configuration at its own batch, each with the source its efficiency names."""

from __future__ import annotations

import json
from pathlib import Path

from lib.core import record, stages
from lib.core.params import Params
from lib.results import noise
from lib.run import recipe


def recipe_target(params: Params, report_dir: Path, gpus: int, roomy) -> dict | None:
    """The recipe's recommended side (lib/run/recipe.py) as the DDP job's configuration: its stage and
    micro-batch, its accumulation steps shared among `gpus` ranks (so the optimizer step still sees
    GPT-2's global batch; in smaller micro-batches where the steps do not divide, `shared`), and its median
    tokens/s on one GPU as the reference. None where the recipe has no timed side or its sequences do not
    divide among the ranks."""
    pick = recipe.recipe_config(params, report_dir)
    if pick is None or not roomy(pick):
        return None
    key, batch = pick["stage"], pick["batch_size"]
    paths = [recipe.side_path(report_dir, "recommended", key, batch, k) for k in range(params.evidence.repeats)]
    found = [json.loads(p.read_text()) for p in paths if p.exists()]
    timed = [r for r in found if r.get("status") == record.Status.OK]
    micro = params.micro_steps(batch)
    share = shared(batch, micro, gpus)
    if not timed or share is None:
        return None
    spread = noise.spread([r["tokens_per_s"] for r in timed])
    title = stages.get(key).title
    split = (
        ""
        if share == (batch, micro // gpus)
        else f"; its {micro} accumulation steps of B={batch} do not divide among {gpus} ranks, so each rank runs "
        f"B={share[0]} × {share[1]}: GPT-2's batch still, in smaller micro-batches"
    )
    return {
        "stage": key,
        "batch_size": share[0],
        "micro_steps": share[1],
        "tokens_per_s": spread["median"],
        "source": f"{title} at B={batch} × {micro} micro-steps on one GPU, GPT-2's "
        f"{params.evidence.global_batch_tokens:,}-token batch (the recipe, {processes(spread['n'])}){split}",
    }


def shared(batch: int, micro: int, gpus: int) -> tuple[int, int] | None:
    """(micro-batch, micro-steps) a rank runs so that `gpus` ranks train the recipe's batch × micro sequences a step:
    the recipe's micro-batch with its steps shared where they divide among the ranks, else the largest micro-batch
    up to the recipe's that divides each rank's share (eight ranks of a B=128 × 4 recipe: B=64 × 1); None where the
    sequences themselves do not divide among the ranks."""
    if micro % gpus == 0:
        return batch, micro // gpus
    if (batch * micro) % gpus:
        return None
    each = batch * micro // gpus
    size = max(d for d in range(1, min(batch, each) + 1) if each % d == 0)
    return size, each // size


def unshared(params: Params, report_dir, gpus: int, best: dict | None) -> dict:
    """The matrix's target where the recipe gives none, its source saying why where the recipe ran: its sequences a
    step do not divide among the ranks (or it left too little memory for DDP's buffers)."""
    target, pick = matrix_target(best, params), recipe.recipe_config(params, report_dir)
    micro = params.micro_steps(pick["batch_size"]) if pick else None
    if target["source"] and micro:
        why = (
            f"the recipe's {micro} × B={pick['batch_size']} sequences a step do not divide among {gpus} ranks"
            if shared(pick["batch_size"], micro, gpus) is None
            else "the recipe's configuration leaves too little device memory for DDP's buffers"
        )
        target["source"] += f"; not the recipe: {why}, so each rank runs this configuration at its own batch"
    return target


def matrix_target(best: dict | None, params: Params) -> dict:
    """Where the recipe gives no configuration: the best single-GPU configuration at its own batch,
    every rank keeping it (weak scaling), against its median over the processes that timed it."""
    if best is None:
        return {
            "stage": "vocab",
            "batch_size": params.run.batch_sizes[0],
            "micro_steps": 1,
            "tokens_per_s": None,
            "source": None,
        }
    tps = (best.get("processes") or {}).get("median", best["tokens_per_s"])
    n = (best.get("processes") or {}).get("n", 1)
    return {
        "stage": best["stage"],
        "batch_size": best["batch_size"],
        "micro_steps": 1,
        "tokens_per_s": tps,
        "source": f"{stages.get(best['stage']).title} at B={best['batch_size']} on one GPU ({processes(n)})",
    }


def processes(n: int) -> str:
    return "one process" if n == 1 else f"median of {n} processes"
