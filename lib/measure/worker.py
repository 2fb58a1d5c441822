"""*How* one (stage, batch size) configuration is timed. Each configuration runs in a fresh
process (forked by `python -m lib.measure.worker`, which runner.py launches and feeds batches of jobs) so memory
peaks, allocator state, cuBLAS workspaces and compile caches never leak between configurations.

Method: build the model from the seed, move every batch to the device up front, run
`warmup_steps` untimed training steps, then `timed_steps` timed ones (CUDA events on GPUs,
perf_counter after a synchronize elsewhere). Every step's loss is kept for the parity check."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

import torch

from lib.core import data, record, stages
from lib.core.params import Params
from lib.measure import (
    clocks,
    compile_cache,
    energy,
    environment,
    faults,
    gemm_sweep,
    kernel_profile,
    preload,
    protocol,
)
from lib.measure.parity_run import is_oom, parity_run
from lib.measure.series import series_groups
from lib.results import stats, store
from lib.train import plain_loop, step
from lib.train.model import flops_per_token

SDPA_OPS = {  # profiler op name -> which SDPA backend ran
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU kernel)",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math (unfused)",
    "aten::_scaled_dot_product_fused_attention_overrideable": "fused (backend-specific)",
}


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
        return {
            "mem_tensors_bytes": torch.cuda.max_memory_allocated(),
            "mem_allocator_bytes": torch.cuda.max_memory_reserved(),
            "mem_device_bytes": total - free,
            "mem_device_note": "device memory in use (total - free), as nvidia-smi counts it",
        }
    if dev == "mps":
        return {
            "mem_tensors_bytes": torch.mps.current_allocated_memory(),
            "mem_allocator_bytes": torch.mps.driver_allocated_memory(),
            "mem_device_bytes": None,
            "mem_device_note": "MPS exposes no device-level peak",
        }
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {
        "mem_tensors_bytes": None,
        "mem_allocator_bytes": None,
        "mem_device_bytes": peak_rss,
        "mem_device_note": "CPU: peak resident set size of the process",
    }


NOT_SAMPLED = {energy.PEAK_KEY: None, energy.NOTE_KEY: "not sampled: the configuration failed before its first step"}


def no_sdpa_kernel(exc: BaseException) -> bool:
    """SDPA's refusal when the only backend allowed cannot run (the message names no kernel)."""
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in ("No viable backend", "No available kernel"))


