"""The verdict words on a claim (their one home) and how a measured figure earns one (judge): against the claimed
range and the measured noise of "no change". Also how a claimed range and a measured figure are put in words
(lib/report/claims_view.py gives each word its colour and its legend)."""

from __future__ import annotations

import numpy as np
import pandas as pd

# The verdict words (their one home).
CONFIRMED = "confirmed"  # inside the claimed range
WITHIN_NOISE = "confirmed (within noise)"  # outside it by less than the measured process-to-process noise
EXCEEDED = "exceeded"  # further from "no change" than the range: a bigger speed-up or cut than claimed
FELL_SHORT = "fell short"  # the claimed direction, beyond the noise of "no change", but less than the range
CONTRADICTED = "contradicted"  # no measurable change, the opposite direction, or past a claimed "at most" (a fallback: same kernels)
UNDECIDED = (
    "undecided"  # no test could decide it: a parity test undecided, or quality seen by the divergence check only
)
NOT_APPLICABLE = "not applicable"  # the claim speaks about another chip family, backend or library
NOT_MEASURED = "not measured"  # the measured column says why (a named implementation that did not run: what ran)
# How a contradicted figure that lies within the measured noise of "no change" is worded.
NO_CHANGE = "no measurable change"
RATIOS = ("speedup", "kernels", "alignment", "misalignment")  # judged against 1 ("no change"); the others against 0
NOISY = ("speedup", "time_change", "alignment")  # the metrics whose noise is measured (a relative range)


def metric_text(metric: str, v: float) -> str:
    return f"{v:.2f}×" if metric in RATIOS else f"{v * 100:+.1f} %"


def signed_pct(x: float, digits: int = 1) -> str:
    """A signed percentage (one decimal unless told); a value that rounds to zero reads 0.0 %, never -0.0 %. Its one
    home: a claim's figure is worded by it (a lever's leave-one-out worth), and every view of lib/report."""
    text = f"{x * 100:+.{digits}f} %"
    return text[1:] if float(text[1:-2]) == 0 else text


def range_text(metric: str, e: dict) -> str:
    lo, hi = e.get("min"), e.get("max")
    if lo is not None and hi is not None:
        return f"{metric_text(metric, lo)} to {metric_text(metric, hi)}"
    return f"≥ {metric_text(metric, lo)}" if lo is not None else f"≤ {metric_text(metric, hi)}"


def no_change(metric: str, value: float, noise: float | None) -> bool:
    """Whether a figure lies within the measured noise (relative) of "no change"."""
    shift = 0.0 if metric in RATIOS else 1.0  # a change is a ratio minus one
    return noise is not None and metric in NOISY and abs(value + shift - 1) <= noise


def judge(metric: str, value: float, expect: dict, noise: float | None = None) -> str:
    """The verdict word for a measured figure. A claimed range lies on one side of "no change"
    (params/claims.yaml): that side is the claim's direction. `noise`: the relative noise behind the
    figure (a timing's process-to-process range). A figure within it of no change shows no
    measurable change: it contradicts any claimed change (a range that does not straddle no change);
    a figure outside the range by less than the noise is within noise. A range that straddles no change
    (a claimed "at most") is confirmed by no change, and a figure past its bound contradicts it: the claim was a
    bound, and the bound does not hold (5.56x the time against "only a few percent slower", at most 1.06x; the
    legend, EXPLAINED, says so, so the word follows it and is never shown as confirming)."""
    lo, hi = expect.get("min", -np.inf), expect.get("max", np.inf)
    neutral = 1.0 if metric in RATIOS else 0.0
    at_most = lo < neutral < hi
    if no_change(metric, value, noise) and not at_most:
        return CONTRADICTED
    if lo <= value <= hi:
        return CONFIRMED
    shift = 1 - neutral  # the noise is relative to a step time or throughput ratio
    if (
        noise is not None
        and metric in ("speedup", "time_change")
        and any(abs((value + shift) / (bound + shift) - 1) <= noise for bound in (lo, hi) if np.isfinite(bound))
    ):
        return WITHIN_NOISE
    if at_most:  # outside a range on both sides of no change: past the bound the claim set
        return CONTRADICTED
    up = np.isfinite(lo) and lo >= neutral  # a claimed increase (speed-up, more memory); else a cut
    if (value > hi) if up else (value < lo):
        return EXCEEDED
    return FELL_SHORT if ((value > neutral) if up else (value < neutral)) else CONTRADICTED


# The order in which the words rank a claim's figures where several could carry it (params/claims.yaml forms).
CONFIRMS = (CONFIRMED, WITHIN_NOISE, EXCEEDED)
RANK = {**dict.fromkeys(CONFIRMS, 0), UNDECIDED: 1, FELL_SHORT: 2, CONTRADICTED: 3}


def figure(
    text: str,
    metric: str,
    value: float,
    expect: dict,
    noise: float | None,
    what: str = "the measured noise",
    why: str = "",
    band: str | None = None,
) -> dict:
    """A measured figure as a verdict reads it: {text, value, word (judge), no_change, note}; `note` says so where
    the word is a contradiction within the noise of no change (the noise as a symmetric band unless `band` says what it
    is). Whether the claim applies to this hardware is the caller's (claims.verdict)."""
    word = judge(metric, value, expect, noise)
    still = word == CONTRADICTED and no_change(metric, value, noise)
    note = (
        f"; {NO_CHANGE}: within {what} of no change "
        f"({band if band is not None else f'±{noise * 100:.1f} %'}{': ' + why if why else ''})"
        if still
        else ""
    )
    return {"text": text, "value": value, "word": word, "note": note, "no_change": still}


def per_batch_text(metric: str, values: pd.Series) -> str:
    """A figure per batch size as one: the median, the range where they differ, the batch sizes."""
    lo, hi = metric_text(metric, values.min()), metric_text(metric, values.max())
    return (
        f"{metric_text(metric, float(np.median(values)))}{'' if lo == hi else f' ({lo} to {hi})'} "
        f"at B={', '.join(map(str, values.index))}"
    )
