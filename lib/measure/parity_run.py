"""The parity test's run: a long loss run of one configuration (no timing), alone or as one run of a series
that restarts the first run's compiled model (lib/measure/series.py says which may). lib/results/parity.py
decides on the records; lib/run/parity_runs.py plans them; lib/measure/worker.py runs them in its children."""

from __future__ import annotations

import dataclasses
import math
import time

import torch

from lib.core import data, long_corpus, record, stages
from lib.core.params import Params
from lib.measure.series import restartable
from lib.results import stats, store
from lib.train import step
from lib.train.model import GPT


def is_oom(exc: BaseException) -> bool:
    """Whether a measurement failed for want of device memory (a result, not an error); the worker's too."""
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def parity_lr(step_index: int, steps: int, max_lr: float) -> float:
    """The parity run's learning rate, shaped as nanoGPT's get_lr: linear warm-up over the first
    quarter, then cosine decay to a tenth of the maximum at the last step."""
    warmup, min_lr = max(1, steps // 4), max_lr / 10
    if step_index < warmup:
        return max_lr * (step_index + 1) / warmup
    progress = (step_index - warmup) / max(1, steps - 1 - warmup)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (max_lr - min_lr)


def parity_run(job: dict, train: step.TrainStep | None = None) -> tuple[dict, step.TrainStep | None]:
    """A long loss run of one configuration (no timing): `steps` training steps with nanoGPT's
    learning-rate schedule (parity_lr), every loss kept, then the mean loss over
    `held_out_batches` batches of text it never trained on. `micro_steps` > 1 accumulates
    gradients over that many micro-batches (the same batch and the same update, in less memory)
    where the reference stage does not fit the batch at once. Given the `train` of an earlier run of
    the same configuration in this process (a parity series), it starts that one again from this
    run's seed (restart) instead of building and compiling anew. Returns the record and the step to
    hand on (None after an out-of-memory)."""
    params, batch, steps, seed_offset = job["params"], job["batch_size"], job["steps"], job.get("seed_offset", 0)
    stage = stages.get(job["stage"])
    dev = step.device_type(params.backend)
    rec = store.base_record(params, stage, batch)
    rec.update(
        kind="parity",
        fingerprint=job.get("fingerprint"),
        variant=job.get("variant"),
        steps=steps,
        micro_steps=job.get("micro_steps", 1),
        replicate=job.get("replicate", 0),
        seed_offset=seed_offset,
        seed=params.run.seed + seed_offset,
        data_start=job.get("data_start", 0),
        passes=job.get("passes"),
        device_index=job.get("device"),  # on a host of several GPUs, the one this seed ran on (one test for all)
    )
    t0 = time.perf_counter()
    try:
        # A seed is the initial weights and the data order: the lever and its reference share both.
        seeded = dataclasses.replace(params, run=dataclasses.replace(params.run, seed=rec["seed"]))
        if train is None or not restart(train, seeded, stage):
            train = step.build(seeded, stage, dev, micro_steps=job.get("micro_steps", 1))
        rec["init_checksum"] = train.model.init_checksum()
        corpus = job.get("corpus")  # None: the report's own text; "long": the long quality test's
        text = {"held_out": long_corpus.part(params, True), "train": long_corpus.part(params)} if corpus else {}
        xs, ys = data.device_batches(params, batch, steps, dev, start=rec["data_start"], tokens=text.get("train"))
        n_eval, eval_batch = job["held_out_batches"], min(batch, job.get("eval_batch", batch))
        vx, vy = data.device_batches(params, eval_batch, n_eval, dev, held_out=True, tokens=text.get("held_out"))
        del text
        # The long test prices a loss cost in steps on the reference's own held-out curve: evaluated at these steps.
        curve_at, curve = set(job.get("eval_points") or ()), []
        losses = []
        train.model.train()
        for i in range(steps):
            for group in train.opt.param_groups:  # set before each step, as nanoGPT's loop does
                group["lr"] = parity_lr(i, steps, params.run.learning_rate)
            losses.append(train(xs[i], ys[i]))
            if i + 1 in curve_at and i + 1 < steps:
                curve.append([i + 1, held_out_loss(train, vx, vy)])
                train.model.train()
        rec["losses"] = [float(v) for v in torch.stack(losses).float().cpu()]
        del xs, ys
        rec["held_out_loss"] = held_out_loss(train, vx, vy)
        rec["held_out_tokens"] = n_eval * eval_batch * params.run.seq_len
        if curve_at:
            rec["corpus"], rec["held_out_curve"] = corpus, [*curve, [steps, rec["held_out_loss"]]]
    except Exception as exc:
        if not is_oom(exc):
            raise
        rec.update(status=record.Status.OOM, reason=f"out of memory: {str(exc).splitlines()[0][:300]}")
        train = None
    stats.fill_loss(rec, params.run.final_loss_window)
    rec["wall_s"] = time.perf_counter() - t0
    return rec, train


def held_out_loss(train: step.TrainStep, vx, vy) -> float:
    """The mean loss over the held-out batches (text the run never trains on), the model in eval mode."""
    train.model.eval()
    with torch.no_grad(), train.autocast:
        held = [train.model(vx[i], vy[i])[1].float() for i in range(len(vx))]
    return float(torch.stack(held).mean().cpu())


def restart(train: step.TrainStep, params: Params, stage) -> bool:
    """Put `train` back where step.build(params, stage) starts: the weights of params.run.seed (made on
    the CPU from the seed, as build makes them, then copied into the model in place, so its compiled
    graph stays valid and nothing recompiles) and an optimizer with no state (every step ends with the
    gradients set to None). False, touching nothing, where the stage may not restart (series.restartable) or a
    conversion gave the model tensors a fresh one lacks: the caller builds afresh."""
    if not restartable(stage):
        return False
    torch.manual_seed(params.run.seed)
    fresh = GPT(step.model_config(params, stage))
    source = dict(fresh.named_parameters()) | dict(fresh.named_buffers())
    target = dict(train.model.named_parameters()) | dict(train.model.named_buffers())
    if source.keys() != target.keys() or any(source[k].shape != t.shape for k, t in target.items()):
        return False
    with torch.no_grad():
        for name, t in target.items():
            t.copy_(source[name])
    train.opt.state.clear()
    return True
