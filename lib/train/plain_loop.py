"""The cross-check: a plain training loop in the form of the common single-file GPT-2 trainers
(nanoGPT, build-nanogpt), with its own compact model, timed the way those trainers time it: wall
clock over steps that run ahead of the device (nanoGPT; the figure compared with the harness), and
once more with torch.cuda.synchronize() after every step (build-nanogpt), recorded beside it. It shares no code with the harness it checks (only
the data batches come from lib/), so a tax of the harness's own making shows up as a difference
between the two at the same configuration.

A job names the stage's switches as plain data: tf32, autocast, attention, padded_vocab,
fused_adamw, compile, residual_dtype (llm.c's bf16 activations), fp8_lm_head (torchao's float8
conversion of the lm_head, in the form torchao's README gives) and return_logits (llm.c's training
loop asks for the loss alone). FP8 in the blocks is not a switch of
those trainers; the runner does not ask for it."""

from __future__ import annotations

import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from lib.core import data


class SelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, flash):
        super().__init__()
        self.n_head, self.flash = n_head, flash
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        if not flash:
            self.register_buffer(
                "bias",
                torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size),
                persistent=False,
            )

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, flash):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = SelfAttention(n_embd, n_head, block_size, flash)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate="tanh"), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class PlainGPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, flash, residual_dtype=None):
        super().__init__()
        self.residual_dtype = getattr(torch, residual_dtype) if residual_dtype else None
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size, flash) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        for name, p in self.named_parameters():  # GPT-2 init
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2 and "ln_" not in name:
                std = 0.02 * ((2 * n_layer) ** -0.5 if name.endswith(("c_proj.weight", "mlp.2.weight")) else 1)
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets, return_logits=True):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        if self.residual_dtype:  # llm.c's bf16 activations
            x = x.to(self.residual_dtype)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return (logits if return_logits else None), loss  # llm.c's train_gpt2.py: return_logits=False


def run(job: dict) -> dict:
    """Train warm-up steps, then `timed` steps timed as a whole, then `timed` more synchronised and
    timed one by one, at the job's switches and batch size. Out of memory is a result, as in the
    harness."""
    params, sw, batch = job["params"], job["switches"], job["batch_size"]
    m, r = params.model, params.run
    dev = {"rocm": "cuda"}.get(params.backend, params.backend)
    rec = {"kind": "plain", "stage": job["stage"], "batch_size": batch, "status": "ok", "reason": None}
    t_start = time.perf_counter()
    try:
        torch.set_float32_matmul_precision("high" if sw["tf32"] else "highest")
        torch.manual_seed(r.seed)
        model = PlainGPT(
            m.padded_vocab_size if sw["padded_vocab"] else m.vocab_size,
            m.block_size,
            m.n_layer,
            m.n_head,
            m.n_embd,
            sw["attention"] == "sdpa",
            sw.get("residual_dtype"),
        ).to(dev)
        if sw.get("fp8_lm_head"):  # torchao's float8 training, as its README applies it, on the lm_head
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training

            convert_to_float8_training(
                model,
                config=Float8LinearConfig.from_recipe_name(sw["fp8_lm_head"]),
                module_filter_fn=lambda module, fqn: fqn == "lm_head",
            )
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": r.weight_decay}, {"params": rest, "weight_decay": 0.0}],
            lr=r.learning_rate,
            betas=(0.9, 0.95),
            eps=1e-8,
            **({"fused": True} if sw["fused_adamw"] else {}),
        )
        if sw["compile"]:
            model = torch.compile(model)
        ctx = torch.autocast(device_type=dev, dtype=getattr(torch, sw["autocast"])) if sw["autocast"] else None
        kwargs = {} if sw.get("return_logits", True) else {"return_logits": False}
        warmup, timed = r.warmup_steps, r.timed_steps
        accum = job.get("micro_steps", 1)  # build-nanogpt's grad_accum_steps
        xs, ys = data.device_batches(params, batch, (warmup + 2 * timed) * accum, dev)
        losses = []

        def train_step(i):
            loss_accum = 0.0
            for micro_step in range(accum):
                x, y = xs[i * accum + micro_step], ys[i * accum + micro_step]
                if ctx is None:
                    _, loss = model(x, y, **kwargs)
                else:
                    with ctx:
                        _, loss = model(x, y, **kwargs)
                loss = loss / accum
                loss_accum += loss.detach()
                loss.backward()
            loss = loss_accum
            torch.nn.utils.clip_grad_norm_(model.parameters(), r.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())

        def sync():
            if dev == "cuda":
                torch.cuda.synchronize()

        for i in range(warmup):
            train_step(i)
        # nanoGPT's loop: no synchronisation inside it, the host runs ahead; its throughput is the
        # wall time of the timed steps (synchronised at both ends) over their number.
        sync()
        t0 = time.perf_counter()
        for i in range(warmup, warmup + timed):
            train_step(i)
        sync()
        mean_ms = (time.perf_counter() - t0) * 1e3 / timed
        # build-nanogpt's loop: torch.cuda.synchronize() after every step, which it times one by one.
        synced = []
        for i in range(warmup + timed, warmup + 2 * timed):
            t1 = time.perf_counter()
            train_step(i)
            sync()
            synced.append((time.perf_counter() - t1) * 1e3)
    except torch.OutOfMemoryError as exc:
        rec.update(status="oom", reason=f"out of memory: {str(exc).splitlines()[0][:200]}")
        return rec
    rec.update(
        micro_steps=accum,
        ms_per_step=mean_ms,
        tokens_per_s=batch * accum * r.seq_len / (mean_ms / 1e3),
        synced_step_ms=synced,
        synced_median_ms=statistics.median(synced),
        losses=[float(v) for v in losses],
        wall_s=time.perf_counter() - t_start,
    )
    return rec
