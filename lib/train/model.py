"""GPT-2 in one file, after nanoGPT's model.py, with the switches the stages need.

The only differences from a plain GPT-2 are the two levers that change the model itself:
`attention` ("naive" materialises the T x T score matrix; "sdpa" calls
scaled_dot_product_attention, which may dispatch to a flash kernel) and `vocab_size` versus
`real_vocab_size` (rows past the tokenizer's vocabulary exist only to give the lm_head GEMM a
friendlier shape; they start at zero and are never targets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from lib.train.fp8_classifier import fp8_classifier_loss

FP8_CLASSIFIER = "fp8_classifier"  # the loss that runs the lm_head in FP8 itself (lib/train/fp8_classifier.py)


@dataclass
class GPTConfig:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024
    vocab_size: int = 50257  # rows of the embedding / lm_head (maybe padded)
    real_vocab_size: int = 50257  # tokens the tokenizer can produce (targets are among these)
    attention: str = "naive"  # "naive" or "sdpa"
    loss: str = (
        "cross_entropy"  # or one of CUT_CROSS_ENTROPY (lm_head and loss fused, no logits tensor), FP8_CLASSIFIER
    )
    residual_dtype: str | None = None  # e.g. "bfloat16"; None: what autocast leaves it (fp32)

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.attention not in ("naive", "sdpa"):
            raise ValueError(f"attention must be 'naive' or 'sdpa', not {self.attention!r}")
        if self.loss not in ("cross_entropy", FP8_CLASSIFIER, *CUT_CROSS_ENTROPY):
            raise ValueError(
                f"loss must be 'cross_entropy', {FP8_CLASSIFIER!r} or one of {sorted(CUT_CROSS_ENTROPY)}, not {self.loss!r}"
            )
        if self.vocab_size < self.real_vocab_size:
            raise ValueError("vocab_size may pad the real vocabulary, never shrink it")


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.attention = config.attention
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.c_proj.SCALE_INIT = True
        if self.attention == "naive":
            mask = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
            self.register_buffer("causal_mask", mask.view(1, 1, config.block_size, config.block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            # The textbook form: a B x H x T x T score matrix lives in memory (and is kept for
            # backward), which is exactly what the flash stage removes.
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.causal_mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.c_proj.SCALE_INIT = True

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        # PyTorch's modules draw their default init from the global generator as they are built,
        # and how much they draw depends on vocab_size. Fork the generator for construction so
        # that _init_weights starts from the caller's state whatever the vocabulary: a padded and
        # an unpadded model then begin with identical weights.
        with torch.random.fork_rng(devices=[]):
            self.transformer = nn.ModuleDict(
                dict(
                    wte=nn.Embedding(config.vocab_size, config.n_embd),
                    wpe=nn.Embedding(config.block_size, config.n_embd),
                    h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                    ln_f=nn.LayerNorm(config.n_embd),
                )
            )
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)

    def _init_weights(self, module):
        # GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer).
        if isinstance(module, nn.Linear):
            std = 0.02
            if getattr(module, "SCALE_INIT", False):
                std *= (2 * self.config.n_layer) ** -0.5
            if module is self.lm_head:
                self._init_vocab_rows(module.weight)
            else:
                nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding) and module is not self.transformer.wte:
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def _init_vocab_rows(self, weight):
        # Draw exactly real_vocab_size rows so the random stream, and hence every other
        # weight, is identical whether or not the vocabulary is padded; padding rows are zero.
        with torch.no_grad():
            real = torch.empty(self.config.real_vocab_size, weight.size(1)).normal_(0.0, 0.02)
            weight.zero_()
            weight[: self.config.real_vocab_size].copy_(real)

    def init_checksum(self) -> str:
        """A cheap fingerprint of the weights over the real vocabulary, to show in a report
        that every stage started from the same model."""
        with torch.no_grad():
            s1 = s2 = 0.0
            for name, p in sorted(self.named_parameters()):
                if name in ("lm_head.weight", "transformer.wte.weight"):
                    p = p[: self.config.real_vocab_size]
                q = p.detach().double()
                s1, s2 = s1 + float(q.sum()), s2 + float((q * q).sum())
        return f"{s1:.6e}/{s2:.6e}"

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters counted once (tied weights once); without position embeddings by default,
        which is the N of the 6N FLOPs-per-token estimate."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    def forward(self, idx, targets=None, return_logits=True):
        """(logits, loss). `return_logits=False` (llm.c's train_gpt2.py) returns (None, loss): the
        logits are then no output of a compiled graph, which would otherwise keep a B x T x V
        tensor of its own alive beside the one the loss's backward saves."""
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        if self.config.residual_dtype:
            # Under autocast the residual stream stays fp32 (the embeddings are fp32 parameters and
            # each residual add promotes), so every LayerNorm and add reads and writes fp32. llm.c
            # keeps its activations in bf16; one cast here does the same for the whole stream.
            x = x.to(getattr(torch, self.config.residual_dtype))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None and self.config.loss in CUT_CROSS_ENTROPY:
            return None, fused_linear_cross_entropy(x, self.lm_head.weight, targets, self.config.loss)
        if targets is not None and self.config.loss == FP8_CLASSIFIER:  # the FP8 lm_head and its loss as one
            return None, fp8_classifier_loss(x, self.lm_head.weight, targets)
        logits = self.lm_head(x)
        if targets is None:
            return logits, None
        # The loss as nanoGPT writes it: over every column of the logits, padding included. The
        # padded rows are never targets and start at zero, so the softmax soon pushes them down;
        # autocast already runs cross_entropy in fp32, so no copy of the logits is made here.
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return (logits if return_logits else None), loss


# cut-cross-entropy's gradient filter per loss name. None keeps every gradient. The library's
# default ("high": 2.4e-4 in bf16) skips each block of the backward whose softmax gradients are all
# below it; training from scratch, where every probability starts near 1/50257, that is nearly all
# of them, so the exact form is the lever and the default is measured beside it.
CUT_CROSS_ENTROPY = {"cut_cross_entropy": None, "cut_cross_entropy_filtered": "high"}


def fused_linear_cross_entropy(x, weight, targets, loss: str = "cut_cross_entropy"):
    """lm_head and cross-entropy in one pass of cut-cross-entropy's kernels: the logits exist only
    tile by tile in on-chip memory, forward and backward (which recomputes them). The operands go
    in the autocast dtype, the one the lm_head GEMM would see."""
    from cut_cross_entropy import (
        linear_cross_entropy,  # Triton kernels (CUDA): imported where they run
    )

    if torch.is_autocast_enabled(x.device.type):
        dtype = torch.get_autocast_dtype(x.device.type)
        x, weight = x.to(dtype), weight.to(dtype)
    return linear_cross_entropy(x, weight, targets, filter_eps=CUT_CROSS_ENTROPY[loss])


def flops_per_token(config: GPTConfig, n_params: int, seq_len: int) -> int:
    """Training FLOPs per token: 6N for the weights (forward + backward) plus 12*L*H*Q*T for
    the attention score and value products (PaLM appendix B; H*Q = n_embd)."""
    return 6 * n_params + 12 * config.n_layer * config.n_embd * seq_len
