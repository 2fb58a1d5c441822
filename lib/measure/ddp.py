"""The multi-GPU stage: DistributedDataParallel across every GPU of the host, one process per
GPU, launched by torchrun (`python -m torch.distributed.run --standalone --nproc_per_node=N
-m lib.measure.ddp job.json result.json`; ddp_launch.run_ddp does this).

Each rank trains `micro_steps` micro-batches of the single-GPU configuration's batch per step,
gradients all-reduced once, on the last (nanoGPT's accumulation): ddp_launch picks the micro-steps
that keep GPT-2's global batch (the recipe's) whatever the GPU count, or 1 (weak scaling) where the
global batch does not divide. Measured: the step time with gradient all-reduce (the normal DDP step) and, on the same ranks,
the step time under `no_sync()` (no all-reduce), so the all-reduce's share of the step is
1 - t(no_sync) / t(sync). Rank 0 writes one result record.

Several nodes (job["nnodes"] > 1, torchrun's c10d rendezvous; ddp_launch._launch_args): the
rendezvous numbers ranks in its own order (by host and process id; torchrun ignores
--node_rank there), so the ranks renumber themselves as the user's NODE_RANK says (node 0's
local rank 0 is rank 0, reading the corpus slice a single GPU reads) and all run node 0's job,
whose configuration came from the results of the report node 0 writes. Rank 0 writes the record
on node 0; the ranks of the other nodes write nothing."""

from __future__ import annotations

import gc
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from lib.core import data, stages
from lib.core.params import Params
from lib.measure import clocks, compile_cache, energy
from lib.measure.worker import memory
from lib.results import stats, store
from lib.train import step


def _follow_node_zero(job: dict, world: int, local: int) -> tuple[dict, int]:
    """(node 0's job, this process's rank numbered node by node as NODE_RANK says)."""
    everyone: list = [None] * world
    dist.all_gather_object(everyone, (job["node_rank"], local, job))
    slots = sorted((node, lr) for node, lr, _ in everyone)
    twice = sorted({node for node, lr in slots if slots.count((node, lr)) > 1})
    if twice:
        raise RuntimeError(f"two nodes were started with NODE_RANK={twice[0]}: give each node its own")
    if (0, 0) not in slots:
        raise RuntimeError("no node was started with NODE_RANK=0 (the node that writes the record)")
    return next(j for node, lr, j in everyone if (node, lr) == (0, 0)), slots.index((job["node_rank"], local))


