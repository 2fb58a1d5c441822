"""A probe for the frontier-kernels issue (32) and the cost of a warm FP8 process (29), run by hand on a GPU: the
H100's recommended configuration (the fp8_head stage, built by lib/train/step.py) and candidate levers on top of it,
each in a fresh process. Per candidate: the first step (compile, cold or warm), the median of the timed steps, tokens/s,
the allocator peak, the first steps' losses (the same seed and data in every candidate, so a lever that changes the
math shows there) and torch's compile-cache counters. Its numbers choose what becomes a stage; they are not a report.

    python tools/probe_frontier.py [B=128] [names...] > frontier.jsonl   # each candidate in a fresh process

Candidates (`CANDIDATES`): the stage as it is; a graph break between the blocks and the lm_head (so the blocks' graph
can enter AOTAutograd's cache, which torchao's float8 graph bypasses); CUDA graphs (torch.compile's reduce-overhead);
the step's tail (gradient clipping and AdamW) compiled; Liger-Kernel's one-pass cross-entropy on the FP8 head's logits;
GEMM autotuning with epilogue fusion (max-autotune without CUDA graphs); the FP8 classifier's stage (its first runs
patched a copy of the forward to call lib/train/fp8_classifier.py; since it is the stage `fp8_classifier`, the probe
builds that, the same computation). `--check`: its kernel against its PyTorch reference and its gradients against
torchao's and fp32's."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CANDIDATES = {  # name: options
    "stage": {},
    "stage_again": {},  # a second process: the warm first step
    "split": {"split": True},
    "split_again": {"split": True},
    "graphs": {"mode": "reduce-overhead"},
    "tail": {"tail": True},
    "liger": {"liger": True},
    "split_tail_liger": {"split": True, "tail": True, "liger": True},
    "graphs_tail_liger": {"mode": "reduce-overhead", "tail": True, "liger": True},
    "autotune": {"mode": "max-autotune-no-cudagraphs"},
    "classifier": {"stage": "fp8_classifier"},  # lib/train/fp8_classifier.py in place of torchao's FP8 lm_head
    "classifier_again": {"stage": "fp8_classifier"},
    # Ceilings, not levers: a step with a part of its work taken out times what no fusion of that part can beat.
    # no_gelu: the MLP's GELU is the identity (what fusing GELU into the GEMMs' epilogues could save at most);
    # no_ce: the loss reads one column of the logits (what any fused classifier could save at most: the lm_head
    # GEMMs and the write of the logits' gradient stay). Their losses are not GPT-2's: timings only.
    "loss_only": {"stage": "loss_only"},
    "loss_only_no_gelu": {"stage": "loss_only", "no_gelu": True},
    "loss_only_no_ce": {"stage": "loss_only", "no_ce": True},
    "loss_only_no_gelu_no_ce": {"stage": "loss_only", "no_gelu": True, "no_ce": True},
    "classifier_no_gelu": {"stage": "fp8_classifier", "no_gelu": True},
    # Liger-Kernel's fused linear cross-entropy (chunked lm_head GEMM and loss; no B x T x V logits tensor)
    "liger_flce": {"stage": "loss_only", "flce": True},
}


def patched_forward(split: bool, liger: bool, no_ce: bool = False, flce: bool = False):
    """GPT.forward's loss-only path (lib/train/model.py) with a graph break after the final LayerNorm, and/or
    Liger's cross-entropy in place of F.cross_entropy, or (no_ce, a ceiling) a loss that reads one column."""
    import torch
    import torch.nn.functional as F

    if liger:
        from liger_kernel.transformers.functional import liger_cross_entropy
    if flce:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    def forward(self, idx, targets=None, return_logits=True):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        if self.config.residual_dtype:
            x = x.to(getattr(torch, self.config.residual_dtype))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if split:
            torch._dynamo.graph_break()
        if flce:  # the operands in the autocast dtype, as the lm_head GEMM would see them
            w = self.lm_head.weight.to(torch.bfloat16)
            return None, liger_fused_linear_cross_entropy(x.to(torch.bfloat16).flatten(0, 1), w, targets.view(-1))
        logits = self.lm_head(x)
        if no_ce:
            return None, logits[..., 0].float().mean()
        flat = logits.view(-1, logits.size(-1))
        loss = liger_cross_entropy(flat, targets.view(-1)) if liger else F.cross_entropy(flat, targets.view(-1))
        return None, loss

    return forward


