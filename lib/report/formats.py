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
# A ratio judged against the spread it must clear (comparison.compute's `within`): the word a cell states.
NOISE = {True: "within noise", False: "beyond noise"}


def gib(v, digits=2, sign="") -> str:
    """Bytes in GiB, a peak or (sign="+") a change: 12.34; n/a where there is none."""
    return "n/a" if v is None or pd.isna(v) else f"{v / GiB:{sign}.{digits}f}"


def times(v, digits: int = 2, unit="×") -> str:
    """A speed ratio or another multiple: 1.23× (unit="": a range's ends, passes, a critical value in errors)."""
    return "" if v is None or pd.isna(v) else f"{v:.{digits}f}{unit}"


def pct(v, digits=1, unit=" %", sign="") -> str:
    """A share, rate or (sign="+") change in percent: 12.3 %; digits=None writes a configured one as set: 5 %."""
    return "n/a" if v is None or pd.isna(v) else f"{v * 100:{sign}{'g' if digits is None else f'.{digits}f'}}{unit}"


def tok(v) -> str:
    """Tokens per second, whole: 1,234,567; empty where there is none."""
    return "" if v is None or pd.isna(v) else f"{v:,.0f}"


def count(n, digits=0, sign="") -> str:
    """A count (tokens, sequences, calls, steps; digits for a fractional one, 7.50 micro-steps): 524,288."""
    return f"{n:{sign},.{digits}f}"


def ms(v, digits=1) -> str:
    """A time in milliseconds (a step, a kernel; digits=None: 2 places, 2 significant digits under 0.1 ms): 12.3."""
    if v is None or pd.isna(v):
        return "n/a"
    return f"{v:{f'.{digits}f' if digits is not None else '.2f' if v >= 0.1 else '.2g'}}"


def tflops(v) -> str:
    """Achieved TFLOP/s, whole: 412."""
    return f"{v:.0f}"


def duration(v, digits=0) -> str:
    """A duration in the unit written beside it (seconds, minutes of measuring or of GPU time): 1,234."""
    return f"{v:,.{digits}f}"


def gpu_hours(h, digits=2) -> str:
    """GPU-hours (what deciding a lever saves; a token budget's to one place): 0.38."""
    return f"{h:.{digits}f}"


def reading(v, digits=0) -> str:
    """A device reading (power W, clock MHz, temperature °C, energy mJ or Wh): 1,980."""
    return f"{v:,.{digits}f}"


def setting(v) -> str:
    """A configured figure (a tolerance, a margin, a price, a datasheet peak) as the params write it: 0.02."""
    return f"{v:g}"


def span(values) -> str:
    """A speed ratio's range: 1.20×–1.35×, one figure where both ends read the same; n/a where there is none."""
    lo, hi = (times(min(v)), times(max(v))) if (v := list(values)) else ("n/a", "n/a")
    return lo if lo == hi else f"{lo}–{hi}"


def loss(v, digits=3, sign="") -> str:
    """A loss in nats (a final or held-out loss, a spread, a gap; sign="+": a difference as the matrix prints it)."""
    return f"{v:{sign}.{digits}f}"


def nats(x: float | None, digits: int | None = 4) -> str:
    """A loss difference in nats, signed; zero reads 0.0000, never -0.0000 (digits=None: a tiny one reads +3.0e-05)."""
    if x is None or (digits is None and 0 < abs(x) < 5e-5):
        return "n/a" if x is None else f"{x:+.1e}"
    text = f"{x:+.{4 if digits is None else digits}f}"
    return text[1:] if float(text) == 0 else text


def params(n) -> str:
    """A model's parameter count: 1.56B, 124M, 3.42M; empty where not counted."""
    return "" if n is None else f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e7 else f"{n / 1e6:.2f}M"


def tokens(n: float) -> str:
    """A token count in words a reader scans: 2.8M, 10B."""
    return next((f"{n / div:.3g}{unit}" for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)) if n >= div), f"{n:.0f}")


def hours(h: float) -> str:
    """Wall-clock hours, in days from two days on: 5.2 h, 3.1 days."""
    return f"{h:.1f} h" if h < 48 else f"{h / 24:.1f} days"


def money(x: float, digits: int | None = None) -> str:
    """Dollars: cents where they matter to the figure (under $100), whole dollars beyond; a unit price to `digits`."""
    return f"${x:,.{(2 if x < 100 else 0) if digits is None else digits}f}"


GPT2_BATCH_TOKENS = 524_288  # GPT-2's batch: 512 sequences of 1,024 tokens


def global_batch(tokens: int) -> str:
    """The global batch a recipe reaches, named for what it is: GPT-2's where it is GPT-2's, else the profile's own
    (the CPU default's tiny model trains a 512-token one)."""
    if tokens == GPT2_BATCH_TOKENS:
        return f"GPT-2's {tokens:,}-token batch"
    return f"this profile's {tokens:,}-token global batch"
