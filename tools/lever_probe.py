"""A quick probe of candidate levers on top of the canonical trainer's configuration (bf16 autocast,
SDPA, vocab 50304, fused AdamW, torch.compile), each in a fresh process, to find which deserve to
become stages. Not part of the report: its numbers only choose what the report then measures.

    python tools/lever_probe.py            # every candidate, one JSON line each, to stdout
    python tools/lever_probe.py NAME       # one candidate
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name: (micro-batch, options)
CANDIDATES = {
    "base_b64": (64, {}),
    "resid_bf16_b64": (64, {"resid_bf16": True}),
    "coord_b64": (64, {"coord": True}),
    "graphs_b64": (64, {"mode": "reduce-overhead"}),
    "combo_b64": (64, {"resid_bf16": True, "coord": True, "mode": "reduce-overhead"}),
    "liger_b64": (64, {"loss": "liger"}),
    "base_b96": (96, {}),
    "combo_b96": (96, {"resid_bf16": True, "coord": True, "mode": "reduce-overhead"}),
    "cce_filter_b128": (128, {"loss": "cce_filter"}),
    "liger_b128": (128, {"loss": "liger"}),
    "f8head_b64": (64, {"float8_head": True}),
    "autotune_b64": (64, {"mode": "max-autotune-no-cudagraphs", "blocking": True}),
    "resid_b96": (96, {"resid_bf16": True}),
    "resid_b128": (128, {"resid_bf16": True}),
    "resid_liger_b64": (64, {"resid_bf16": True, "loss": "liger"}),
    "resid_liger_b128": (128, {"resid_bf16": True, "loss": "liger"}),
    "resid_cce_filter_b128": (128, {"resid_bf16": True, "loss": "cce_filter"}),
    "resid_f8head_b64": (64, {"resid_bf16": True, "float8_head": True}),
    "resid_autotune_b64": (64, {"resid_bf16": True, "mode": "max-autotune-no-cudagraphs", "blocking": True}),
    "resid_cudnn_b64": (64, {"resid_bf16": True, "sdpa": "CUDNN_ATTENTION"}),
    "resid_b128_expandable": (128, {"resid_bf16": True, "expandable": True}),
    "resid_cudnn_b96": (96, {"resid_bf16": True, "sdpa": "CUDNN_ATTENTION"}),
    "resid_cudnn_b128_expandable": (128, {"resid_bf16": True, "sdpa": "CUDNN_ATTENTION", "expandable": True}),
    "resid_f8head_b128": (128, {"resid_bf16": True, "float8_head": "tensorwise"}),
    "resid_f8head_gwhp_b128": (128, {"resid_bf16": True, "float8_head": "rowwise_with_gw_hp"}),
    "resid_f8head_rowwise_b128": (128, {"resid_bf16": True, "float8_head": "rowwise"}),
}


def run_one(name: str, warmup: int = 5, timed: int = 15) -> dict:
    import torch
    import torch.nn.functional as F

    from lib.core import config, data
    from lib.train.model import GPT, GPTConfig

    batch, o = CANDIDATES[name]
    if o.get("coord"):
        torch._inductor.config.coordinate_descent_tuning = True
    torch.set_float32_matmul_precision("high")
    params = config.load("h100")
    m = params.model
    torch.manual_seed(1337)
    model = GPT(
        GPTConfig(
            n_layer=m.n_layer,
            n_head=m.n_head,
            n_embd=m.n_embd,
            block_size=1024,
            vocab_size=50304,
            real_vocab_size=50257,
            attention="sdpa",
        )
    ).cuda()
    reference = copy.deepcopy(model) if o.get("float8_head") else None
    if o.get("float8_head"):
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        recipe = o["float8_head"] if isinstance(o["float8_head"], str) else "tensorwise"
        convert_to_float8_training(
            model,
            config=Float8LinearConfig.from_recipe_name(recipe),
            module_filter_fn=lambda mod, fqn: fqn == "lm_head",
        )
    tr = model.transformer

    def body_of(net, idx):
        t = net.transformer
        pos = torch.arange(idx.size(1), device=idx.device)
        x = t.wte(idx) + t.wpe(pos)
        if o.get("resid_bf16"):
            x = x.to(torch.bfloat16)  # llm.c keeps the residual stream in bf16
        for block in t.h:
            x = block(x)
        return x

    def body(idx):
        return tr.ln_f(body_of(model, idx))

    loss_kind = o.get("loss", "ce")
    if loss_kind == "ce":

        def fwd(idx, tgt):
            logits = model.lm_head(body(idx))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))

        step_fwd = torch.compile(fwd, **({"mode": o["mode"]} if "mode" in o else {}))
    else:
        cbody = torch.compile(body, **({"mode": o["mode"]} if "mode" in o else {}))
        if loss_kind == "liger":
            from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy as lce

            def step_fwd(idx, tgt):
                h = cbody(idx).to(torch.bfloat16)
                return lce(h.view(-1, h.size(-1)), model.lm_head.weight.to(torch.bfloat16), tgt.view(-1))
        else:
            from cut_cross_entropy import linear_cross_entropy

            def step_fwd(idx, tgt):
                h = cbody(idx).to(torch.bfloat16)
                return linear_cross_entropy(h, model.lm_head.weight.to(torch.bfloat16), tgt)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=6e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
        fused=True,
    )
    xs, ys = data.device_batches(params, batch, warmup + timed, "cuda")
    grad_err = None
    if reference is not None:  # eager, on 8 sequences: how far the FP8 lm_head's gradients are from bf16's
        grads = []
        for net in (reference, model):
            net.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = net.transformer.ln_f(body_of(net, xs[0][:8]))
                logits = net.lm_head(h)
                F.cross_entropy(logits.view(-1, logits.size(-1)).float(), ys[0][:8].reshape(-1)).backward()
            grads.append(net.lm_head.weight.grad.float().clone())
        grad_err = float((grads[1] - grads[0]).norm() / grads[0].norm())
        model.zero_grad(set_to_none=True)
        del reference, grads
    graphs = o.get("mode") == "reduce-overhead"
    losses = []

    def step(i):
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast("cuda", dtype=torch.bfloat16), contextlib.ExitStack() as stack:
            if o.get("sdpa"):
                from torch.nn.attention import SDPBackend, sdpa_kernel

                stack.enter_context(sdpa_kernel(getattr(SDPBackend, o["sdpa"])))
            loss = step_fwd(xs[i], ys[i])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().clone())

    t0 = time.perf_counter()
    step(0)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    for i in range(1, warmup):
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(timed)]
    t0 = time.perf_counter()
    for k, i in enumerate(range(warmup, warmup + timed)):
        events[k][0].record()
        step(i)
        events[k][1].record()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3 / timed
    ms = [a.elapsed_time(b) for a, b in events]
    return {
        "name": name,
        "batch": batch,
        "options": o,
        "median_ms": statistics.median(ms),
        "wall_ms": wall_ms,
        "tokens_per_s": batch * 1024 / (wall_ms / 1e3),
        "first_step_s": first_s,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "lm_head_grad_rel_err": grad_err,
        "losses": [round(float(v), 4) for v in losses],
    }


def main(names: list[str], budget_s: float) -> None:
    t_end = time.time() + budget_s
    for name in names:
        left = t_end - time.time()
        if left < 45:
            print(json.dumps({"name": name, "status": "skipped: out of time"}), flush=True)
            continue
        o = CANDIDATES[name][1]
        env = dict(
            os.environ,
            **({"CUDA_LAUNCH_BLOCKING": "1"} if o.get("blocking") else {}),
            **({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"} if o.get("expandable") else {}),
            # inductor's caches key on the traced graph, not on the SDPA backend flags: a forced
            # backend needs a cache of its own, or it silently reuses another backend's kernels
            **({"TORCHINDUCTOR_CACHE_DIR": f"/tmp/inductor-{name}"} if o.get("sdpa") else {}),
        )
        try:
            p = subprocess.run(
                [sys.executable, __file__, name], capture_output=True, text=True, env=env, timeout=min(left, 240)
            )
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            print(
                lines[-1]
                if lines and p.returncode == 0
                else json.dumps({"name": name, "status": f"rc {p.returncode}", "stderr": p.stderr[-3000:]}),
                flush=True,
            )
        except subprocess.TimeoutExpired as e:
            print(
                json.dumps(
                    {"name": name, "status": "timeout", "stderr": (e.stderr or b"")[-2000:].decode(errors="replace")}
                ),
                flush=True,
            )


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in CANDIDATES:
        print(json.dumps(run_one(sys.argv[1])), flush=True)
    else:
        main(sys.argv[1:] or list(CANDIDATES), float(os.environ.get("PROBE_BUDGET_S", "540")))
