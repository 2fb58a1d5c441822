"""*How* one (stage, batch size) configuration is timed. Each configuration runs in a fresh
process (forked by `python -m lib.measure jobs.json`, which runner.py launches) so memory
peaks, allocator state, cuBLAS workspaces and compile caches never leak between configurations.

Method: build the model from the seed, move every batch to the device up front, run
`warmup_steps` untimed training steps, then `timed_steps` timed ones (CUDA events on GPUs,
perf_counter after a synchronize elsewhere). Every step's loss is kept for the parity check."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import signal
import sys
import time

import numpy as np
import torch

from . import data, energy, faults, fp8, kernel_profile, results, stages
from .model import GPT, GPTConfig, flops_per_token

SDPA_OPS = {  # profiler op name -> which SDPA backend ran
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU kernel)",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math (unfused)",
    "aten::_scaled_dot_product_fused_attention_overrideable": "fused (backend-specific)",
}


def device_type(backend: str) -> str:
    return {"rocm": "cuda"}.get(backend, backend)


def synchronize(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()
    elif dev == "mps":
        torch.mps.synchronize()


def build(params: dict, stage: stages.Stage, dev: str):
    """(model, what the training step calls, optimizer) for `stage`. The model is constructed
    identically for every stage; only the switches after construction differ."""
    m = params["model"]
    torch.manual_seed(params["run"]["seed"])
    cfg = GPTConfig(n_layer=m["n_layer"], n_head=m["n_head"], n_embd=m["n_embd"],
                    block_size=m["block_size"], real_vocab_size=m["vocab_size"],
                    vocab_size=m["padded_vocab_size"] if stage.padded_vocab else m["vocab_size"],
                    attention=stage.attention)
    model = GPT(cfg).to(dev)  # initialised on the CPU: identical weights on every device
    if stage.fp8:
        fp8.convert_linears(model.transformer.h)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    r = params["run"]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": r["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=r["learning_rate"], betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if stage.fused_adamw else {}))
    forward = torch.compile(model) if stage.compile else model
    return model, forward, opt


def batch_dynamic(*tensors):
    """Mark the batch dimension dynamic for torch.compile: one compiled graph then serves every
    batch size, and later processes (other batch sizes, the batch sweep, the DDP ranks) load it
    from inductor's on-disk cache instead of compiling again. Sequence length stays static."""
    for t in tensors:
        torch._dynamo.maybe_mark_dynamic(t, 0)
    return tensors


