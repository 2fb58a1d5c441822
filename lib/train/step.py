"""The one training step every measurement runs: the stage matrix, the batch sweep, the evidence
sweeps and every DDP rank. A stage's switches are applied here and nowhere else, in the form and
order of nanoGPT's train.py: matmul precision, model, optimizer, torch.compile, then the DDP
wrap, and a step of autocast forward, backward, gradient clipping, optimizer step, zero_grad.
Also the one device synchronize and the one step timer of the project."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch

from lib.core.params import Params
from lib.train import fp8
from lib.train.model import GPT, GPTConfig


def device_type(backend: str) -> str:
    """The torch device type of a profile's backend (ROCm builds of PyTorch call it cuda)."""
    return {"rocm": "cuda"}.get(backend, backend)


def synchronize(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()
    elif dev == "mps":
        torch.mps.synchronize()


def model_config(params: Params, stage) -> GPTConfig:
    m = params.model
    return GPTConfig(
        n_layer=m.n_layer,
        n_head=m.n_head,
        n_embd=m.n_embd,
        block_size=m.block_size,
        real_vocab_size=m.vocab_size,
        vocab_size=m.padded_vocab_size if stage.padded_vocab else m.vocab_size,
        attention=stage.attention,
        loss=stage.loss,
        residual_dtype=stage.residual_dtype,
    )


@dataclass
class TrainStep:
    """A model with its optimizer and the stage's switches; calling it runs one training step
    on (x, y) and returns the loss, detached (never read back: no synchronisation)."""

    model: GPT  # the plain module (weights, config, parameter count)
    forward: torch.nn.Module  # what the step calls: the model, compiled and/or DDP-wrapped
    opt: torch.optim.Optimizer
    autocast: contextlib.AbstractContextManager
    grad_clip: float
    micro_steps: int = 1  # gradient accumulation: x is split into this many micro-batches
    return_logits: bool = True  # False: the forward returns the loss alone (llm.c's return_logits=False)

    def __call__(self, x, y, sync: bool = True):
        """`sync=False` (DDP only) skips the gradient all-reduce, to measure what it costs."""
        losses = []
        chunks = zip(x.chunk(self.micro_steps), y.chunk(self.micro_steps)) if self.micro_steps > 1 else [(x, y)]
        for i, (xm, ym) in enumerate(chunks):
            # As nanoGPT: only the last micro-batch's backward all-reduces the gradients.
            last = i == self.micro_steps - 1
            no_sync = getattr(self.forward, "no_sync", None)
            with no_sync() if no_sync and not (sync and last) else contextlib.nullcontext():
                with self.autocast:
                    _, loss = self.forward(xm, ym, **({} if self.return_logits else {"return_logits": False}))
                if self.micro_steps > 1:
                    loss = loss / self.micro_steps
                loss.backward()
            losses.append(loss.detach())
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return losses[0] if len(losses) == 1 else torch.stack(losses).sum()


def build(params: Params, stage, dev: str, wrap=None, micro_steps: int = 1, wrap_options: tuple = ()) -> TrainStep:
    """The training step of `stage` on device type `dev`. The model is constructed from the
    seed on the CPU (identical weights on every device), then the stage's switches apply.
    `wrap` (DDP) wraps the compiled model, as nanoGPT does, with the keyword arguments `wrap_options`
    ((name, value) pairs: the DDP stage's ddp_options)."""
    torch.set_float32_matmul_precision("high" if stage.tf32 else "highest")
    for path, value in stage.backend_flags:  # e.g. ("torch.backends.cudnn.benchmark", True)
        owner, _, name = path.rpartition(".")
        setattr(_resolve(owner), name, value)
    torch.manual_seed(params.run.seed)
    model = GPT(model_config(params, stage)).to(dev)
    if stage.fp8:
        fp8.convert_linears(model.transformer.h)
    if stage.float8 or stage.fp8_lm_head:  # torchao's float8 training, as torchtitan applies it (before compile)
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        if stage.float8:  # the blocks' Linear layers
            convert_to_float8_training(model.transformer.h, config=Float8LinearConfig.from_recipe_name(stage.float8))
        if stage.fp8_lm_head:  # the lm_head alone (its weight stays tied to the embedding)
            convert_to_float8_training(
                model,
                config=Float8LinearConfig.from_recipe_name(stage.fp8_lm_head),
                module_filter_fn=lambda module, fqn: fqn == "lm_head",
            )
    r = params.run
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": r.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=r.learning_rate,
        betas=(0.9, 0.95),
        eps=1e-8,
        **({"fused": True} if stage.fused_adamw else {}),
    )
    forward = (
        torch.compile(model, **({"mode": stage.compile_mode} if stage.compile_mode else {})) if stage.compile else model
    )
    if wrap is not None:
        forward = wrap(forward, **dict(wrap_options))
    return TrainStep(
        model,
        forward,
        opt,
        StepContext(dev, stage.autocast, stage.sdpa_backend),
        r.grad_clip,
        micro_steps,
        stage.return_logits,
    )


class StepContext:
    """What the forward runs under: autocast to the stage's dtype and, where the stage forces one,
    an SDPA backend (torch.nn.attention.sdpa_kernel). Entered afresh for every micro-batch."""

    def __init__(self, dev: str, autocast: str | None, sdpa_backend: str | None):
        self.dev, self.autocast, self.sdpa_backend = dev, autocast, sdpa_backend
        self._stacks: list[contextlib.ExitStack] = []

    def __enter__(self):
        stack = contextlib.ExitStack()
        if self.autocast:
            stack.enter_context(torch.autocast(device_type=self.dev, dtype=getattr(torch, self.autocast)))
        if self.sdpa_backend:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[self.sdpa_backend])))
        self._stacks.append(stack)
        return self

    def __exit__(self, *exc):
        return self._stacks.pop().__exit__(*exc)


# A stage's sdpa_backend name -> the member of torch.nn.attention.SDPBackend it forces.
SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}


def _resolve(dotted: str):
    """The object a dotted name under torch names (a stage's backend flag lives on it)."""
    if dotted != "torch" and not dotted.startswith("torch."):
        raise ValueError(f"a backend flag must live under torch, not {dotted!r}")
    obj = torch
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


class Timer:
    """Milliseconds of regions of device work: CUDA events on NVIDIA/AMD GPUs, read after one
    synchronize at the end (timing never stalls the queue; the host runs ahead as in real
    training), perf_counter around a synchronize elsewhere."""

    def __init__(self, dev: str):
        self.dev = dev
        self._pending: list = []

    def start(self):
        if self.dev == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        synchronize(self.dev)
        return time.perf_counter()

    def stop(self, token) -> None:
        if self.dev == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._pending.append((token, ev))
        else:
            synchronize(self.dev)
            self._pending.append((time.perf_counter() - token) * 1e3)

    def results_ms(self) -> list[float]:
        if self.dev == "cuda":
            torch.cuda.synchronize()
            return [float(s.elapsed_time(e)) for s, e in self._pending]
        return [float(v) for v in self._pending]


def time_steps(run_one, indices, dev: str) -> list[float]:
    """Milliseconds of each call run_one(i), i in `indices`."""
    timer = Timer(dev)
    for i in indices:
        token = timer.start()
        run_one(i)
        timer.stop(token)
    return timer.results_ms()
