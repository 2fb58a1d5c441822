"""The lm_head GEMM sweep read for alignment: its timed points at multiples of a width against the other multiples
of 8, a pass's first kernel named short enough for a sentence, and the figures the vocab chapter states
(width_figures). The vocab chapter draws them; the claims on
padding and fallback kernels (lib/results/claim_kinds.py) are judged on them."""

from __future__ import annotations

import re

import numpy as np


def alignment_groups(rec: dict | None, dtype: str, multiple: int = 128) -> tuple[list[dict], list[dict]]:
    """The sweep's timed `dtype` points at multiples of `multiple`, and at the other multiples of 8.
    A width that is not a multiple of 8 (GPT-2's 50257) is in neither: it runs other kernels
    altogether, and counting it among "the others" would credit `multiple` with what 8 already buys."""
    pts = [p for p in (rec or {}).get("points", []) if p["dtype"] == dtype and p.get("total_ms")]
    return [p for p in pts if p["n"] % multiple == 0], [p for p in pts if p["n"] % 8 == 0 and p["n"] % multiple]


def kernel_name(names) -> str:
    """The first kernel of a pass, short enough for a sentence: a CUTLASS kernel by its template
    argument (`void cutlass::Kernel2<NAME>(NAME::Params)`), which says its alignment (align1, align8)."""
    if not names:
        return "none recorded"
    name = re.sub(r"^void \w+::\w+<(\w+)>\(.*\)$", r"\1", names[0])
    return name if len(name) <= 60 else name[:57] + "…"


def width_figures(rec: dict, dtype: str, real: int, padded: int) -> dict | None:
    """The `dtype` sweep's figures for the vocab chapter: the multiples of 128 (their count, median ms, and whether
    that is faster or slower than every other multiple of 8, or None: inside their range) against the other
    multiples of 8 (their ms and median), the real and the padded width's ms, and the kernels each of the two ran
    ({"fwd": [...], "bwd": [...]} or None); None where a width or a group has no timed point."""
    pts = {p["n"]: p for p in rec["points"] if p["dtype"] == dtype and p.get("total_ms")}
    aligned, other = alignment_groups(rec, dtype)
    if real not in pts or padded not in pts or not aligned or not other:
        return None
    ms = [p["total_ms"] for p in other]
    m128 = np.median([p["total_ms"] for p in aligned])
    kernels = rec.get("kernels", {}).get(dtype, {})
    return {
        "aligned": len(aligned),
        "m128": m128,
        # "about as fast" (None): the multiples of 128 (median) inside the range of the other multiples of 8
        "128_is": None if min(ms) <= m128 <= max(ms) else "faster" if m128 < min(ms) else "slower",
        "other": ms,
        "m8": np.median(ms),
        "real_ms": pts[real]["total_ms"],
        "padded_ms": pts[padded]["total_ms"],
        "real_kernels": kernels.get(str(real)),
        "padded_kernels": kernels.get(str(padded)),
    }
