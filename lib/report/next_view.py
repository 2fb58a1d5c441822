"""Page 1's Next: the next experiment as decisions.json's `next` names it (lib/results/next_experiment.py), in
words: the lever, the test that decides it and its command, what it costs and what it would pay."""

from __future__ import annotations

import html

from lib.report import formats as fmt
from lib.report.loader import Report


def next_text(rep: Report) -> str:
    """The next experiment as next_experiment.next_experiment chose it: the lever, what it would add, the command that
    decides it (the decisions' own); then the faster levers it passed over, whose test no stated number of seeds would
    decide."""
    nxt, looks = rep.decided["next"], rep.params.evidence.parity_looks
    over = [
        f"{html.escape(r['title'])} ({fmt.times(r['over_recipe']['ratio'])}) stays not yet: at its seeds' spread after "
        f"{r['seeds_run']} seeds, more than {r['seeds_beyond']} would be needed to decide it"
        for r in nxt["passed_over"]
    ]
    if nxt["stage"] is None:
        return "none that seeds can decide: " + "; ".join(over) + "."
    seeds, command = nxt["seeds"], f"<code>{html.escape(nxt['command'])}</code>"
    title = html.escape(nxt["title"])
    if nxt["kind"] == "sitting":  # its long test says it gets there sooner: a sitting times the recipe with it
        v = nxt["long"]
        lo, hi = v["net_worth_interval"]
        minutes = (nxt["to_decide"] or {}).get("gpu_minutes")
        return (
            f"time the recipe with {title}, {fmt.times(1 + v['net_worth'], 3)} as fast to the same loss: "
            f"{command} chooses it"
            + (f" (~{fmt.duration(minutes)} GPU-min{test_cost(nxt)})" if minutes else "")
            + payoff_text(nxt, "if it holds as trained")
            + "".join(f". {o}" for o in over)
            + "."
        )
    if nxt["kind"] == "long pilot":  # the short test would need more seeds than a long test: its first seeds
        minutes = (nxt["to_decide"] or {}).get("gpu_minutes")
        return (
            f"decide {title} by the long test, not the short one's "
            + (f"~{nxt['short_seeds']} seeds: " if nxt.get("short_seeds") else "seeds (out of reach): ")
            + f"{seeds} seeds of ~{fmt.tokens((nxt['to_decide'] or {}).get('tokens_a_run') or 0)} tokens"
            + (f" (~{fmt.duration(minutes)} GPU-min{test_cost(nxt)})" if minutes else "")
            + f": {command}"
            + payoff_text(nxt, "if it holds")
            + "".join(f". {o}" for o in over)
            + "."
        )
    if nxt["kind"] == "long test":
        said = f"its long test is undecided after {nxt['seeds_run']} seeds; ~{seeds} seeds would decide it: {command}"
    elif nxt["kind"] == "untested":
        said = f"not tested in this report: {command} or <code>make report GPU={rep.params.name} DEPTH=full</code>"
    else:
        minutes = (nxt["to_decide"] or {}).get("gpu_minutes")
        said = f"undecided after {nxt['seeds_run']} seeds" + (
            f"; ~{seeds} seeds"
            + (f" (~{fmt.duration(minutes)} GPU-min{test_cost(nxt)})" if minutes else "")
            + f" would decide it {fmt.pct(rep.params.evidence.parity_power, 0)} of the time"  # the power it is sized by
            if seeds
            else ""
        )
        said += f": {command}"
    said += payoff_text(nxt, "if it holds")
    # with --seeds the command states its runs; without, the profile's looks
    runs = (
        ""
        if seeds or nxt["kind"] == "long test"
        else f" (looks at {', '.join(map(str, looks))} seeds)"
        if looks
        else f" ({rep.params.evidence.parity_seeds} seeds)"
    )
    return (
        f"{'test' if nxt['kind'] == 'untested' else 'decide'} {title}"  # its worth: its row's, said once
        + (f" (with {html.escape(', '.join(nxt['with']))}, also not yet)" if nxt.get("with") else "")
        + f"; {said}{runs}"
        + "".join(f". {o}" for o in over)
        + "."
    )


def payoff_text(nxt: dict, condition: str) -> str:
    """'; if it holds, it saves 0.38 GPU-hours ($1.32) per 10B tokens, repaying the test after 16.7B': what deciding
    the lever would pay, in the recipe's own GPU-hours on one GPU, where the decisions priced it."""
    pay = nxt.get("payoff")
    if not pay:
        return ""
    return (
        f"; {condition}, it saves {fmt.gpu_hours(pay['gpu_hours_saved'])} GPU-hours"
        + (f" ({fmt.money(pay['cost_saved'])})" if pay.get("cost_saved") else "")
        + f" per {fmt.tokens(pay['tokens'])} tokens"
        + (f", repaying the test after {fmt.tokens(pay['break_even_tokens'])}" if pay["break_even_tokens"] else "")
    )


def test_cost(nxt: dict) -> str:
    """', $1.91': the next test's cost at the stated price, where both are known."""
    cost = (nxt.get("payoff") or {}).get("test_cost")
    return f", {fmt.money(cost)}" if cost else ""
