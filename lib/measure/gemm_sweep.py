"""The lm_head GEMM alone, swept over output widths around the padded vocabulary.

Padding the vocabulary (50257 -> 50304) is claimed to speed training up because the lm_head GEMM
gets a width that is a multiple of 64/128 and cuBLAS picks a better kernel. The whole-step
measurement shows only the net effect; this sweep isolates the one GEMM the lever changes, at
every width that is a multiple of 8 within +-128 of the padded width plus the real vocabulary
itself, so a report can show whether the padded width is special or merely "not odd".

Each width runs exactly what the model's lm_head runs: forward `F.linear(X, W)` (one GEMM) and
backward `Y.backward(dY)` (two GEMMs: dX = dY W and dW = dY^T X), timed separately. For the real
and the padded width the kernel names are recorded too, which is what shows *why* they differ.
Off CUDA each width is capped at CPU_POINT_BUDGET_S (see _time_point) so the CPU default, whose
bf16 GEMMs are slow, finishes in seconds; every point says how many repetitions it timed.

Run in its own process: `python -m lib.measure.gemm_sweep spec.json out.json`."""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from lib.results import store
from lib.train.step import Timer, synchronize

ALIGNMENTS = (128, 64, 32, 16, 8, 1)
CPU_POINT_BUDGET_S = 0.015  # off CUDA, the most one width may take (see _time_point)
# Allocation, view and dispatch-wrapper ops: on the CPU they show self time but do no arithmetic,
# so they are not "the kernel that ran".
CPU_BOOKKEEPING = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::zeros",
        "aten::zeros_like",
        "aten::ones",
        "aten::ones_like",
        "aten::zero_",
        "aten::fill_",
        "aten::resize_",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::as_strided",
        "aten::view",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::expand",
        "aten::t",
        "aten::transpose",
        "aten::permute",
        "aten::detach",
        "aten::detach_",
        "aten::alias",
        "aten::lift_fresh",
        "aten::contiguous",
        "aten::linear",
        "aten::matmul",
        "aten::set_",
        "aten::to",
        "aten::_to_copy",
    }
)


def multiple_of(n: int) -> int:
    """The largest of ALIGNMENTS that divides n: the alignment a GEMM kernel can rely on."""
    return next(a for a in ALIGNMENTS if n % a == 0)


def default_dtypes(dev: str) -> list[str]:
    # TF32 exists only on NVIDIA tensor cores; elsewhere the honest fp32 comparison is plain fp32.
    return ["bf16", "tf32"] if dev == "cuda" else ["bf16", "fp32"]


class _Precision:
    """Select a sweep dtype: the tensor dtype, and for fp32 whether cuBLAS may use TF32. The
    previous allow_tf32 setting comes back on exit, so a caller's settings survive the sweep."""

    def __init__(self, name: str):
        if name not in ("bf16", "tf32", "fp32"):
            raise ValueError(f"unknown sweep dtype {name!r}: use bf16, tf32 or fp32")
        self.name = name
        self.dtype = torch.bfloat16 if name == "bf16" else torch.float32
        self._prev: bool | None = None

    def __enter__(self) -> _Precision:
        if self.name != "bf16":
            self._prev = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = self.name == "tf32"
        return self

    def __exit__(self, *exc) -> None:
        if self._prev is not None:
            torch.backends.cuda.matmul.allow_tf32 = self._prev


def _forward(X, W):
    return F.linear(X, W)  # exactly the model's lm_head (bias=False)


def _backward(X, W, Y, dY) -> None:
    # Gradients from the previous repetition would turn the backward into GEMM + accumulate;
    # with .grad cleared, AccumulateGrad just keeps the GEMM's output.
    X.grad = W.grad = None
    Y.backward(dY)


def _time_point(X, W, dY, dev: str, reps: int, warmup: int, budget_s: float) -> tuple[float, float, int]:
    """Median forward and backward ms of one width, and how many repetitions were timed. Off
    CUDA a width stops repeating once it has used `budget_s` (half of it for warm-up), after at
    least one timed repetition: CPU bf16 GEMMs are slow and the CPU sweep proves the pipeline,
    it measures nothing a GPU report relies on."""
    fwd, bwd = Timer(dev), Timer(dev)
    t0 = time.perf_counter()
    for i in range(warmup):
        if i and time.perf_counter() - t0 > budget_s / 2:
            break
        Y = _forward(X, W)
        _backward(X, W, Y, dY)
        del Y
    t0 = time.perf_counter()
    done = 0
    while done < reps and (done == 0 or time.perf_counter() - t0 <= budget_s):
        t = fwd.start()
        Y = _forward(X, W)
        fwd.stop(t)
        X.grad = W.grad = None  # see _backward; kept out of the timed region
        t = bwd.start()
        Y.backward(dY)
        bwd.stop(t)
        del Y
        done += 1
    return statistics.median(fwd.results_ms()), statistics.median(bwd.results_ms()), done


