"""FP8 GEMMs for nn.Linear, written on torch._scaled_mm (the FP8 tensor-core GEMM of Hopper
and Ada; PyTorch also runs it on the CPU, which is how the tests check the arithmetic).

Recipe (the common "dynamic per-tensor scaling" one): before every GEMM each operand is scaled
so its largest magnitude lands on the format's largest value, then cast. Activations and
weights use e4m3 (more mantissa), gradients e5m2 (more range). The GEMM accumulates in fp32 and
un-scales in its epilogue. Master weights, the optimizer and everything outside the blocks'
Linear layers stay as they were (bf16 autocast), so the lever is only "FP8 matmuls"."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2


def quantize(t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(t cast to `dtype` after scaling, the inverse scale _scaled_mm multiplies back in)."""
    fmax = torch.finfo(dtype).max
    amax = t.detach().abs().amax().float()
    scale = fmax / torch.clamp(amax, min=1e-12)
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype), scale.reciprocal()


def _column_major(t: torch.Tensor) -> torch.Tensor:
    # _scaled_mm (cuBLASLt's FP8 GEMM) takes its second operand column-major only.
    return t.t().contiguous().t()


class _FP8Matmul(torch.autograd.Function):
    """y = x @ w.T with FP8 operands; x (M, K), w (N, K); y bf16."""

    @staticmethod
    def forward(ctx, x, weight):
        x8, sx = quantize(x, E4M3)
        w8, sw = quantize(weight, E4M3)
        ctx.save_for_backward(x8, sx, w8, sw)
        ctx.dtypes = (x.dtype, weight.dtype)
        return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)

    @staticmethod
    def backward(ctx, grad_y):
        x8, sx, w8, sw = ctx.saved_tensors
        g8, sg = quantize(grad_y, E5M2)
        grad_x = torch._scaled_mm(g8, _column_major(w8), scale_a=sg, scale_b=sw, out_dtype=torch.bfloat16)
        grad_w = torch._scaled_mm(
            g8.t().contiguous(), _column_major(x8), scale_a=sg, scale_b=sx, out_dtype=torch.float32
        )
        return grad_x.to(ctx.dtypes[0]), grad_w.to(ctx.dtypes[1])


class Float8Linear(nn.Linear):
    """nn.Linear whose GEMMs run in FP8. Shapes _scaled_mm cannot take (every dimension must be
    a multiple of 16) fall back to the ordinary bf16/fp32 path."""

    def forward(self, x):
        k, n = self.in_features, self.out_features
        m = x.numel() // k
        if m % 16 or k % 16 or n % 16:
            return F.linear(x, self.weight, self.bias)
        with torch.autocast(device_type=x.device.type, enabled=False):
            y = _FP8Matmul.apply(x.reshape(m, k), self.weight)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.view(*x.shape[:-1], n)


def convert_linears(module: nn.Module) -> int:
    """Turn every nn.Linear inside `module` into a Float8Linear in place (same parameters, same
    initial weights); returns how many were converted."""
    count = 0
    for m in module.modules():
        if type(m) is nn.Linear:
            m.__class__ = Float8Linear  # only forward differs: parameters and hooks stay as they are
            count += 1
    return count
