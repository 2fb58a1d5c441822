"""Where one training step's time goes: every kernel of a profiled step, summed into a few
categories a reader recognises (GEMM, attention, cross-entropy, norm/elementwise, optimizer).

On CUDA the source is the device time of the kernels torch.profiler recorded (CUPTI), so the
figures are what the GPU spent, not what the CPU spent launching. Kernels on several streams may
overlap, so busy_ms can exceed the step's wall time; with one stream (the default) it is the
GPU's busy time. Elsewhere there are no device kernels to read: the source is each operator's
*self* CPU time, so an op and the ops it calls are never counted twice.

Every kernel is recorded (name, the aten op that launched it where the profiler links one, time and
calls per step), so a report can classify all of them again with later rules
(kernel_categories.with_current_rules). A kernel counts in the category of its launching op where
that op names one, else in that of its own name (`classify`). On the CPU path the rows are the ops
themselves, and their `op` is the optimizer step they ran inside: the CPU AdamW runs plain
`aten::mul_`, `aten::lerp_`... one tensor at a time, which by name would be elementwise work; on
CUDA the optimizer's kernels carry their own names (multi_tensor_apply, fused Adam)."""

from __future__ import annotations

import re
from collections import defaultdict

from lib.core.kernel_categories import CATEGORIES, categorise, classify

# Profiler bookkeeping rows on the CPU path: not work the step did.
CPU_IGNORED = re.compile(r"^(ProfilerStep|\[memory\]|\[OutOfMemory\]|profiler::)")
# The runtime calls that put work on the GPU (cudaLaunchKernel, cuLaunchKernelEx, cudaMemsetAsync...).
LAUNCH = re.compile(r"^(cuda|cu|hip)\w*(Launch|Memset|Memcpy)")


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


def _cpu_rows(prof) -> list[tuple[str, str | None, float]]:
    """(name, the optimizer step it ran inside or None, self CPU microseconds) for every CPU op."""
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
        parent, context = getattr(e, "cpu_parent", None), None
        while parent is not None and context is None:
            context = parent.name if categorise(parent.name) == "optimizer" else None
            parent = getattr(parent, "cpu_parent", None)
        rows.append((e.name, context, us))
    return rows


def _launching_op(runtime) -> str | None:
    """The innermost aten op above a kernel's launch call (cudaLaunchKernel, cuLaunchKernelEx...),
    None where there is none (inductor's Triton kernels are launched from generated code)."""
    op = getattr(runtime, "cpu_parent", None)
    while op is not None and not op.name.startswith("aten::"):
        op = getattr(op, "cpu_parent", None)
    return op.name if op is not None else None


def _cuda_rows(prof) -> list[tuple[str, str | None, float]]:
    """(kernel name, launching aten op or None, device microseconds). A kernel shares its
    correlation id with the runtime call that launched it, whose CPU parents are the ops."""
    events = prof.events()
    DeviceType = _device_types()
    launches = {e.id: e for e in events if getattr(e, "device_type", None) == DeviceType.CPU and LAUNCH.match(e.name)}
    return [(e.name, _launching_op(launches.get(e.id)), _device_us(e)) for e in device_events(prof)]


def summarise(rows, steps: int, source: str) -> dict:
    """Per-step totals by category and every (name, op) entry, largest first."""
    cats = {c: 0.0 for c in CATEGORIES}
    by_name: dict[tuple[str, str | None], list[float]] = defaultdict(lambda: [0.0, 0])
    for name, op, us in rows:
        cats[classify(name, op)] += us
        by_name[(name, op)][0] += us
        by_name[(name, op)][1] += 1

    def per_step(us: float) -> float:  # microseconds over all profiled steps -> ms per step
        return us / 1e3 / steps

    busy = per_step(sum(cats.values()))
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][0])
    return {
        "source": source,
        "steps": steps,
        "busy_ms": busy,
        "categories": {c: per_step(v) for c, v in cats.items()},
        "kernels": [
            {
                "name": name,
                "op": op,
                "category": classify(name, op),
                "ms": per_step(us),
                "calls": n / steps,
                "share": per_step(us) / busy if busy > 0 else 0.0,
            }
            for (name, op), (us, n) in ranked
        ],
    }


def profile_steps(step, dev: str, steps: int = 1) -> dict:
    """Run `step()` once to warm up, then `steps` times under torch.profiler, and say where the
    time went, per step."""
    from torch.profiler import ProfilerActivity, profile

    from lib.train.step import (
        synchronize,  # here: this module also serves the report, which needs no torch
    )

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
        return summarise(_cuda_rows(prof), steps, "CUDA kernels (torch.profiler)")
    return summarise(_cpu_rows(prof), steps, "CPU operators, self time (torch.profiler)")
