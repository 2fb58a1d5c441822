"""The lm_head and its cross-entropy as one FP8 classifier (llm.c's fused classifier, in FP8).

The head's GEMMs run in FP8 as torchao's tensorwise recipe runs them: e4m3 activations and weight, each with a
dynamic per-tensor scale, and an e5m2 gradient. What changes is the gradient of the logits. torchao receives it
in bf16 from the loss's backward, reads it once for its largest magnitude and again to cast and transpose it: two
more passes over B x T x V values, the widest tensor of the step. Here the loss's backward writes it in FP8
itself, in both layouts the two backward GEMMs read, with a scale fixed in advance: each entry of
softmax - one-hot lies in [-1, 1], so multiplying by e5m2's largest value (57344) maps it onto the format's range
with no pass to find the largest one (early in training the largest is within a hair of 1, so torchao's
dynamic scale is the same number). The loss's 1/N and the upstream gradient go into the GEMM's scale.

On CUDA the gradient is one Triton kernel (`_cross_entropy_grad_fp8_kernel`); elsewhere `softmax_grad_fp8_reference`
computes the same values in PyTorch, and the GEMMs are dequantised matmuls (tests/test_fp8_classifier.py holds
both to an fp32 reference, and the kernel to the reference on a GPU)."""

from __future__ import annotations

import torch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
GRAD_SCALE = torch.finfo(E5M2).max  # 57344: |softmax - one-hot| <= 1 fills e5m2's range, never beyond it


def to_fp8(t: torch.Tensor, dtype=E4M3) -> tuple[torch.Tensor, torch.Tensor]:
    """`t` in FP8 with a dynamic per-tensor scale (torchao's tensorwise: max / amax) and the inverse scale the
    GEMM multiplies back by."""
    top = torch.finfo(dtype).max
    scale = top / t.detach().abs().amax().float().clamp(min=1e-12)
    return (t.float() * scale).clamp(-top, top).to(dtype), scale.reciprocal()


def scaled_mm(a, b, scale_a, scale_b, out_dtype, fast_accum: bool) -> torch.Tensor:
    """a @ b of FP8 operands times their inverse scales (a row-major, b column-major, as cuBLAS's FP8 GEMM wants
    them). torch._scaled_mm on CUDA; elsewhere the same product of the dequantised values."""
    if a.is_cuda:
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, use_fast_accum=fast_accum)
    return ((a.float() * scale_a) @ (b.float() * scale_b)).to(out_dtype)


def column_major(t: torch.Tensor) -> torch.Tensor:
    """The same matrix laid out column by column (the second operand of an FP8 GEMM)."""
    return t.t().contiguous().t()


def softmax_grad_fp8_reference(logits, lse, targets) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax(logits) - one-hot(targets)) * GRAD_SCALE in e5m2, as (N, V) and its transpose (V, N): the values
    the kernel writes, computed in PyTorch."""
    g = torch.exp(logits.float() - lse[:, None])
    g[torch.arange(g.size(0), device=g.device), targets] -= 1.0
    g8 = (g * GRAD_SCALE).to(E5M2)
    return g8, g8.t().contiguous()


def softmax_grad_fp8(logits, lse, targets) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax_grad_fp8_reference's values: on CUDA one pass of `_cross_entropy_grad_fp8_kernel` over the logits."""
    if not logits.is_cuda:
        return softmax_grad_fp8_reference(logits, lse, targets)
    n, v = logits.shape
    g8 = torch.empty((n, v), dtype=E5M2, device=logits.device)
    g8_t = torch.empty((v, n), dtype=E5M2, device=logits.device)
    grid = (triton.cdiv(n, BLOCK_N), triton.cdiv(v, BLOCK_V))
    _cross_entropy_grad_fp8_kernel[grid](
        logits, lse, targets, g8, g8_t, n, v, SCALE=GRAD_SCALE, BLOCK_N=BLOCK_N, BLOCK_V=BLOCK_V, num_warps=8
    )
    return g8, g8_t


BLOCK_N, BLOCK_V = 64, 128  # a tile: 64 rows (64 bytes of each transposed row) x 128 columns

try:  # Triton comes with PyTorch's CUDA builds; a CPU build has none, and uses the reference above
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:

    @triton.jit
    def _cross_entropy_grad_fp8_kernel(
        logits, lse, targets, g8, g8_t, N, V, SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr
    ):
        # SCALE is a constant: as an argument, Inductor would pass it as fp64, and fp64 has no cast to fp8.
        # One tile: softmax - one-hot from the logits and each row's logsumexp, scaled, stored in e5m2 twice:
        # row-major for the activations' gradient, transposed for the weight's.
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
        rmask, cmask = rows < N, cols < V
        r64, c64 = rows.to(tl.int64), cols.to(tl.int64)  # N x V passes 2^31 at B=128
        mask = rmask[:, None] & cmask[None, :]
        z = tl.load(logits + r64[:, None] * V + c64[None, :], mask=mask, other=0.0).to(tl.float32)
        m = tl.load(lse + rows, mask=rmask, other=0.0)
        t = tl.load(targets + rows, mask=rmask, other=-1)
        g = (tl.exp(z - m[:, None]) - tl.where(cols[None, :] == t[:, None], 1.0, 0.0)) * SCALE
        tl.store(g8 + r64[:, None] * V + c64[None, :], g.to(tl.float8e5, fp_downcast_rounding="rtne"), mask=mask)
        tl.store(
            g8_t + c64[:, None] * N + r64[None, :],
            tl.trans(g).to(tl.float8e5, fp_downcast_rounding="rtne"),
            mask=cmask[:, None] & rmask[None, :],
        )


def logsumexp_rows(logits: torch.Tensor) -> torch.Tensor:
    """Each row's logsumexp in fp32. Compiled, Inductor reads the logits once for it; run eagerly (the held-out
    loss, a probe's forward) it goes a slice of rows at a time, so no fp32 copy of the whole B x T x V exists."""
    if torch.compiler.is_compiling():
        return torch.logsumexp(logits.float(), dim=-1)
    return torch.cat([torch.logsumexp(c.float(), dim=-1) for c in logits.split(4096)])


class FP8Classifier(torch.autograd.Function):
    """Mean cross-entropy of x @ weight.T against `targets`, the GEMMs in FP8 (module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, targets):
        x8, x_inv = to_fp8(x)
        w8, w_inv = to_fp8(weight)
        logits = scaled_mm(x8, w8.t(), x_inv, w_inv, torch.bfloat16, fast_accum=True)
        lse = logsumexp_rows(logits)
        loss = (lse - logits.gather(1, targets[:, None]).squeeze(1).float()).mean()
        ctx.save_for_backward(x8, x_inv, w8, w_inv, logits, lse, targets)
        ctx.dtypes = x.dtype, weight.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        x8, x_inv, w8, w_inv, logits, lse, targets = ctx.saved_tensors
        g8, g8_t = softmax_grad_fp8(logits, lse, targets)
        g_inv = grad_loss.float() / (GRAD_SCALE * logits.size(0))  # the mean's 1/N and the upstream gradient
        grad_x = scaled_mm(g8, column_major(w8), g_inv, w_inv, ctx.dtypes[0], fast_accum=False)
        grad_w = scaled_mm(g8_t, column_major(x8), g_inv, x_inv, ctx.dtypes[1], fast_accum=False)
        return grad_x, grad_w, None


def fp8_classifier_loss(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The training loss of the FP8 classifier: x (..., C) activations, weight (V, C), targets (...)."""
    return FP8Classifier.apply(x.reshape(-1, x.size(-1)), weight, targets.reshape(-1))
