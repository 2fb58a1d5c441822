"""Number formats and status labels, one home for each: every view writes a figure through these, so a figure reads
the same wherever it stands (GiB, ×, %, tokens/s, hours, nats) and a decision's label is spelt once."""

from __future__ import annotations

import pandas as pd

from lib.results.claim_judge import signed_pct  # noqa: F401 (its one home; the views import it from here)

GiB = 2**30
# The label and the colour of each lever decision (lib/results/decisions.py) on page 1 and in its chart.
DECISIONS = {
    "adopt": ("adopt", "#1b7f3b"),
    "neutral": ("neutral", "#6b6b6b"),
    "not yet": ("not yet", "#b26b00"),
    "skip": ("skip", "#a4262c"),
    "not applicable": ("n/a", "#6b6b6b"),
    "not measured": ("not measured", "#6b6b6b"),
}


def gib(v) -> str:
    return "n/a" if v is None or pd.isna(v) else f"{v / GiB:.2f}"


def times(v, digits: int = 2) -> str:
    return "" if v is None or pd.isna(v) else f"{v:.{digits}f}×"


def pct(v, digits=1) -> str:
    return "n/a" if v is None or pd.isna(v) else f"{v * 100:.{digits}f} %"


def tok(v) -> str:
    return "" if v is None or pd.isna(v) else f"{v:,.0f}"


def span(values, fmt="{:.2f}×") -> str:
    values = list(values)
    if not values:
        return "n/a"
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def nats(x: float | None) -> str:
    """A loss difference in nats, signed; one that rounds to zero reads 0.0000, never -0.0000."""
    if x is None:
        return "n/a"
    text = f"{x:+.4f}"
    return "0.0000" if text[1:] == "0.0000" else text


def tokens(n: float) -> str:
    """A token count in words a reader scans: 2.8M, 10B."""
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def hours(h: float) -> str:
    return f"{h:.1f} h" if h < 48 else f"{h / 24:.1f} days"


def money(x: float) -> str:
    """Dollars: cents where they matter to the figure (under $100), whole dollars beyond."""
    return f"${x:,.2f}" if x < 100 else f"${x:,.0f}"


GPT2_BATCH_TOKENS = 524_288  # GPT-2's batch: 512 sequences of 1,024 tokens


def global_batch(tokens: int) -> str:
    """The global batch a recipe reaches, named for what it is: GPT-2's where it is GPT-2's, else the profile's own
    (the CPU default's tiny model trains a 512-token one)."""
    if tokens == GPT2_BATCH_TOKENS:
        return f"GPT-2's {tokens:,}-token batch"
    return f"this profile's {tokens:,}-token global batch"