def sdpa_backend(model, x, y, ctx) -> str | None:
    """Which SDPA kernel family ran, read off the dispatched op names of one forward."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.no_grad(), ctx:
        model(x, y)
    names = {e.key for e in prof.key_averages()}
    found = [label for op, label in SDPA_OPS.items() if op in names]
    return ", ".join(found) or "unknown"


def memory(dev: str) -> dict:
    if dev == "cuda":
        free, total = torch.cuda.mem_get_info()
        return {"mem_tensors_bytes": torch.cuda.max_memory_allocated(),
                "mem_allocator_bytes": torch.cuda.max_memory_reserved(),
                "mem_device_bytes": total - free,
                "mem_device_note": "device memory in use (total - free), as nvidia-smi counts it"}
    if dev == "mps":
        return {"mem_tensors_bytes": torch.mps.current_allocated_memory(),
                "mem_allocator_bytes": torch.mps.driver_allocated_memory(),
                "mem_device_bytes": None, "mem_device_note": "MPS exposes no device-level peak"}
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {"mem_tensors_bytes": None, "mem_allocator_bytes": None, "mem_device_bytes": peak_rss,
            "mem_device_note": "CPU: peak resident set size of the process"}


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def run(job: dict) -> dict:
    params, batch = job["params"], job["batch_size"]
    stage = stages.get(job["stage"])
    if job.get("stage_overrides"):  # an evidence variant, e.g. the compile stage at vocab 50257
        stage = dataclasses.replace(stage, **job["stage_overrides"])
    r = params["run"]
    dev = device_type(params["backend"])
    rec = results.base_record(params, stage, batch)
    rec.update(fingerprint=job.get("fingerprint"), variant=job.get("variant"))
    fault = faults.get(stage.key, batch)
    torch.set_float32_matmul_precision("high" if stage.tf32 else "highest")
    ctx = (torch.autocast(device_type=dev, dtype=getattr(torch, stage.autocast))
           if stage.autocast else contextlib.nullcontext())
    n_steps = r["warmup_steps"] + r["timed_steps"]
    t_start = time.perf_counter()
    try:
        model, forward, opt = build(params, stage, dev)
        rec["init_checksum"] = model.init_checksum()
        faults.inject(fault, "build")
        tokens = data.load_tokens(params["model"]["vocab_size"])
        xs, ys = zip(*data.batches(tokens, batch, r["seq_len"], n_steps))
        xs = torch.from_numpy(np.stack(xs)).to(dev)
        ys = torch.from_numpy(np.stack(ys)).to(dev)
        losses = []

        def step(i: int, keep: bool = True):
            x, y = batch_dynamic(xs[i], ys[i]) if stage.compile else (xs[i], ys[i])
            with ctx:
                _, loss = forward(x, y)
            if fault == "nan" and i == n_steps // 2:
                loss = loss * float("nan")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), r["grad_clip"])
            opt.step()
            opt.zero_grad(set_to_none=True)
            if keep:
                losses.append(loss.detach())

        # The first step pays for compilation (and cuBLAS/allocator warm-up): reported, never timed.
        t0 = time.perf_counter()
        step(0)
        synchronize(dev)
        rec["first_step_s"] = time.perf_counter() - t0
        for i in range(1, r["warmup_steps"]):
            step(i)
        synchronize(dev)
        meter = energy.EnergyMeter(dev, torch.cuda.current_device() if dev == "cuda" else 0) \
            if job.get("energy", True) else None
        if meter:
            meter.start()
        times_ms = time_steps(step, range(r["warmup_steps"], n_steps), dev)
        if meter:
            used = meter.stop()
            rec["energy"] = used if used else {"unavailable": meter.reason}
        rec.update(memory(dev))
        rec["losses"] = [float(v) for v in torch.stack(losses).float().cpu()]
        if stage.attention == "sdpa":
            rec["sdpa_backend"] = sdpa_backend(model, xs[0], ys[0], ctx)
        if job.get("profile", True):
            rec["kernel_profile"] = kernel_profile.profile_steps(lambda: step(0, keep=False), dev)
        n_params = model.num_params()
    except Exception as exc:  # OOM is a result; anything else is recorded as an error
        if not is_oom(exc):
            raise
        rec.update(status="oom", reason=f"out of memory: {str(exc).splitlines()[0][:300]}")
        rec.update(memory(dev))
        rec["wall_s"] = time.perf_counter() - t_start
        return rec
    results.fill_timing(rec, times_ms, batch * r["seq_len"])
    fpt = flops_per_token(model.config, n_params, r["seq_len"])
    results.fill_mfu(rec, fpt, params.get("peak_tflops"), stage.peak)
    results.fill_loss(rec, r["final_loss_window"])
    if rec.get("energy", {}).get("energy_j"):
        rec["energy"]["joules_per_token"] = rec["energy"]["energy_j"] / (r["timed_steps"] * rec["tokens_per_step"])
    rec["n_params"] = n_params
    rec["wall_s"] = time.perf_counter() - t_start
    rec["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    return rec


def time_steps(step, indices, dev: str) -> list[float]:
    """Milliseconds per call of step(i): CUDA events on NVIDIA/AMD GPUs (no host sync inside
    the loop, so the host runs ahead as in real training), perf_counter around a sync elsewhere."""
    out = []
    for i in indices:
        if dev == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(i)
            end.record()
            out.append((start, end))
        else:
            synchronize(dev)
            t0 = time.perf_counter()
            step(i)
            synchronize(dev)
            out.append((time.perf_counter() - t0) * 1e3)
    synchronize(dev)
    return [s.elapsed_time(e) for s, e in out] if dev == "cuda" else out


def gemm_record(job: dict) -> dict:
    """The lm_head GEMM sweep (lib/gemm_sweep.py) as a result record."""
    from . import gemm_sweep  # imported here: it imports this module's synchronize

    t0 = time.perf_counter()
    rec = {"schema_version": results.SCHEMA_VERSION, "kind": "gemm", "status": "ok", "reason": None,
           "stage": job["stage"], "batch_size": job["batch_size"], "fingerprint": job.get("fingerprint"),
           "variant": job.get("variant")}
    rec.update(gemm_sweep.run(**job["spec"]))
    rec["wall_s"] = time.perf_counter() - t0
    return rec


def _child(job: dict, out_path: str) -> int:
    try:
        results.write_atomic(out_path, gemm_record(job) if job.get("kind") == "gemm" else run(job))
        return 0
    except BaseException:
        import traceback
        traceback.print_exc()
        return 1


def die_with_parent() -> None:
    """Linux: be killed when the parent dies, so a killed `make report` leaves no measurement
    running on the device (the chain is CLI -> kernel -> launcher -> child)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def serve(jobs: list[dict], timeout_s: float) -> None:
    """Measure each job in its own forked child. This launcher has imported PyTorch (the slow
    part of starting a process) but never touched a device, so every child starts with a
    pristine device, allocator and cuBLAS state, exactly as a new interpreter would."""
    for job in jobs:
        pid = os.fork()
        if pid == 0:
            die_with_parent()
            os.dup2(2, 1)  # anything the measured code prints must not reach the launcher's channel
            code = 1
            try:
                code = _child(job, job["out"])
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        deadline = time.monotonic() + timeout_s
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = None
                break
            time.sleep(0.05)
        if status is None:
            verdict = f"timed out after {timeout_s:.0f} s"
        elif os.WIFSIGNALED(status):
            verdict = f"killed by signal {os.WTERMSIG(status)}"
        else:
            verdict = f"exit {os.WEXITSTATUS(status)}"
        print(results.DONE_PREFIX + json.dumps({"out": job["out"], "verdict": verdict}), flush=True)
        if job.get("stop_if_oom") and _status(job["out"]) == "oom":
            break  # a batch-size sweep ends at the memory limit: larger batches cannot fit either


def _status(path: str) -> str | None:
    try:
        return json.loads(open(path).read()).get("status")
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    die_with_parent()
    # The optimizer's first construction imports torch._dynamo (about 2 s on a small CPU); doing
    # it once here, before any fork and without touching a device, spares every child that cost.
    import torch._dynamo  # noqa: F401
    spec = json.loads(open(sys.argv[1]).read())
    serve(spec["jobs"], spec.get("timeout_s", 1800))
