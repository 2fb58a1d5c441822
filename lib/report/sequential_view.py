"""The quality test's sequential design as the report states it (lib/results/parity.py and sequential.py decide): the
rule before any number, one test in a sentence with the horizon, seeds and bounds it speaks for, and why a test left
its lever undecided with what would decide it."""

from __future__ import annotations

import html

from lib.core import stages
from lib.core.params import Evidence
from lib.report import formats as fmt
from lib.results import parity, sequential


def horizon(ev: Evidence, seq_len: int) -> str:
    """The horizon as the params state it: tokens, and the steps they are at the test's batch."""
    tokens = ev.parity_horizon_tokens
    at = f" ({tokens // (ev.parity_batch * seq_len)} steps of B={ev.parity_batch})" if ev.parity_batch else ""
    return f"{fmt.count(tokens)} tokens a run{at}"


def rule(ev: Evidence, seq_len: int, on_gpu: bool = True) -> str:
    """The decision rule as the params state it (`on_gpu`: the horizon's reason, which a CPU check does not share)."""
    looks, alpha = tuple(ev.parity_looks), 1 - ev.parity_confidence
    c = fmt.times(sequential.critical_value(looks, alpha), 3, "")  # in standard errors
    single = fmt.times(sequential.t_quantile(ev.parity_confidence, looks[-1] - 1), unit="")
    return (
        "each lever is set against its own stack, the same configuration without that lever (the HTML's appendix A), so the "
        "difference is the lever's alone; the stage adopted is "
        "then checked once against the canonical reference, the whole stack at once. At each seed both sides train "
        f"from the same initial weights on the same data order for the horizon, {horizon(ev, seq_len)}, chosen "
        "before any number"
        + (
            " to lie past the early transient (at 21 steps of B=128 the loss is still near 6.3 and falling fast)"
            if on_gpu
            else " (on this CPU a pipeline check, not a horizon of training)"
        )
        + ", then are scored on held-out text. Seeds are added in "
        f"rounds to each look ({', '.join(map(str, looks))} paired seeds); at a look the lever **holds** when, in "
        f"held-out and in final training loss alike, the mean paired difference plus {c} standard errors lies at "
        f"or below +{fmt.setting(ev.parity_margin)} nats ({fmt.pct(ev.parity_margin, 0)} in perplexity), is **worse** "
        f"when the mean minus {c} standard errors lies above it, and goes on to the next look otherwise; after the "
        f"last look it is **undecided**. The critical value {c} (Student's t for one look at {looks[-1]} seeds: "
        f"{single}) is found by simulation so that over all the looks a lever exactly at the margin is called "
        f"holds in at most {fmt.pct(alpha, None)} of tests, and worse in at most {fmt.pct(alpha, None)} (each bound "
        "one-sided; `lib/results/sequential.py`). "
        + (
            "A test also stops undecided at a look where its mean and spread, were they to hold, would leave the "
            "bound above the margin at the last look. "
            if getattr(ev, "parity_futility_trend", False)
            else ""
        )
        + "The candidates that could change the recommendation are tested first, fastest first, until one holds; at "
        "the default depth, where the fastest does not hold, the report recommends the stack it was added to (checked "
        "against the canonical reference alone) and leaves the levers beside it to `DEPTH=full`"
    )


def _interval(i: dict) -> str:
    if i["sd"] is None:
        return f"{fmt.nats(i['mean'], None)} (one seed: no bound)"
    return f"{fmt.nats(i['mean'], None)}, bounds [{fmt.nats(i['lo'], None)}, {fmt.nats(i['hi'], None)}]"


def speaks_for(c: dict) -> str:
    """What a test speaks for: seeds, steps, tokens, passes and the reference's held-out loss at the horizon."""
    tokens = f", {fmt.count(c['tokens'])} tokens" if c.get("tokens") else ""
    passes = f", {fmt.times(c['passes'], unit='')} passes over the training text" if c.get("passes") else ""
    reached = f"; the reference's held-out loss there {fmt.loss(h, 2)}" if (h := c.get("reference_held_out")) else ""
    return f"{len(c['seeds'])} paired seeds of {c['steps']} steps{tokens}{passes}{reached}"


