"""Section 3's long quality tests, laid out from decisions.json (decisions.long_verdicts and whole_stack_long): each
test's verdict in time to the same loss with what it rests on (seeds, horizon, the paired held-out difference, the
steps that loss cost is worth on the reference's own curve, the speed-up it is set against), then the paired spread
at every point the runs measured, which is how the horizon's rule was checked rather than assumed."""

from __future__ import annotations

import html

from lib.core import long_corpus, stages
from lib.report import formats as fmt
from lib.report.evidence_view import table
from lib.report.loader import Report
from lib.results import time_to_loss


def verdicts(decided: dict) -> list[dict]:
    """The long verdicts a report holds: each lever's against its own reference, then the recipe's whole stack."""
    out = [row["long"] for row in decided["levers"] if row.get("long")]
    whole = (decided.get("recipe") or {}).get("long")
    return out + ([whole] if whole else [])


def _title(key: str) -> str:
    return html.escape(stages.get(key).title)


def _test(v: dict, decided: dict) -> str:
    """What a test set against what: the recipe's whole stack is named as the recipe, not as its last lever."""
    whole = v is (decided.get("recipe") or {}).get("long")
    return ("the whole recipe, " if whole else "") + f"{_title(v['lever'])}"


def _bounds(lo: float, hi: float, f) -> str:
    return f"<br><span class='note'>[{f(lo)}, {f(hi)}]</span>"


def table_html(rep: Report) -> str:
    """One row per long test: what it set against what, how far it trained, and its verdict in time to the same loss;
    then the paired spread (sd of the lever-minus-reference held-out difference over seeds) at each point."""
    vs = verdicts(rep.decided)
    if not vs:
        return ""
    rows = []
    for v in vs:
        label, colour = fmt.DECISIONS[v["decision"]]
        net, extra = v["net_worth_interval"], [fmt.count(x, 1, "+") for x in v["extra_steps_interval"]]
        passes = f", seen {fmt.times(v['passes'], 1)}" if v.get("passes") else ""
        decide = f"<br><span class='note'>~{s} seeds would decide</span>" if (s := v.get("seeds_to_decide")) else ""
        row = next((r for r in rep.decided["levers"] if r.get("long") is v), None)
        if row and row["decision"] != v["decision"]:  # decided by more than this test: page 1's word, with its reason
            decide += (
                f"<br><span class='note'>page 1: {html.escape(row['decision'])}, {html.escape(row['reason'])}</span>"
            )
        rows.append(
            {
                "lever vs reference": f"{_test(v, rep.decided)}<br><span class='note'>vs {_title(v['reference'])}</span>",
                "seeds": v["n"],
                "horizon": f"{v['horizon_step']} steps at B={v['batch']}<br><span class='note'>"
                f"{fmt.tokens(v['horizon_tokens'])} tokens{passes}</span>",
                "held-out difference (nats) [95 %]": fmt.nats(v["mean_diff"]) + _bounds(*v["diff_interval"], fmt.nats),
                "extra steps to its loss": fmt.count(v["extra_steps"], 1, "+") + _bounds(*extra, str),
                "speed-up": fmt.times(v["speedup"], 3),
                "speed to the same loss": fmt.times(1 + v["net_worth"], 3)
                + _bounds(1 + net[0], 1 + net[1], lambda x: fmt.times(x, 3)),
                "decision": f"<strong style='color:{colour}'>{label}</strong>{decide}",
            }
        )
    spread = [  # a test whose runs measured other steps leaves the others' columns blank
        {"test \\ step": f"{_test(v, rep.decided)} vs {_title(v['reference'])}"}
        | {str(p["step"]): fmt.loss(p["sd"]) for p in v["spread"]}
        for v in vs
    ]
    return (
        "<h3>In time to the same loss: the long test</h3>"
        + table(rows)
        + "<p class='note'>The paired spread: the standard deviation over seeds of the held-out difference, "
        "in nats, at each step the runs measured.</p>" + table(spread)
    )


def method_md(rep: Report) -> str:
    """The long test's method bullet, where the report holds a long verdict: its corpus, horizon rule, held-out text,
    pairing, and how a loss cost becomes time to the same loss and a decision."""
    vs = verdicts(rep.decided)
    if not vs:
        return ""
    held = min((v["held_out_tokens"] for v in vs if v.get("held_out_tokens")), default=None)
    return f"""* **Long test** (section 3): lever and reference, paired by seed (same weights and batches), train on
  {_corpus()} for as many steps as see that text at most {fmt.setting(time_to_loss.MAX_PASSES)} times (at least
  {time_to_loss.MIN_STEPS}: past the early transient); held-out loss{f" on {fmt.tokens(held)} tokens" if held else ""} never
  trained on. The loss cost (mean paired difference, {fmt.pct(vs[0]["confidence"], 0)} t interval) becomes extra steps on
  the reference's curve; speed to the same loss is the speed-up over them: adopt where its lower bound clears the
  noise floor, skip where its upper bound falls short by as much, else not yet (its seeds to decide: at
  {fmt.pct(time_to_loss.POWER, 0)} power).
"""


def _corpus() -> str:
    """The corpus the long test reads, by the packages its code pins (lib/core/long_corpus.py)."""
    return f"documentation and dictionaries from {len(long_corpus.SOURCES)} pinned Debian packages"
