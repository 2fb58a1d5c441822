"""The lm_head GEMM sweep read for alignment: its timed points at multiples of a width against the other multiples
of 8, and a pass's first kernel named short enough for a sentence. The vocab chapter draws them; the claims on
padding and fallback kernels (lib/results/claim_kinds.py) are judged on them."""

from __future__ import annotations

import re


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
