"""The multi-GPU stage: DistributedDataParallel across every GPU of the host, one process per
GPU, launched by torchrun (`python -m torch.distributed.run --standalone --nproc_per_node=N
-m lib.ddp job.json result.json`; runner.run_ddp does this).

Weak scaling: each rank keeps the single-GPU per-GPU batch, so the global batch grows with N.
Measured: the step time with gradient all-reduce (the normal DDP step) and, on the same ranks,
the step time under `no_sync()` (no all-reduce), so the all-reduce's share of the step is
1 - t(no_sync) / t(sync). Rank 0 writes one result record."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

from . import data, results, stages
from .measure import batch_dynamic, build, device_type, memory, time_steps


def run(job: dict) -> dict | None:
    params, batch = job["params"], job["batch_size"]
    stage = stages.get(job["base_stage"])
    r = params["run"]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = device_type(params["backend"])
    if dev == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if dev == "cuda" else "gloo")
    torch.set_float32_matmul_precision("high" if stage.tf32 else "highest")
    model, _, opt = build(params, dataclasses.replace(stage, compile=False), dev)
    # Compiled inside DDP, not around it: switching the all-reduce off (no_sync) then never
    # recompiles. The cost: gradients reach DDP only when the compiled backward ends, so the
    # all-reduce does not overlap the backward, and its share below is the whole of it.
    ddp = torch.nn.parallel.DistributedDataParallel(torch.compile(model) if stage.compile else model)
    ctx = (torch.autocast(device_type=dev, dtype=getattr(torch, stage.autocast))
           if stage.autocast else contextlib.nullcontext())
    n_steps = r["warmup_steps"] + 2 * r["timed_steps"]
    # Each rank reads its own slice of the corpus, as a data-parallel job would.
    tokens = data.load_tokens(params["model"]["vocab_size"])
    xs, ys = zip(*data.batches(tokens[rank * batch * r["seq_len"]:], batch, r["seq_len"], n_steps))
    xs = torch.from_numpy(np.stack(xs)).to(model.lm_head.weight.device)
    ys = torch.from_numpy(np.stack(ys)).to(model.lm_head.weight.device)
    i = 0
    losses = []

    def step(sync=True):
        nonlocal i
        with contextlib.nullcontext() if sync else ddp.no_sync():  # no_sync: skip the all-reduce
            with ctx:
                _, loss = ddp(*(batch_dynamic(xs[i], ys[i]) if stage.compile else (xs[i], ys[i])))
            loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), r["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        i += 1

    for _ in range(r["warmup_steps"]):
        step()
    synced = time_steps(lambda _: step(), range(r["timed_steps"]), dev)
    local = time_steps(lambda _: step(sync=False), range(r["timed_steps"]), dev)
    # The slowest rank sets the pace: gather every rank's median and keep the largest.
    # NCCL only moves device tensors (gloo takes CPU ones), so gather on the model's device.
    where = model.lm_head.weight.device
    med = torch.tensor([float(np.median(synced)), float(np.median(local))], dtype=torch.float64, device=where)
    gathered = [torch.zeros_like(med) for _ in range(world)]
    dist.all_gather(gathered, med)
    gathered = [g.cpu() for g in gathered]
    dist.destroy_process_group()
    if rank != 0:
        return None
    rec = results.base_record(params, stages.get("ddp"), batch)
    rec["fingerprint"] = job.get("fingerprint")
    results.fill_timing(rec, synced, batch * r["seq_len"] * world)
    slowest_sync = max(float(g[0]) for g in gathered)
    slowest_local = max(float(g[1]) for g in gathered)
    rec.update(world_size=world, per_gpu_batch=batch, median_ms=slowest_sync,
               tokens_per_s=batch * r["seq_len"] * world / (slowest_sync / 1e3),
               no_sync_median_ms=slowest_local, allreduce_share=max(0.0, 1 - slowest_local / slowest_sync),
               losses=[float(v) for v in torch.stack(losses[: r["warmup_steps"] + r["timed_steps"]]).float().cpu()],
               base_stage=stage.key, backend_dist="nccl" if dev == "cuda" else "gloo")
    rec["per_gpu_tokens_per_s"] = rec["tokens_per_s"] / world
    rec.update(memory(dev))
    results.fill_loss(rec, r["final_loss_window"])
    # Efficiency against one rank of this same job where runner measured it (like with like),
    # else against the single-GPU row of the configuration (measured in another process).
    single, one_rank = job.get("single_gpu_tokens_per_s"), job.get("one_rank_tokens_per_s")
    ref = one_rank or single
    rec.update(single_gpu_tokens_per_s=single, one_rank_tokens_per_s=one_rank,
               scaling_efficiency=rec["per_gpu_tokens_per_s"] / ref if ref else None,
               efficiency_reference="one rank of this DDP job" if one_rank else "the single-GPU row" if single else None)
    return rec


if __name__ == "__main__":
    job_path, out_path = sys.argv[1:3]
    rec = run(json.loads(open(job_path).read()))
    if rec is not None:
        results.write_atomic(out_path, rec)
