"""Where one training step's time goes: every kernel of a profiled step, summed into a few
categories a reader recognises (GEMM, attention, cross-entropy, norm/elementwise, optimizer).

On CUDA the source is the device time of the kernels torch.profiler recorded (CUPTI), so the
figures are what the GPU spent, not what the CPU spent launching. Kernels on several streams may
overlap, so busy_ms can exceed the step's wall time; with one stream (the default) it is the
GPU's busy time. Elsewhere there are no device kernels to read: the source is each operator's
*self* CPU time, so an op and the ops it calls are never counted twice.

A kernel is categorised by its name alone (`categorise`), with one exception on the CPU path:
ops run inside `optimizer.step()` count as optimizer. The CPU AdamW runs plain `aten::mul_`,
`aten::lerp_`... one tensor at a time, which by name would be elementwise work; on CUDA the
optimizer's kernels carry their own names (multi_tensor_apply, fused Adam)."""
from __future__ import annotations

import re
from collections import defaultdict

CATEGORIES = ("GEMM", "attention", "cross-entropy", "norm/elementwise", "optimizer", "other")

# Checked in this order; the first match wins. Order matters: a log-softmax is cross-entropy
# although it contains "softmax", a fused SDPA kernel is attention although it contains "mma",
# the optimizer's multi_tensor_apply is not "mul", and a GEMM's "splitKreduce" is not a reduction.
RULES: list[tuple[str, re.Pattern]] = [(cat, re.compile(rx, re.IGNORECASE)) for cat, rx in (
    ("cross-entropy", r"log_?softmax|nll_?loss|cross_?entropy"),
    ("optimizer", r"adam|multi_tensor_apply|foreach|lpnorm|clip_grad|optimizer\."),
    # dot_do_o / convert_dq: the helper kernels of cuDNN's SDPA backward (seen on an H100)
    ("attention", r"flash|fmha|attention|sdpa|cudnn.*mha|softmax|masked_fill|dot_do_o|convert_dq"),
    # Inductor's pointwise/reduction kernels are never GEMMs, whatever op they were fused around
    # (FP8's scale-and-cast prologue is named "triton_poi_fused__scaled_mm_..."); its templates are.
    ("norm/elementwise", r"^triton_(poi|red|per)_"),
    ("GEMM", r"gemm|gemv|cutlass|xmma|nvjet|cublas|\bsm\d+_\w*mma|split_?k|scaled_mm|triton_tem_"
             r"|aten::(mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation)\b"),
    # gamma_beta: LayerNorm's weight/bias gradient; cub radix sort, unique_by_key, per_segment,
    # compute_grad_weight: the sort-and-sum of the embedding backward on CUDA
    ("norm/elementwise", r"layer_?norm|gamma_?beta|elementwise|vectorized|reduce|triton_|gelu|tanh"
                         r"|add|mul|div|sqrt|lerp|copy|clone|fill|cat|index|embedding|dropout|unrolled"
                         r"|norm|cub::|radix_?sort|unique_by_key|per_segment|compute_grad_weight"
                         r"|sum_and_scatter"),
)]
# Profiler bookkeeping rows on the CPU path: not work the step did.
CPU_IGNORED = re.compile(r"^(ProfilerStep|\[memory\]|\[OutOfMemory\]|profiler::)")


def categorise(name: str) -> str:
    for cat, rx in RULES:
        if rx.search(name):
            return cat
    return "other"


def _device_types():
    try:
        from torch.autograd import DeviceType
    except ImportError:  # older layouts
        from torch._C._autograd import DeviceType
    return DeviceType


def _is_device(e) -> bool:
    """A GPU-timeline event (kernel, memcpy, memset). ROCm's kernels also carry DeviceType.CUDA."""
    dt = getattr(e, "device_type", None)
    DeviceType = _device_types()
    return dt == DeviceType.CUDA or str(dt).endswith(".CUDA")


def _is_annotation(e) -> bool:
    """Kineto mirrors record_function ranges (optimizer.step, ProfilerStep#) onto the GPU timeline
    as gpu_user_annotation events; summing them would count their kernels twice. cuda_sync rows
    (waits, not work) are left out for the same reason."""
    if getattr(e, "is_user_annotation", False):
        return True
    kind = getattr(e, "activity_type", None)
    return isinstance(kind, str) and any(w in kind.lower() for w in ("annotation", "sync", "range"))


