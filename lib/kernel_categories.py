"""The categories a kernel's time is counted in (GEMM, attention, cross-entropy, norm/elementwise,
optimizer, other), by kernel name alone. Shared by the measuring side (lib/kernel_profile.py sums a
profiled step into them) and the report, which re-reads recorded profiles with today's rules."""
from __future__ import annotations

import re

CATEGORIES = ("GEMM", "attention", "cross-entropy", "norm/elementwise", "optimizer", "other")

# Checked in this order; the first match wins. Order matters: a log-softmax is cross-entropy
# although it contains "softmax", a fused SDPA kernel is attention although it contains "mma",
# the optimizer's multi_tensor_apply is not "mul", and a GEMM's "splitKreduce" is not a reduction.
RULES: list[tuple[str, re.Pattern]] = [(cat, re.compile(rx, re.IGNORECASE)) for cat, rx in (
    # _cce_: cut-cross-entropy's fused lm_head + loss kernels (its GEMM is inside them)
    ("cross-entropy", r"log_?softmax|nll_?loss|cross_?entropy|^_cce_"),
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

def categorise(name: str) -> str:
    for cat, rx in RULES:
        if rx.search(name):
            return cat
    return "other"


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
