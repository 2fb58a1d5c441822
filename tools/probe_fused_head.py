"""A probe for the frontier-kernels issue, run by hand on a GPU: does Liger-Kernel's cross-entropy run on this stack,
and what do its fused forms cost at GPT-2's head against what the recommendation does today (bf16 lm_head GEMM and
F.cross_entropy, compiled)? Prints one line per form: forward+backward median ms over timed iterations, the loss and
the largest gradient difference against an fp32 reference on the same inputs. Not part of a report.

Usage (GPU host, liger-kernel installed): python tools/probe_fused_head.py [rows=65536]"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

V, D = 50304, 768


def timed(fn, iters: int = 20, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(rows: int) -> None:
    torch.manual_seed(0)
    h = (torch.randn(rows, D, device="cuda") * 0.5).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(V, D, device="cuda") * 0.02).requires_grad_()  # the fp32 master weight, as under autocast
    y = torch.randint(0, 50257, (rows,), device="cuda")

    def grads(loss_fn):
        h.grad = w.grad = None
        loss = loss_fn()
        loss.backward()
        # clone: w.grad is fp32 already, so .float() would alias it and the timed iterations accumulate into it
        return loss.detach().float(), h.grad.float().clone(), w.grad.float().clone()

    ref = grads(lambda: F.cross_entropy(h.float() @ w.T, y))

    def today():
        with torch.autocast("cuda", torch.bfloat16):
            return F.cross_entropy(F.linear(h, w), y)

    compiled = torch.compile(today)
    forms = {"today: bf16 GEMM + F.cross_entropy, compiled": compiled}
    try:
        from liger_kernel.transformers import LigerCrossEntropyLoss, LigerFusedLinearCrossEntropyLoss

        liger_ce, liger_flce = LigerCrossEntropyLoss(), LigerFusedLinearCrossEntropyLoss()

        def ce_one_pass():
            with torch.autocast("cuda", torch.bfloat16):
                logits = F.linear(h, w)
            return liger_ce(logits, y)

        forms["Liger cross-entropy (loss and gradient in one pass)"] = ce_one_pass
        forms["Liger fused linear cross-entropy (bf16 weight copy)"] = lambda: liger_flce(w.to(torch.bfloat16), h, y)
    except Exception as e:  # the probe reports what does not import, and measures the rest
        print(f"liger-kernel: {type(e).__name__}: {e}")
    for name, fn in forms.items():
        try:
            loss, gh, gw = grads(fn)
            ms = timed(lambda fn=fn: fn().backward())
            dh = (gh - ref[1]).abs().max().item() / ref[1].abs().max().item()
            dw = (gw - ref[2]).abs().max().item() / ref[2].abs().max().item()
            print(
                f"{name}: {ms:.2f} ms fwd+bwd, loss {loss.item():.5f} (fp32 {ref[0].item():.5f}), "
                f"max |grad diff| / max |grad|: input {dh:.2e}, weight {dw:.2e}"
            )
        except Exception as e:
            print(f"{name}: failed: {type(e).__name__}: {str(e)[:300]}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 65536)