def why_undecided(c: dict, need: dict | None) -> str:
    """Why the test left its lever undecided, and what would decide it (`need`: parity.to_decide of the test, decided
    once: decisions.json's `to_decide`)."""
    if c["verdict"] == parity.INCOMPLETE:
        return (
            f"{c['seeds_run']} of the {c['wanted']} seeds of its next look have run both sides; the run stopped "
            "before the rest"
        )
    if len(c["seeds"]) < 2:
        return f"only {len(c['seeds'])} paired seed ran (a bound needs two)"
    i = max(c["intervals"].values(), key=lambda i: i["hi"])
    where = (
        f"stopped at {len(c['seeds'])} seeds: at this mean and spread the bound would still be "
        f"{fmt.nats(i['mean'] + c['critical_value'] * i['sd'] / c['looks'][-1] ** 0.5)} at {c['looks'][-1]}"
        if c.get("futile") == "trend"
        else f"at the last look, {len(c['seeds'])} seeds, the bound reaches {fmt.nats(i['hi'])}"
    )
    if need is None:
        return (
            f"{where}, past the margin; at its mean and spread more than {parity.MOST_SEEDS} seeds would be needed to "
            "decide it"
        )
    minutes = f", about {fmt.duration(need['gpu_minutes'])} GPU-minutes" if need.get("gpu_minutes") else ""
    return (
        f"{where}, past the margin; about {need['seeds']} fresh seeds in one look would decide it if the mean and "
        f"spread held{minutes}"
    )


def summary(c: dict, need: dict | None) -> str:
    """One test in a sentence, and the full stack's check against the canonical reference where it ran (`need`: what
    would decide it, as why_undecided reads it)."""
    lever, ref = stages.get(c["stage"]).title, stages.get(c["reference"]).title
    micro = (
        f", each side accumulating {c['micro_steps']} micro-batches of B={c['batch_size'] // c['micro_steps']}"
        if c.get("micro_steps", 1) > 1
        else ""
    )
    sd = max((i["sd"] for i in c["intervals"].values() if i["sd"] is not None), default=None)
    detect = (
        f"; the seeds' spread (the wider of the two losses') {fmt.nats(sd, None).lstrip('+')} nats, at which the test tells a true "
        f"difference of {fmt.nats(c['detectable'], None).lstrip('+')} nats from none {fmt.pct(c['power'], None)} of the time"
        if c.get("detectable") is not None and sd is not None
        else ""
    )
    word = (
        parity.HOLDS
        if c["verdict"] == parity.HOLDS
        else f"{c['verdict']}: not adopted on this test alone ({why_undecided(c, need)})"
        if c["verdict"] in (parity.UNDECIDED, parity.INCOMPLETE)
        else f"{parity.WORSE}: not adopted"
    )
    css = "ok" if c["ok"] else "bad"
    return (
        f"**Quality test**: {lever} against {ref} at B={c['batch_size']}{micro}: {speaks_for(c)}. Mean paired "
        f"difference (lever minus reference) with its bounds at {fmt.times(c['critical_value'], 3, '')} standard errors: held-out "
        f"loss {_interval(c['intervals']['held_out'])}, final training loss {_interval(c['intervals']['final'])}"
        f'{detect}. Margin +{fmt.setting(c["margin"])} nats: <span class="{css}"><b>{html.escape(word)}</b></span>.'
        + (
            canonical(c["canonical"], lever)
            if c.get("canonical")
            else f" {ref} is also the canonical reference: this test checks every lever added after it at once."
            if c["reference"] == stages.get(c["stage"]).reference
            else ""
        )
    )


def canonical(k: dict, lever: str) -> str:
    """The full stack's check against the canonical reference, in a sentence, named by its lever (the FP8
    classifier's stack is not the recipe's)."""
    css = "ok" if k["ok"] else "bad"
    word = parity.HOLDS if k["ok"] else k["verdict"]
    return (
        f" The {html.escape(lever)} configuration's whole stack against {stages.get(k['reference']).title}, "
        f"{len(k['seeds'])} paired seeds: held-out "
        f"loss {_interval(k['intervals']['held_out'])}, final training loss {_interval(k['intervals']['final'])}: "
        f'<span class="{css}"><b>{html.escape(word)}</b></span>.'
    )


def short_reason(c: dict, need: dict | None) -> str:
    """A few words: why the test did not let its lever stand, with the figure that decided it (`need`: as
    why_undecided reads it)."""
    if c["verdict"] == parity.WORSE:
        m = max(c["intervals"], key=lambda k: c["intervals"][k]["lo"])
        return f"quality test worse: {parity.METRICS[m]} {_interval(c['intervals'][m])}, margin +{fmt.setting(c['margin'])}"
    if c["verdict"] == parity.UNDECIDED:
        return f"quality test undecided: {why_undecided(c, need)}"
    k = c.get("canonical") or {}
    return f"the whole stack's check against {stages.get(k.get('reference', c['reference'])).title}: {k.get('verdict')}"