def run_one(name: str, batch: int, warmup: int = 5, timed: int = 20) -> dict:
    import torch
    from torch._dynamo.utils import counters

    from lib.core import config, data, stages
    from lib.train import step
    from lib.train.model import GPT

    o = CANDIDATES[name]
    params = config.load("h100")
    stage = stages.get(o.get("stage", "fp8_head"))  # the recommendation's stage, or the candidate's own
    if "mode" in o:
        stage = dataclasses.replace(stage, compile_mode=o["mode"])
    if o.get("split") or o.get("liger") or o.get("no_ce") or o.get("flce"):
        GPT.forward = patched_forward(*(o.get(k, False) for k in ("split", "liger", "no_ce", "flce")))
    out = {"name": name, "batch": batch, "options": o}
    t0 = time.perf_counter()
    train = step.build(params, stage, "cuda")
    model = train.model
    if o.get("no_gelu"):  # before the first step, so torch.compile traces the MLPs without it
        for block in model.transformer.h:
            block.mlp.gelu = torch.nn.Identity()
    if o.get("tail"):  # clipping and AdamW compiled (foreach, which Inductor fuses), as one graph
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
            lr=params.run.learning_rate,
            betas=(0.9, 0.95),
            eps=1e-8,
            foreach=True,
        )

        @torch.compile
        def tail():
            torch.nn.utils.clip_grad_norm_(model.parameters(), params.run.grad_clip)
            opt.step()

    else:
        opt = train.opt

        def tail():
            torch.nn.utils.clip_grad_norm_(model.parameters(), params.run.grad_clip)
            opt.step()

    graphs = o.get("mode") == "reduce-overhead"
    xs, ys = data.device_batches(params, batch, warmup + timed, "cuda")
    out["build_s"] = round(time.perf_counter() - t0, 2)
    losses = []

    def one(i):
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with train.autocast:
            _, loss = train.forward(xs[i], ys[i], return_logits=False)
        loss.backward()
        tail()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().clone())

    t0 = time.perf_counter()
    one(0)
    torch.cuda.synchronize()
    out["first_step_s"] = round(time.perf_counter() - t0, 2)
    for i in range(1, warmup):
        one(i)
    times = step.time_steps(one, range(warmup, warmup + timed), "cuda")
    med = statistics.median(times)
    out.update(
        median_ms=round(med, 2),
        min_ms=round(min(times), 2),
        max_ms=round(max(times), 2),
        tokens_per_s=round(batch * params.run.seq_len / med * 1e3),
        peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
        losses=[round(float(v), 4) for v in torch.stack(losses[:8]).float().cpu()],
        last_loss=round(float(losses[-1]), 4),
        cache={k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd")},
        graphs=counters["stats"].get("unique_graphs", 0),
        graph_breaks=sum(counters["graph_break"].values()),
    )
    for key in ("inductor", "aot_autograd"):  # the counters that say warm or cold
        out["cache"][key] = {k: v for k, v in out["cache"].get(key, {}).items() if "cache" in k}
    return out


def check(rows: int = 8192) -> dict:
    """The classifier's kernel against its PyTorch reference, and its loss and gradients against torchao's FP8
    lm_head with F.cross_entropy and against fp32, on one batch of GPT-2-shaped random activations."""
    import torch
    import torch.nn.functional as F
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from lib.train import fp8_classifier as fc

    torch.manual_seed(0)
    x = torch.randn(rows, 768, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(50304, 768, device="cuda") * 0.02
    t = torch.randint(0, 50257, (rows,), device="cuda")
    logits = (x.float() @ w.T * 8).to(torch.bfloat16)  # a spread of logits wider than at initialisation
    lse = torch.logsumexp(logits.float(), -1)
    k, kt = fc.softmax_grad_fp8(logits, lse, t)
    r, rt = fc.softmax_grad_fp8_reference(logits, lse, t)
    out = {
        "kernel_equal": float((k.view(torch.uint8) == r.view(torch.uint8)).float().mean()),
        "kernel_t_equal": float((kt.view(torch.uint8) == rt.view(torch.uint8)).float().mean()),
        "kernel_t_is_transpose": bool(torch.equal(kt.view(torch.uint8), k.view(torch.uint8).t())),
    }

    def grads(fn, weight=None, autocast=True):
        xs = x.clone().requires_grad_()
        ws = weight if weight is not None else w.clone().requires_grad_()
        with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
            loss = fn(xs, ws)
        loss.backward()
        return float(loss), xs.grad.float(), ws.grad.float()

    net = torch.nn.Sequential(torch.nn.Linear(768, 50304, bias=False, device="cuda"))
    with torch.no_grad():
        net[0].weight.copy_(w)
    convert_to_float8_training(net, config=Float8LinearConfig.from_recipe_name("tensorwise"))
    ref = grads(lambda xs, ws: F.cross_entropy(xs.float() @ ws.T, t), autocast=False)
    mine = grads(lambda xs, ws: fc.fp8_classifier_loss(xs, ws, t))
    theirs = grads(lambda xs, ws: F.cross_entropy(net(xs), t), net[0].weight)
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    out.update(
        loss_fp32=ref[0],
        loss_classifier=mine[0],
        loss_torchao=theirs[0],
        classifier_grad_x_rel=rel(mine[1], ref[1]),
        classifier_grad_w_rel=rel(mine[2], ref[2]),
        torchao_grad_x_rel=rel(theirs[1], ref[1]),
        torchao_grad_w_rel=rel(theirs[2], ref[2]),
    )
    return out


def main(argv: list[str]) -> None:
    batch = int(argv[0]) if argv and argv[0].isdigit() else 128
    names = [a for a in argv if not a.isdigit()]
    if names and names[0] == "--check":
        print(json.dumps({"name": "check", **check()}), flush=True)
        return
    if names and names[0] == "--one":  # the child
        print(json.dumps(run_one(names[1], batch)), flush=True)
        return
    for name in names or list(CANDIDATES):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, __file__, str(batch), "--one", name], capture_output=True, text=True, timeout=420
        )
        line = next((s for s in reversed(proc.stdout.splitlines()) if s.startswith("{")), None)
        rec = json.loads(line) if line else {"name": name, "error": proc.stderr.strip().splitlines()[-3:]}
        rec["process_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(rec), flush=True)
        print(f"{name}: {rec.get('median_ms')} ms, first step {rec.get('first_step_s')} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main(sys.argv[1:])
