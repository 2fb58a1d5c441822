"""A probe of where DDP's lost points go at GPT-2's batch, and of what the field uses to win them back (issue 64).
Not part of the report: its numbers only choose what the DDP chapter then measures.

    python tools/ddp_probe.py PROFILE STAGE OUT_DIR [GPUS:VARIANT ...]

Each GPUS:VARIANT runs in fresh processes under torchrun on the first GPUS GPUs, every one training GPT-2's global
batch (evidence.global_batch_tokens) as micro-batches of B=64 with the accumulation steps shared among the ranks.
Variants:
  plain          no DDP (one GPU only): the recipe's step as the single-GPU chapters time it
  ddp            DDP around the compiled model, as lib/measure/ddp.py builds it (nanoGPT's order)
  ddp_bucket100  the same with 100 MB gradient buckets (DDP's default is 25)
  ddp_view       the same with gradient_as_bucket_view=True (gradients live in the buckets: no copy)
  ddp_static     the same with static_graph=True
  compiled_ddp   torch.compile around DDP: dynamo's DDPOptimizer splits the graph at bucket boundaries, so the
                 all-reduce of early buckets overlaps the rest of the backward
  zero1          ddp with the optimizer state sharded over the ranks (ZeroRedundancyOptimizer)
  ddp_nobcast    ddp with broadcast_buffers=False
  ddp_tuned      ddp with 100 MB buckets, gradient_as_bucket_view and broadcast_buffers=False
PROBE_MICRO_STEPS=K gives every rank K accumulation steps instead (1:plain at K=2 is one rank of four's work alone).
Each writes OUT_DIR/<gpus>-<variant>.json: the slowest rank's median step with and without the all-reduce
(no_sync), tokens/s, and the efficiency against 1:plain where it ran first."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MICRO_BATCH = int(os.environ.get("PROBE_MICRO_BATCH", 64))  # 64: the recipe's; another only to try the probe on a CPU
WARMUP, TIMED = 6, 16
VARIANTS = (
    "plain",
    "ddp",
    "ddp_bucket100",
    "ddp_view",
    "ddp_static",
    "compiled_ddp",
    "zero1",
    "ddp_nobcast",
    "ddp_tuned",
)
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def worker(profile: str, stage_key: str, variant: str, out: str) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from lib.core import config, data, stages
    from lib.train import step

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    params = config.load(profile, batch_sizes=[MICRO_BATCH])
    dev = step.device_type(params.backend)
    if dev == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if dev == "cuda" else "gloo")
    # PROBE_MICRO_STEPS: a rank's accumulation steps given (one GPU at B=64 x 2 is a rank of four without its peers)
    micro = int(os.environ.get("PROBE_MICRO_STEPS") or params.micro_steps(MICRO_BATCH) // world)
    stage = stages.get(stage_key)
    if variant == "plain":
        train = step.build(params, stage, dev, micro_steps=micro)
    elif variant == "compiled_ddp":
        # DDP first, then compile the wrapper: dynamo sees DDP and splits the graph at its buckets
        plain = dataclasses.replace(stage, compile=False)
        train = step.build(params, plain, dev, wrap=lambda m: torch.compile(DDP(m)), micro_steps=micro)
    else:
        opts = {"ddp_bucket100": {"bucket_cap_mb": 100}, "ddp_view": {"gradient_as_bucket_view": True}}
        opts["ddp_static"] = {"static_graph": True}
        opts["ddp_nobcast"] = {"broadcast_buffers": False}  # no buffer broadcast before each forward
        opts["ddp_tuned"] = {"bucket_cap_mb": 100, "gradient_as_bucket_view": True, "broadcast_buffers": False}
        train = step.build(params, stage, dev, wrap=lambda m: DDP(m, **opts.get(variant, {})), micro_steps=micro)
        if variant == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer

            groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in train.opt.param_groups]
            same = {k: train.opt.defaults[k] for k in ("lr", "betas", "eps", "fused")}
            zero = ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, **same)
            train = dataclasses.replace(train, opt=zero)
    per_rank = MICRO_BATCH * micro
    n = WARMUP + 2 * TIMED
    xs, ys = data.device_batches(params, per_rank, n, dev, skip=rank * per_rank * params.run.seq_len)
    t0 = time.perf_counter()
    for i in range(WARMUP):
        train(xs[i], ys[i])
    step.synchronize(dev)
    warm_s = time.perf_counter() - t0
    synced = step.time_steps(lambda i: train(xs[i], ys[i]), range(WARMUP, WARMUP + TIMED), dev)
    alone = step.time_steps(lambda i: train(xs[i], ys[i], sync=False), range(WARMUP + TIMED, n), dev)
    med = torch.tensor(
        [float(np.median(synced)), float(np.median(alone))],
        dtype=torch.float64,
        device=train.model.lm_head.weight.device,
    )
    every = [torch.zeros_like(med) for _ in range(world)]
    dist.all_gather(every, med)
    peak = torch.cuda.max_memory_allocated() if dev == "cuda" else 0
    train = None
    dist.destroy_process_group()
    if rank == 0:
        sync_ms = max(float(e[0]) for e in every)
        tokens = per_rank * params.run.seq_len * world
        rec = {
            "gpus": world,
            "variant": variant,
            "stage": stage_key,
            "micro_batch": MICRO_BATCH,
            "micro_steps": micro,
            "median_ms": sync_ms,
            "no_sync_ms": max(float(e[1]) for e in every),
            "per_rank_ms": [float(e[0]) for e in every],
            "tokens_per_s": tokens / sync_ms * 1e3,
            "warmup_s": warm_s,
            "peak_allocated_gib": peak / 2**30,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if dev == "cuda" else None,
            "torch": torch.__version__,
        }
        Path(out).write_text(json.dumps(rec, indent=1))


def main(argv: list[str]) -> int:
    if argv[:1] == ["worker"]:
        worker(*argv[1:5])
        return 0
    profile, stage_key, out_dir, *plan = argv
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True)
        (out / "topology.txt").write_text(topo.stdout + topo.stderr)
    except FileNotFoundError:
        pass
    base = None
    for item in plan:
        gpus, variant = item.split(":")
        if variant not in VARIANTS:
            raise SystemExit(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")
        path = out / f"{gpus}-{variant}.json"
        env = {**os.environ, **MULTICAST_OFF, "OMP_NUM_THREADS": "1"}
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in range(int(gpus)))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}", __file__]
        t0 = time.time()
        proc = subprocess.run(
            [*cmd, "worker", profile, stage_key, variant, str(path)], env=env, capture_output=True, text=True
        )
        if proc.returncode or not path.exists():
            (out / f"{gpus}-{variant}.err").write_text(proc.stdout[-4000:] + proc.stderr[-12000:])
            print(json.dumps({"gpus": gpus, "variant": variant, "failed": proc.returncode}), flush=True)
            continue
        rec = json.loads(path.read_text())
        if variant == "plain" and gpus == "1":
            base = rec["tokens_per_s"]
        rec["efficiency"] = rec["tokens_per_s"] / int(gpus) / base if base else None
        rec["wall_s"] = time.time() - t0
        path.write_text(json.dumps(rec, indent=1))
        keys = ("gpus", "variant", "median_ms", "no_sync_ms", "tokens_per_s", "efficiency", "wall_s")
        print(json.dumps({k: rec[k] for k in keys}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
