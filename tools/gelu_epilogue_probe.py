"""Issue 54's first question, asked before any stage is built: does cuBLASLt's GELU epilogue (through nvmath-python)
beat what torch.compile makes of GPT-2's MLP on this GPU? Times the MLP's forward and backward at GPT-2's shapes
(tokens x 768 -> 3072 -> 768, bf16, tanh GELU) three ways, each the median of CUDA-event timings:

    eager     F.linear, F.gelu, F.linear and autograd
    inductor  the same function under torch.compile (Inductor fuses the bias and GELU around cuBLAS's GEMMs)
    epilogue  fc1 forward as one GEMM with the GELU_AUX_BIAS epilogue (it also keeps the pre-activation), fc2 by
              F.linear; backward: fc2's input gradient as one GEMM with the DGELU_BGRAD epilogue (GELU's derivative
              from that pre-activation, and fc1's bias gradient), the weight gradients and fc1's input gradient by
              torch.matmul

and checks the epilogue's output and gradients against eager. Prints one JSON object.

    python tools/gelu_epilogue_probe.py [TOKENS]      (default 65536: B=64 x T=1024)
"""

from __future__ import annotations

import json
import sys
import traceback


def main(tokens: int) -> dict:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    d, h = 768, 3072
    x = torch.randn(tokens, d, device=dev, dtype=dt)
    w1, b1 = torch.randn(h, d, device=dev, dtype=dt) * 0.02, torch.randn(h, device=dev, dtype=dt) * 0.02
    w2, b2 = torch.randn(d, h, device=dev, dtype=dt) * 0.02, torch.randn(d, device=dev, dtype=dt) * 0.02
    dout = torch.randn(tokens, d, device=dev, dtype=dt)
    out: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tokens": tokens}

    def mlp(x, w1, b1, w2, b2):
        return F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)

    def timed(step, n=20, warm=5) -> float:
        for _ in range(warm):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(n):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return sorted(times)[n // 2]

    leaves = [t.clone().requires_grad_() for t in (x, w1, b1, w2, b2)]

    def autograd_step(fn):
        def step():
            for t in leaves:
                t.grad = None
            fn(*leaves).backward(dout)

        return step

    out["eager_fwd_ms"] = timed(lambda: mlp(x, w1, b1, w2, b2))
    out["eager_fwd_bwd_ms"] = timed(autograd_step(mlp))
    ref = [t.grad.clone() for t in leaves]
    ref_y = mlp(x, w1, b1, w2, b2)
    compiled = torch.compile(mlp)
    out["inductor_fwd_ms"] = timed(lambda: compiled(x, w1, b1, w2, b2))
    out["inductor_fwd_bwd_ms"] = timed(autograd_step(compiled))
    try:
        epilogue(x, w1, b1, w2, b2, dout, ref_y, ref, timed, out)  # fills `out` as it goes: a failure keeps the rest
    except Exception as e:  # the probe still reports the two PyTorch paths, and why the epilogue did not run
        out["epilogue_error"] = f"{type(e).__name__}: {e}"
        out["epilogue_trace"] = traceback.format_exc()[-3000:]
    return out


def epilogue(x, w1, b1, w2, b2, dout, ref_y, ref, timed, got: dict) -> None:
    """The MLP with fc1's GELU and its derivative in cuBLASLt epilogues. cuBLASLt adds a bias per row of its result
    (and reduces a bias gradient per row), so each fused GEMM computes the transposed product: (h x tokens) =
    W1 (h x d) @ x^T (d x tokens), whose transpose is the row-major (tokens x h) activation."""
    import nvmath
    import torch
    import torch.nn.functional as F
    from nvmath.linalg.advanced import Matmul, MatmulEpilog

    got["nvmath"] = nvmath.__version__
    fc1 = Matmul(w1, x.t())
    fc1.plan(epilog=MatmulEpilog.GELU_AUX_BIAS, epilog_inputs={"bias": b1})
    act_t, aux = fc1.execute()
    act = act_t.t()
    y = F.linear(act, w2, b2)
    got["fwd_max_abs_err"] = float((y - ref_y).abs().max())
    got["act_layout"] = {"shape": list(act.shape), "stride": list(act.stride()), "aux": sorted(aux)}
    bwd = Matmul(w2.t(), dout.t())
    bwd.plan(epilog=MatmulEpilog.DGELU_BGRAD, epilog_inputs={"gelu_aux": aux["gelu_aux"]})
    dpre_t, daux = bwd.execute()

    def forward():
        a_t, _ = fc1.execute()
        return F.linear(a_t.t(), w2, b2)

    def forward_backward():
        a_t, _ = fc1.execute()
        a = a_t.t()
        F.linear(a, w2, b2)
        dw2 = dout.t() @ a  # fc2's weight gradient
        db2 = dout.sum(0)
        dpre_t, extra = bwd.execute()  # dgelu(W2^T dout^T) and fc1's bias gradient
        dw1 = dpre_t @ x  # fc1's weight gradient
        dx = dpre_t.t() @ w1  # fc1's input gradient
        return dx, dw1, extra, dw2, db2

    # the parts the epilogues replace, alone: fc1 with its bias and GELU, and GELU's backward with fc1's bias gradient
    pre = F.linear(x, w1, b1)
    dact = dout @ w2

    def fc1_torch():
        return F.gelu(F.linear(x, w1, b1), approximate="tanh")

    def dgelu_torch():
        g = torch.ops.aten.gelu_backward(dact, pre, approximate="tanh")
        return g, g.sum(0)

    fc1_compiled, dgelu_compiled = torch.compile(fc1_torch), torch.compile(dgelu_torch)
    got["part_fc1_gelu_ms"] = {
        "eager": timed(fc1_torch),
        "inductor": timed(fc1_compiled),
        "epilogue": timed(fc1.execute),
    }
    got["part_dgelu_bgrad_ms"] = {
        "eager (GEMM + gelu_backward + sum)": timed(lambda: dgelu_torch() if (dout @ w2) is not None else None),
        "inductor (GEMM + fused gelu_backward and sum)": timed(lambda: (dout @ w2, dgelu_compiled())),
        "epilogue": timed(bwd.execute),
        "GEMM alone": timed(lambda: dout @ w2),
    }
    got["part_wgrad_ms"] = {
        "dpre_t @ x (epilogue's column-major dpre)": timed(lambda: dpre_t @ x),
        "dpre.t() @ x (row-major dpre)": timed(lambda: dact.t() @ x),
        "dpre_t.t() @ w1 (epilogue's)": timed(lambda: dpre_t.t() @ w1),
        "dpre @ w1 (row-major)": timed(lambda: dact @ w1),
    }
    got["epilogue_fwd_ms"] = timed(forward)
    got["epilogue_fwd_bwd_ms"] = timed(forward_backward)
    dx, dw1, extra, dw2, db2 = forward_backward()
    got["bwd_aux"] = sorted(extra)
    db1 = extra.get("drelu_bgrad") if "drelu_bgrad" in extra else next(iter(extra.values()), None)
    got["grad_max_abs_err"] = {
        "x": float((dx - ref[0]).abs().max()),
        "w1": float((dw1 - ref[1]).abs().max()),
        "b1": float((db1.reshape(-1) - ref[2]).abs().max()) if db1 is not None else None,
        "w2": float((dw2 - ref[3]).abs().max()),
        "b2": float((db2 - ref[4]).abs().max()),
    }
    got["grad_ref_max_abs"] = {k: float(r.abs().max()) for k, r in zip(("x", "w1", "b1", "w2", "b2"), ref)}
    got["dpre_layout"] = {"shape": list(dpre_t.shape), "stride": list(dpre_t.stride())}
    del daux


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 65536), indent=1, default=str))
