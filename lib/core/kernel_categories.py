"""The categories a kernel's time is counted in (GEMM, attention, cross-entropy, norm/elementwise,
optimizer, other), by the op that launched it where that op names one, else by the kernel's own
name. Shared by the measuring side (lib/measure/kernel_profile.py records every kernel of a profiled step
with its op) and the report, which classifies the recorded kernels again with today's rules; and a long kernel
name shortened for a table or a sentence (kernel_label) without cutting a token."""

from __future__ import annotations

import re

CATEGORIES = ("GEMM", "attention", "cross-entropy", "norm/elementwise", "optimizer", "other")

# Checked in this order; the first match wins. Order matters: a log-softmax is cross-entropy
# although it contains "softmax", a fused SDPA kernel is attention although it contains "mma",
# the optimizer's multi_tensor_apply is not "mul", and a GEMM's "splitKreduce" is not a reduction.
RULES: list[tuple[str, re.Pattern]] = [
    (cat, re.compile(rx, re.IGNORECASE))
    for cat, rx in (
        # _cce_: cut-cross-entropy's fused lm_head + loss kernels (its GEMM is inside them)
        ("cross-entropy", r"log_?softmax|nll_?loss|cross_?entropy|^_cce_"),
        ("optimizer", r"adam|multi_tensor_apply|foreach|lpnorm|clip_grad|optimizer\."),
        # dot_do_o / convert_dq: the helper kernels of cuDNN's SDPA backward (seen on an H100)
        ("attention", r"flash|fmha|attention|sdpa|cudnn.*mha|softmax|masked_fill|dot_do_o|convert_dq"),
        # Inductor's pointwise/reduction kernels are never GEMMs, whatever op they were fused around
        # (FP8's scale-and-cast prologue is named "triton_poi_fused__scaled_mm_..."); its templates are.
        ("norm/elementwise", r"^triton_(poi|red|per)_"),
        (
            "GEMM",
            r"gemm|gemv|cutlass|xmma|nvjet|cublas|\bsm\d+_\w*mma|split_?k|scaled_mm|triton_tem_"
            r"|aten::(mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation)\b",
        ),
        # gamma_beta: LayerNorm's weight/bias gradient; cub radix sort, unique_by_key, per_segment,
        # compute_grad_weight: the sort-and-sum of the embedding backward on CUDA
        (
            "norm/elementwise",
            r"layer_?norm|gamma_?beta|elementwise|vectorized|reduce|triton_|gelu|tanh"
            r"|add|mul|div|sqrt|lerp|copy|clone|fill|cat|index|embedding|dropout|unrolled"
            r"|norm|cub::|radix_?sort|unique_by_key|per_segment|compute_grad_weight"
            r"|sum_and_scatter",
        ),
    )
]


def categorise(name: str) -> str:
    for cat, rx in RULES:
        if rx.search(name):
            return cat
    return "other"


def classify(name: str, op: str | None = None) -> str:
    """A kernel's category: that of the op that launched it where the op names one (a cuDNN
    attention's memset, a GEMM's split-K reduce), else that of its own name. On the CPU path the
    row is the op itself and `op` is the optimizer step it ran inside, if any."""
    by_op = categorise(op) if op else "other"
    return by_op if by_op != "other" else categorise(name)


def with_current_rules(profile: dict) -> dict:
    """A recorded profile read by today's RULES: every kernel re-classified (`classify`, from its
    name and launching op), the category totals summed again from them, and `kernels` sorted by
    time with each one's share of busy kernel time. A record from before every kernel was stored
    holds only its top kernels: those are re-classified, and the rest of its time
    (`recorded_rules_ms`) keeps the categories it was recorded with."""
    listed = profile.get("kernels")
    cats = {c: 0.0 for c in CATEGORIES}
    rest = 0.0
    if listed is None:  # an older record: its top kernels, and category totals that include them
        listed = profile.get("top", [])
        for cat, ms in profile["categories"].items():
            cats[cat] += ms
        for k in listed:
            cats[k["category"]] -= k["ms"]
        rest = sum(cats.values())
        cats = {c: max(v, 0.0) for c, v in cats.items()}  # float residue of the subtraction
    kernels = sorted(({**k, "category": classify(k["name"], k.get("op"))} for k in listed), key=lambda k: -k["ms"])
    for k in kernels:
        cats[k["category"]] += k["ms"]
    busy = sum(cats.values())
    for k in kernels:
        k["share"] = k["ms"] / busy if busy > 0 else 0.0
    out = {key: v for key, v in profile.items() if key != "top"}
    return {**out, "busy_ms": busy, "categories": cats, "kernels": kernels, "recorded_rules_ms": max(rest, 0.0)}


def shares(profile: dict) -> dict:
    """Each category's share of the profile's busy kernel time (they sum to 1)."""
    busy = sum(profile["categories"].values())
    return {c: (profile["categories"].get(c, 0.0) / busy if busy > 0 else 0.0) for c in CATEGORIES}


def percents(fractions: dict) -> dict:
    """Whole percentages that sum to exactly 100 (largest remainder), so a row of rounded shares
    never reads 99 % or 101 %."""
    raw = {k: v * 100 for k, v in fractions.items()}
    out = {k: int(v) for k, v in raw.items()}
    if sum(raw.values()) > 0:
        for k in sorted(raw, key=lambda k: out[k] - raw[k])[: 100 - sum(out.values())]:
            out[k] += 1
    return out


def current(rec: dict) -> dict:
    """A result record whose kernel profile (if any) is read by today's RULES."""
    return {**rec, "kernel_profile": with_current_rules(rec["kernel_profile"])} if rec.get("kernel_profile") else rec


ANON = "\x00"  # C++'s "(anonymous namespace)" is part of a name, not a parameter list


def _elide(name: str, keep: int) -> str:
    """`name` with its top-level parameter lists shown as (…), and the brackets nested deeper than
    `keep` as <…> / (…)."""
    out, shown = [], []  # shown: for each open bracket, whether its content is
    for ch in name:
        if ch in "<(":
            if all(shown):
                out.append(ch if (ch == "<" or shown) and len(shown) < keep else ch + "…")
            shown.append((ch == "<" or bool(shown)) and len(shown) < keep)
        elif ch in ">)" and shown:
            shown.pop()
            if all(shown):
                out.append(ch)
        elif all(shown):
            out.append(ch)
    return "".join(out)


def kernel_label(name: str, width: int = 140) -> str:
    """A kernel name a table can show: whole when short, else its parameter lists, then its
    template arguments from the innermost out, shown as (…) and <…> until it fits (or only the
    outermost names are left): never cut inside a token."""
    if len(name) <= width:
        return name
    base = name.removeprefix("void ").replace("(anonymous namespace)", ANON)
    for keep in range(base.count("<") + base.count("("), -1, -1):
        label = _elide(base, keep)
        if len(label) <= width:
            break
    return label.replace(ANON, "(anonymous namespace)")