def run(job: dict) -> dict | None:
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    dev = step.device_type(job["params"].backend)
    if dev == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if dev == "cuda" else "gloo")
    if job.get("nnodes", 1) > 1:
        job, rank = _follow_node_zero(job, world, local)
    params, batch = job["params"], job["batch_size"]
    stage = stages.get(job["base_stage"])
    r = params.run
    # DDP wraps the compiled model (nanoGPT's order). The cost: gradients reach DDP only when the
    # compiled backward ends, so the all-reduce does not overlap the backward.
    micro = job.get("micro_steps", 1)
    options = stages.get("ddp").ddp_options  # the DDP stage's settings (bucket size, ...)
    ddp = torch.nn.parallel.DistributedDataParallel
    train = step.build(params, stage, dev, wrap=ddp, micro_steps=micro, wrap_options=options)
    model = train.model
    checksum = model.init_checksum()  # before any step: the same weights as every single-GPU stage
    n_steps = r.warmup_steps + 2 * r.timed_steps
    # Each rank reads its share of every global batch, so step i of the job trains the sequences of step i of the
    # one-GPU recipe (its micro-batches in order) and its losses can be held to the recipe's (scaling.curve).
    per_rank = batch * micro  # sequences a rank trains per step
    xs, ys = data.device_batches(params, per_rank * world, n_steps, dev)
    xs, ys = (t[:, rank * per_rank : (rank + 1) * per_rank].contiguous() for t in (xs, ys))
    losses = []

    def one(i: int, sync: bool = True):
        losses.append(train(xs[i], ys[i], sync=sync))

    # Each rank's device memory peak over the warm-up steps (NVML, a host thread; untimed, as the worker samples it),
    # so the DDP row's memory is a peak like the single-GPU recipe's and not what stays in use after the steps.
    sampler = energy.MemorySampler(
        dev, torch.cuda.current_device() if dev == "cuda" else 0, span="the warm-up steps, the largest over the ranks"
    )
    sampler.start()
    t0 = time.perf_counter()
    one(0)  # the first step compiles (or loads from the cache): timed apart, as the worker does
    step.synchronize(dev)
    first_step_s = time.perf_counter() - t0
    for i in range(1, r.warmup_steps):
        one(i)
    step.synchronize(dev)
    peak = sampler.stop()
    timed = range(r.warmup_steps, r.warmup_steps + r.timed_steps)
    clock = clocks.ClockSampler(dev, local)
    clock.start()
    synced = step.time_steps(one, timed, dev)
    local = step.time_steps(lambda i: one(i + r.timed_steps, sync=False), timed, dev)
    sampled = {**clock.stop(), "span": "rank 0's timed steps (its own GPU)"}
    # The slowest rank sets the pace: gather every rank's median and keep the largest.
    # NCCL only moves device tensors (gloo takes CPU ones), so gather on the model's device.
    where = model.lm_head.weight.device
    own_peak = float(peak[energy.PEAK_KEY]) if peak[energy.PEAK_KEY] is not None else -1.0  # -1: not sampled
    med = torch.tensor([float(np.median(synced)), float(np.median(local)), own_peak], dtype=torch.float64, device=where)
    gathered = [torch.zeros_like(med) for _ in range(world)]
    dist.all_gather(gathered, med)
    gathered = [g.cpu() for g in gathered]
    # the job's loss each synchronised step: the mean over the ranks, as one GPU's loss is over its whole batch
    mean_loss = torch.stack(losses[: r.warmup_steps + r.timed_steps]).float().to(where)
    dist.all_reduce(mean_loss)
    mean_loss = (mean_loss / world).cpu()
    # Drop the DDP wrapper (its reducer holds the process group) before the group goes: torch 2.13
    # with gloo otherwise sometimes aborts at exit ("terminate called without an active exception")
    # on a rank that leaves first, which two nodes made visible. The allocator keeps its blocks.
    one = train = model = None  # noqa: F841 (the references go; `one` and the lambda close over them)
    gc.collect()
    dist.destroy_process_group()
    if rank != 0:
        return None
    rec = store.base_record(params, stages.get("ddp"), batch)
    rec.update(
        first_step_s=first_step_s,
        fingerprint=job.get("fingerprint"),
        init_checksum=checksum,
        provenance=job.get("stamp"),
        clocks=sampled,
    )
    from torch._dynamo.utils import (
        counters,  # rank 0's compile: from the cache, or cold
    )

    rec["compile_cache"] = compile_cache.outcome(counters, job.get("cold_compile"))
    tokens = per_rank * r.seq_len * world  # per optimizer step, every rank
    stats.fill_timing(rec, synced, tokens)
    slowest_sync = max(float(g[0]) for g in gathered)
    slowest_local = max(float(g[1]) for g in gathered)
    rec.update(
        world_size=world,
        nnodes=job.get("nnodes", 1),
        per_gpu_batch=batch,
        micro_steps=micro,
        global_batch_tokens=tokens,
        median_ms=slowest_sync,
        tokens_per_s=tokens / (slowest_sync / 1e3),
        no_sync_median_ms=slowest_local,
        allreduce_share=max(0.0, 1 - slowest_local / slowest_sync),
        losses=[float(v) for v in mean_loss],
        base_stage=stage.key,
        ddp_options=sorted(options),  # what DDP ran with (the chapter's code shows these)
        shares_batches=True,  # step i trains the one-GPU recipe's step-i sequences: its losses compare
        backend_dist="nccl" if dev == "cuda" else "gloo",
    )
    rec["per_gpu_tokens_per_s"] = rec["tokens_per_s"] / world
    rec.update(memory(dev))
    rec.update(most_memory(peak, [float(g[2]) for g in gathered]))
    stats.fill_loss(rec, r.final_loss_window)
    return rec


def most_memory(own: dict, peaks: list[float]) -> dict:
    """The record's sampled device peak: the largest of the ranks' (each -1 where its sampler had none), with rank 0's
    note (how it was sampled, or why not); None where no rank sampled one."""
    sampled = [p for p in peaks if p >= 0]
    return {energy.PEAK_KEY: int(max(sampled)) if sampled else None, energy.NOTE_KEY: own[energy.NOTE_KEY]}


if __name__ == "__main__":
    job_path, out_path = sys.argv[1:3]
    job = json.loads(open(job_path).read())
    rec = run({**job, "params": Params.from_dict(job["params"], lenient=True)})
    if rec is not None:
        store.write_record(out_path, rec)