def device_events(prof) -> list:
    """The kernels, copies and memsets of a CUDA profile, in order, without annotations."""
    return [e for e in prof.events() if _is_device(e) and not _is_annotation(e)]


def _device_us(e) -> float:
    for attr in ("device_time_total", "cuda_time_total"):
        v = getattr(e, attr, None)
        if v is not None:
            try:
                return float(v)
            except (TypeError, ValueError):
                pass
    tr = e.time_range
    return float(tr.end - tr.start)


def _cpu_rows(prof) -> list[tuple[str, str, float]]:
    """(name, category, self CPU microseconds) for every CPU op, optimizer context applied."""
    DeviceType = _device_types()
    rows = []
    for e in prof.events():
        if getattr(e, "device_type", DeviceType.CPU) != DeviceType.CPU or getattr(e, "is_async", False):
            continue
        if CPU_IGNORED.match(e.name):
            continue
        us = float(e.self_cpu_time_total)
        if us <= 0:
            continue
        cat = categorise(e.name)
        parent = getattr(e, "cpu_parent", None)
        while cat != "optimizer" and parent is not None:
            if categorise(parent.name) == "optimizer":
                cat = "optimizer"
            parent = getattr(parent, "cpu_parent", None)
        rows.append((e.name, cat, us))
    return rows


def _cuda_rows(prof) -> list[tuple[str, str, float]]:
    return [(e.name, categorise(e.name), _device_us(e)) for e in device_events(prof)]


def summarise(rows, steps: int, top: int, source: str) -> dict:
    """Per-step totals by category and the `top` largest (name, category) entries."""
    cats = {c: 0.0 for c in CATEGORIES}
    by_name: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for name, cat, us in rows:
        cats[cat] += us
        by_name[(name, cat)][0] += us
        by_name[(name, cat)][1] += 1

    def per_step(us: float) -> float:  # microseconds over all profiled steps -> ms per step
        return us / 1e3 / steps

    busy = per_step(sum(cats.values()))
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    return {"source": source, "steps": steps, "busy_ms": busy,
            "categories": {c: per_step(v) for c, v in cats.items()},
            "top": [{"name": name, "category": cat, "ms": per_step(us), "calls": n / steps,
                     "share": per_step(us) / busy if busy > 0 else 0.0}
                    for (name, cat), (us, n) in ranked]}


def profile_steps(step, dev: str, steps: int = 1, top: int = 12) -> dict:
    """Run `step()` once to warm up, then `steps` times under torch.profiler, and say where the
    time went, per step."""
    from torch.profiler import ProfilerActivity, profile

    from .step import synchronize  # here: this module also serves the report, which needs no torch

    if steps < 1:
        raise ValueError("steps must be >= 1")
    step()
    synchronize(dev)  # the warm-up's kernels must finish before the trace starts, or they land in it
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        synchronize(dev)
    if dev == "cuda":
        return summarise(_cuda_rows(prof), steps, top, "CUDA kernels (torch.profiler)")
    return summarise(_cpu_rows(prof), steps, top, "CPU operators, self time (torch.profiler)")


def with_current_rules(profile: dict) -> dict:
    """A recorded profile with its top kernels re-read by today's RULES: each top kernel whose
    category changed moves its time between the category totals. (Kernels outside the top list
    keep the category they were recorded with.) Lets a report rendered later use corrected rules
    without measuring again."""
    out = {**profile, "categories": dict(profile["categories"]), "top": [dict(k) for k in profile["top"]]}
    for k in out["top"]:
        now = categorise(k["name"])
        if now != k["category"]:
            out["categories"][k["category"]] -= k["ms"]
            out["categories"][now] = out["categories"].get(now, 0.0) + k["ms"]
            k["category"] = now
    return out


def current(rec: dict) -> dict:
    """A result record whose kernel profile (if any) is read by today's RULES."""
    return {**rec, "kernel_profile": with_current_rules(rec["kernel_profile"])} if rec.get("kernel_profile") else rec