def run(job: dict) -> dict:
    params, batch = job["params"], job["batch_size"]
    stage = stages.get(job["stage"])
    if job.get("stage_overrides"):  # an evidence variant, e.g. the compile stage at vocab 50257
        stage = dataclasses.replace(stage, **job["stage_overrides"])
    r = params.run
    dev = step.device_type(params.backend)
    rec = store.base_record(params, stage, batch)
    rec.update(
        fingerprint=job.get("fingerprint"),
        variant=job.get("variant"),
        repeat=job.get("repeat", 0),
        stage_overrides=job.get("stage_overrides"),
    )  # the switches it changed, beside the stage it names
    fault = faults.get(stage.key, batch)
    n_steps = r.warmup_steps + r.timed_steps
    micro = job.get("micro_steps", 1)  # gradient accumulation: each step takes micro x batch sequences
    if micro > 1:
        rec["micro_steps"] = micro
    t_start = time.perf_counter()
    sampler = clock = None
    phases = Phases()  # where the process's time went beside the timed steps: the harness's own cost, measured
    rec["phases_s"] = phases.seconds
    try:
        train = step.build(params, stage, dev, micro_steps=micro)
        rec["init_checksum"] = train.model.init_checksum()
        faults.inject(fault, "build")
        xs, ys = data.device_batches(params, batch * micro, n_steps, dev)
        phases.mark("build")
        losses = []

        def one(i: int):
            losses.append(train(xs[i], ys[i]))

        # The device memory peak during the warm-up steps (a host thread reading NVML, nothing on the
        # device): the same work as the timed steps, library workspaces made in the first, and no
        # thread beside the timed steps to compete with the one that launches their kernels.
        sampler = energy.MemorySampler(
            dev,
            torch.cuda.current_device() if dev == "cuda" else 0,
            span="the warm-up steps (the first included; untimed, so the sampler cannot touch the timings)",
        )
        sampler.start()
        # The first step pays for compilation (and cuBLAS/allocator warm-up): reported, never timed.
        t0 = time.perf_counter()
        one(0)
        step.synchronize(dev)
        rec["first_step_s"] = time.perf_counter() - t0
        phases.mark("first_step")
        for i in range(1, r.warmup_steps):
            one(i)
        if fault == "nan":  # poison a weight between steps, never inside the timed one
            with torch.no_grad():
                train.model.transformer.ln_f.weight.fill_(float("nan"))
        step.synchronize(dev)
        rec.update(sampler.stop())
        phases.mark("warmup")
        meter = (
            energy.EnergyMeter(dev, torch.cuda.current_device() if dev == "cuda" else 0)
            if job.get("energy", True)
            else None
        )
        clock = (
            clocks.ClockSampler(dev, torch.cuda.current_device() if dev == "cuda" else 0)
            if job.get("clocks", True)
            else None
        )
        if meter:
            meter.start()
        if clock:
            clock.start()
        if job.get("gc_freeze"):  # tools/harness_probe.py: does a collection inside the timed steps cost them?
            gc.collect()
            gc.freeze()
        times_ms = step.time_steps(one, range(r.warmup_steps, n_steps), dev)  # ends synchronised
        phases.mark("timed")
        rec["clocks"] = (
            {**clock.stop(), "span": "the timed steps"}
            if clock
            else {"unavailable": "not sampled: the job asked for no sampler thread (tools/harness_probe.py)"}
        )
        clock = None
        if meter:
            used = meter.stop()
            rec["energy"] = used if used else {"unavailable": meter.reason}
        rec.update(memory(dev))
        rec["losses"] = [float(v) for v in torch.stack(losses).float().cpu()]
        phases.mark("readback")
        if stage.attention == "sdpa" and job.get("sdpa_probe", True):
            # eager (no recompile), on one micro-batch: the eager logits of a whole accumulated batch would not fit.
            # Not where no view reads it (a repeat, a sweep point, the recipe, the ablation): 0.2-0.6 s a process.
            rec["sdpa_backend"] = sdpa_backend(train.model, xs[0][:batch], ys[0][:batch], train.autocast)
            phases.mark("sdpa_probe")
        if job.get("profile", True):
            rec["kernel_profile"] = kernel_profile.profile_steps(lambda: train(xs[0], ys[0]), dev)
            phases.mark("kernel_profile")
        n_params = train.model.num_params()
    except Exception as exc:  # OOM is a result; anything else is recorded as an error
        # stops the thread whatever follows; an OOM keeps the peak up to it
        rec.update(sampler.stop() if sampler else NOT_SAMPLED)
        if clock is not None:
            rec["clocks"] = {**clock.stop(), "span": "the timed steps, up to the failure"}
        if stage.sdpa_backend and no_sdpa_kernel(exc):  # a forced backend this device does not have
            rec.update(
                status=record.Status.NOT_APPLICABLE,
                wall_s=time.perf_counter() - t_start,
                reason=f"no {stage.sdpa_backend} SDPA kernel for this device and shape: "
                f"{str(exc).splitlines()[0][:200]}",
            )
            return rec
        if not is_oom(exc):
            raise
        rec.update(status=record.Status.OOM, reason=f"out of memory: {str(exc).splitlines()[0][:300]}")
        rec.update(memory(dev))
        rec["wall_s"] = time.perf_counter() - t_start
        return rec
    stats.fill_timing(rec, times_ms, batch * micro * r.seq_len)
    fpt = flops_per_token(train.model.config, n_params, r.seq_len)
    stats.fill_mfu(rec, fpt, params.peak_tflops, stage.peak)
    stats.fill_loss(rec, r.final_loss_window)
    if rec.get("energy", {}).get("energy_j"):
        rec["energy"]["joules_per_token"] = rec["energy"]["energy_j"] / (r.timed_steps * rec["tokens_per_step"])
    rec["n_params"] = n_params
    rec["wall_s"] = time.perf_counter() - t_start
    rec["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    return rec


class Phases:
    """Seconds between marks, by the name of the part that just ended: {build, first_step, warmup,
    timed, ...}. What a process spends beside its timed steps is what a re-measurement costs."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self._last, 3)
        self._last = now


def gemm_record(job: dict) -> dict:
    """The lm_head GEMM sweep (lib/measure/gemm_sweep.py) as a result record."""
    t0 = time.perf_counter()
    rec = {
        "schema_version": record.SCHEMA_VERSION,
        "kind": "gemm",
        "status": record.Status.OK,
        "reason": None,
        "stage": job["stage"],
        "batch_size": job["batch_size"],
        "fingerprint": job.get("fingerprint"),
        "variant": job.get("variant"),
    }
    rec.update(gemm_sweep.run(**job["spec"]))
    rec["wall_s"] = time.perf_counter() - t0
    return rec


def _measure(job: dict, series: dict) -> dict:
    """One job's record. `series` carries a parity series' training step from one run to the next."""
    kind = job.get("kind")
    if kind is None:
        return run(job)  # samples the clocks over its own timed steps
    # The other kinds sample them over the whole run: the plain loop stays the canonical trainer,
    # with nothing added beside its steps.
    dev = step.device_type(job["params"].backend)
    sampler = clocks.ClockSampler(dev, 0)
    sampler.start()
    if kind == "gemm":
        rec = gemm_record(job)
    elif kind == "parity":
        rec, series["train"] = parity_run(job, series.get("train"))
    else:
        rec = plain_loop.run(job)
        rec.update(
            schema_version=record.SCHEMA_VERSION,
            fingerprint=job.get("fingerprint"),
            variant=job.get("variant"),
            repeat=job.get("repeat", 0),
        )
    step.synchronize(dev)
    rec["clocks"] = {**sampler.stop(), "span": "the whole measuring process (warm-up included)"}
    return rec


def _child(jobs: list[dict]) -> int:
    """Measure `jobs` in this process, in order, each record written as it is done: one job, or the runs
    of a parity series, which share one compilation (parity_run's restart). A failure leaves the
    records already written; the launcher reports the rest as failed."""
    from torch._dynamo.utils import counters  # what this process compiled, and from where

    series: dict = {}
    first = Path(jobs[0]["out"]).name
    try:
        for i, job in enumerate(jobs):
            rec = _measure(job, series)
            cache = compile_cache.outcome(counters, job.get("cold_compile"))
            if job.get("series") is not None:
                rec["series"] = {"index": i, "runs": len(jobs), "first": first}
                if i and cache["state"] != "not compiled":
                    cache = {
                        **cache,
                        "state": "reused",
                        "note": f"the graph compiled for {first}, earlier in this process",
                    }
            rec.update(provenance=environment.own_gpu_stamp(job), compile_cache=cache)
            store.write_record(job["out"], rec)
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
    """Measure each job in its own forked child (consecutive jobs of one parity series share one). This
    launcher has imported PyTorch (the slow part of starting a process) but never touched a device, so
    every child starts with a pristine device, allocator and cuBLAS state, exactly as a new interpreter
    would. Jobs that name a `device` (a parity round spread over a host's GPUs) run in one lane per device, the
    lanes at once, each child seeing its own GPU alone; the rest run one after another."""
    lanes: dict = {}
    for group in series_groups(jobs):
        lanes.setdefault(group[0].get("device"), []).append(group)
    if None in lanes and len(lanes) > 1:  # jobs without a device never share the host with a lane
        lanes = {None: [g for lane in lanes.values() for g in lane]}
    running: dict = {}
    while running or any(lanes.values()):
        for lane, groups in lanes.items():
            if lane not in running and groups:
                group = groups.pop(0)
                limit = timeout_s * len(group)
                running[lane] = (_start(group, lane), group, time.monotonic() + limit, limit)
        for lane, (pid, group, deadline, limit) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done and time.monotonic() <= deadline:
                continue
            if not done:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = None
            del running[lane]
            if status is None:
                verdict = f"timed out after {limit:.0f} s"
            elif os.WIFSIGNALED(status):
                verdict = f"killed by signal {os.WTERMSIG(status)}"
            else:
                verdict = f"exit {os.WEXITSTATUS(status)}"
            for job in group:
                print(protocol.DONE_PREFIX + json.dumps({"out": job["out"], "verdict": verdict}), flush=True)
        time.sleep(0.05)


def _start(group: list[dict], device: int | None) -> int:
    """Fork the child that measures `group`, on GPU `device` alone where one is named; its pid."""
    pid = os.fork()
    if pid == 0:
        die_with_parent()
        os.dup2(2, 1)  # anything the measured code prints must not reach the launcher's channel
        if device is not None and group[0]["params"].backend == "cuda":  # before this child first touches CUDA
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
            os.environ["CUDA_VISIBLE_DEVICES"] = (
                visible[device] if len(visible) > device and visible[0] else str(device)
            )
        code = 1
        try:
            code = _child(group)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


if __name__ == "__main__":
    die_with_parent()
    preload.preload()

    for line in sys.stdin:  # one batch of jobs per line: the path of its spec file (runner.measure_jobs)
        spec = json.loads(open(line.strip()).read())
        os.environ[faults.VAR] = spec.get("faults", "")
        jobs = [{**job, "params": Params.from_dict(job["params"], lenient=True)} for job in spec["jobs"]]
        preload.preload(jobs[0]["params"].backend if jobs else None)
        serve(jobs, spec.get("timeout_s", 1800))
        print(protocol.BATCH_DONE, flush=True)