def _event_names_cuda(prof) -> list[str]:
    from lib.measure.kernel_profile import device_events

    return [e.name for e in device_events(prof) if _is_kernel(e)]


def _is_kernel(e) -> bool:
    """A device event that is a kernel: not a copy or a memset (Memcpy/Memset rows of the trace)."""
    kind = getattr(e, "activity_type", None)
    if isinstance(kind, str) and kind:
        return kind.lower() in ("kernel", "concurrent_kernel")
    return not e.name.lower().startswith(("memcpy", "memset"))


def _event_names_cpu(prof) -> list[str]:
    return [
        e.name
        for e in prof.events()
        if e.name.startswith("aten::") and e.name not in CPU_BOOKKEEPING and getattr(e, "self_cpu_time_total", 0) > 0
    ]


def _unique(names) -> list[str]:
    return list(dict.fromkeys(names))  # deduplicated, in order of first appearance


def kernel_names(X, W, dY, dev: str) -> dict:
    """The distinct kernels one forward and one backward ran, names in full."""
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if dev == "cuda" else ProfilerActivity.CPU
    pick = _event_names_cuda if dev == "cuda" else _event_names_cpu
    out = {}
    synchronize(dev)
    with profile(activities=[activity]) as prof:
        Y = _forward(X, W)
        synchronize(dev)
    out["fwd"] = _unique(pick(prof))
    with profile(activities=[activity]) as prof:
        _backward(X, W, Y, dY)
        synchronize(dev)
    out["bwd"] = _unique(pick(prof))
    return out


def run(
    m: int,
    k: int,
    ns: list[int],
    dev: str,
    dtypes=None,
    reps: int = 10,
    warmup: int = 3,
    kernel_ns=(),
    point_budget_s: float | None = None,
) -> dict:
    """Time Y = X W^T (fwd) and its two backward GEMMs for X (m, k) and W (n, k) at every n.
    TFLOP/s count 2mkn for the forward and 4mkn for the backward. `point_budget_s` caps the
    seconds one width may take (None: no cap on CUDA, CPU_POINT_BUDGET_S elsewhere)."""
    if reps < 1 or warmup < 0:
        raise ValueError("reps must be >= 1 and warmup >= 0")
    if point_budget_s is None:
        point_budget_s = float("inf") if dev == "cuda" else CPU_POINT_BUDGET_S
    dtypes = list(dtypes) if dtypes else default_dtypes(dev)
    kernel_ns = {int(n) for n in kernel_ns}
    points, kernels, kernel_errors = [], {}, []
    for name in dtypes:
        kernels[name] = {}
        with _Precision(name) as prec:
            X = torch.randn(m, k, device=dev, dtype=prec.dtype, requires_grad=True)
            for n in ns:
                n = int(n)
                W = torch.randn(n, k, device=dev, dtype=prec.dtype, requires_grad=True)
                dY = torch.randn(m, n, device=dev, dtype=prec.dtype)
                fwd_ms, bwd_ms, timed = _time_point(X, W, dY, dev, reps, warmup, point_budget_s)
                flops_f, flops_b = 2 * m * k * n, 4 * m * k * n
                total_ms = fwd_ms + bwd_ms
                points.append(
                    {
                        "n": n,
                        "dtype": name,
                        "fwd_ms": fwd_ms,
                        "bwd_ms": bwd_ms,
                        "total_ms": total_ms,
                        "fwd_tflops": _tflops(flops_f, fwd_ms),
                        "bwd_tflops": _tflops(flops_b, bwd_ms),
                        "tflops": _tflops(flops_f + flops_b, total_ms),
                        "multiple_of": multiple_of(n),
                        "reps": timed,
                    }
                )
                if n in kernel_ns:
                    try:
                        kernels[name][str(n)] = kernel_names(X, W, dY, dev)
                    except Exception as exc:  # a profiler failure must not cost the timings
                        kernels[name][str(n)] = {"fwd": [], "bwd": []}
                        kernel_errors.append(f"{name} n={n}: {type(exc).__name__}: {exc}")
                X.grad = None
                del W, dY
            del X
        if dev == "cuda":
            torch.cuda.empty_cache()
    return {"m": m, "k": k, "dtypes": dtypes, "points": points, "kernels": kernels, "kernel_errors": kernel_errors}


def _tflops(flops: int, ms: float) -> float | None:
    return flops / (ms * 1e-3) / 1e12 if ms > 0 else None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m lib.measure.gemm_sweep spec.json out.json", file=sys.stderr)
        return 2
    spec = json.loads(open(argv[0]).read())
    res = run(
        int(spec["m"]),
        int(spec["k"]),
        [int(n) for n in spec["ns"]],
        spec["dev"],
        dtypes=spec.get("dtypes"),
        reps=int(spec.get("reps", 10)),
        warmup=int(spec.get("warmup", 3)),
        kernel_ns=spec.get("kernel_ns", ()),
        point_budget_s=spec.get("point_budget_s"),
    )
    store.write_atomic(argv[1], res)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
