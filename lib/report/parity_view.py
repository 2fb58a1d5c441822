"""The parity test as the report states it (lib/results/parity.py decides): the rule before any number, the
test behind the recommendation with its intervals, why a stage that failed or could not be decided is not
recommended, and every parity run the folder ever made, superseded ones included."""

from __future__ import annotations

import html

from lib.core import record, stages
from lib.core.params import Evidence
from lib.report import sequential_view
from lib.report.loader import Report, recommended
from lib.results import parity, parity_futility, sequential, stats, store

WORDS = {
    parity.HOLDS: "holds",
    parity.WORSE: "worse: not adopted",
    parity.UNDECIDED: "undecided: not adopted",
    parity.INCOMPLETE: "incomplete: decides nothing yet",
}


def checks(rep: Report) -> dict:
    return parity.checks(rep.decisions, rep.params.evidence)


def rule(ev: Evidence, seq_len: int = 1024, on_gpu: bool = True) -> str:
    """The decision rule as the params state it."""
    if getattr(ev, "parity_looks", None):
        return sequential_view.rule(ev, seq_len, on_gpu)
    return (
        f"at each of {ev.parity_seeds} seeds the lever and its reference stage train from the same initial "
        "weights on the same data order, "
        + (
            "each twice"
            if parity_futility.noise_seeds(ev) >= ev.parity_seeds
            else "and at the first of them each a second time"
            if parity_futility.noise_seeds(ev) == 1
            else f"and at the first {parity_futility.noise_seeds(ev)} of them each a second time"
        )
        + " (the repeat pairs measure the noise of the test itself: a compiled or FP8 step is not bitwise "
        "repeatable). The lever **holds** when the one-sided "
        f"{ev.parity_confidence * 100:g} % upper bound (Student's t over the seeds, never on less spread than "
        "that noise) of its mean paired difference in held-out loss and in final training loss lies at or below "
        f"+{ev.parity_margin:g} nats ({ev.parity_margin * 100:.0f} % in perplexity): it is not worse than its "
        "reference by more than the margin (non-inferiority; a lower loss does not fail it). It is **worse** when a "
        "lower bound lies above the margin; otherwise it is **undecided**. Only a lever that holds is adopted. "
        + (
            "The test stops early, undecided, only for futility: when after the repeated seeds its own noise alone "
            f"keeps all {ev.parity_seeds} seeds from detecting the margin with {ev.parity_power * 100:g} % power"
            if parity_futility.futility_pairs(ev) is None  # measured before the spread stop: the noise stop alone
            else f"It stops early, undecided, only for futility: where {ev.parity_seeds} seeds could not detect the "
            f"margin with {ev.parity_power * 100:g} % power, by the lower {ev.parity_confidence * 100:g} % bound on "
            f"the spread of its first {parity_futility.noise_seeds(ev)} seeds, or after their repeats by its own noise"
            + (
                "; and, at either point, where the mean and spread of its seeds so far, were they to hold, would "
                f"leave an upper bound above the margin with all {ev.parity_seeds} seeds"
                if getattr(ev, "parity_futility_trend", False)
                else ""
            )
            if parity_futility.noise_seeds(ev) >= parity_futility.futility_pairs(ev)
            else f"Every test runs all its seeds: fewer than {parity_futility.futility_pairs(ev)} repeat pairs measure its "
            "noise too loosely to stop it early"
        )
    )


def _nats(x: float) -> str:
    return f"{round(x, 4) + 0.0:+.4f}"  # + 0.0: never "-0.0000"


def _interval(i: dict) -> str:
    return (
        f"{_nats(i['mean'])} nats ({_nats(i['lo'])} to {_nats(i['hi'])})"
        if i["n"] > 1
        else f"{_nats(i['mean'])} nats (one seed: no interval)"
    )


def _futile_reach(c: dict) -> float:
    """What a test stopped for futility could have detected at all its seeds, given what stopped it: its own noise,
    or the lower bound on its seeds' spread."""
    sd = c["spread_floor"] if c.get("futile") == "spread" else c["noise_sd"]
    return sequential.detectable(sd, c["wanted"], c["confidence"], c["power"])


def _futile_trend(c: dict) -> str:
    """A test stopped by its trend, in words: the loss whose projected bound crossed the margin, with its figures."""
    m, i = max(
        c["intervals"].items(), key=lambda kv: parity_futility.projected_bound(kv[1], c["wanted"], c["confidence"])
    )
    return (
        f"its first {len(c['seeds'])} seeds' paired differences in {parity.METRICS[m]} ({_nats(i['mean'])} nats on "
        f"average, spread {i['sd']:.4f}) would, were they to hold, leave the upper bound at "
        f"{_nats(parity_futility.projected_bound(i, c['wanted'], c['confidence']))} with all {c['wanted']} seeds, above the "
        f"+{c['margin']:g} margin"
    )


def _futile_cause(c: dict) -> str:
    """What stopped a futile test, with its figure."""
    if c.get("futile") == "spread":
        return (
            f"the spread of the paired differences of its first {len(c['seeds'])} seeds (at least "
            f"{c['spread_floor']:.4f} nats, a one-sided {c['confidence'] * 100:g} % lower bound)"
        )
    return f"the test's own noise ({c['noise_sd']:.4f} nats per paired difference)"


def why_undecided(c: dict) -> str:
    if c.get("design") == "sequential":
        return sequential_view.why_undecided(c)
    if c["verdict"] == parity.INCOMPLETE:
        return (
            f"{c['seeds_run']} of the {c['wanted']} seeds the rule asks for have run both stages "
            + ("twice" if c.get("noise_seeds", c["wanted"]) >= c["wanted"] else "as often as it asks")
            + "; "
            "the run stopped before the rest"
        )
    if c.get("futile") == "trend" and c["seeds_run"] < c["wanted"]:
        return f"stopped after {_stopped_after(c)}: {_futile_trend(c)}"
    if c.get("futile") and c["seeds_run"] < c["wanted"]:
        return (
            f"stopped after {_stopped_after(c)}: {_futile_cause(c)} would let all {c['wanted']} seeds detect no "
            f"less than {_futile_reach(c):.4f} nats, more than the +{c['margin']:g} margin, so the rest could not "
            "decide it"
        )
    if len(c["seeds"]) < 2:
        return f"only {len(c['seeds'])} paired seed ran (a bound needs two; the rule asks for {c['wanted']})"
    more = parity.seeds_needed(c)
    return "an upper bound reaches past the margin" + (
        f"; about {more} seeds would settle it if the mean and spread held" if more else ""
    )


def _stopped_after(c: dict) -> str:
    return (
        f"its {c['seeds_run']} noise seeds"
        if c.get("futile") == "noise" or c["seeds_run"]
        else f"the first runs of {len(c['seeds'])} seeds"
    )


def _earlier_runs(c: dict) -> str:
    return (
        f"its one {c['steps']}-step parity run at B={c['batch_size']}"
        if c["runs"] == 1
        else f"the worst of its {c['runs']} {c['steps']}-step parity runs at B={c['batch_size']}"
    )


def _earlier_failed(c: dict) -> str:
    """What an earlier-method run failed, by how much (parity.earlier_check)."""
    ref, tol = stages.get(c["reference"]).title, c["tolerance"]
    held = ", ".join(f"{v:.3f}" for v in c["reference_held_out_loss"])
    parts = [f"its training loss left the envelope of {ref}'s runs by {c['outside']:.3f} nats (5-step average)"] * (
        c["outside"] > tol
    ) + [f"its held-out loss, {c['held_out_loss']:.3f}, lies {c['held_outside']:.3f} nats outside {ref}'s ({held})"] * (
        c["held_outside"] > tol
    )
    return " and ".join(parts)


def earlier_summary(c: dict) -> str:
    """A parity run of the earlier method, judged by the rule it was measured under (lib/results/parity.py)."""
    ref, tol = stages.get(c["reference"]).title, c["tolerance"]
    held = ", ".join(f"{v:.3f}" for v in c["reference_held_out_loss"])
    css, word = ("ok", "held") if c["ok"] else ("bad", "failed: not adopted")
    return (
        f"**Parity run of the earlier method** (one long run a stage, no paired seeds: measured before this "
        f"report's rule; a re-measure runs the paired test): {stages.get(c['stage']).title}, "
        f"{_earlier_runs(c)}, against {c['reference_runs']} of "
        f"{ref}. Judged by the rule it was measured under: the training loss (5-step average) within {tol:g} nats "
        f"of the envelope of {ref}'s runs, the held-out loss within {tol:g} of their range. Training loss "
        f"{c['outside']:.3f} nats outside; held-out loss {c['held_out_loss']:.3f} against {held} "
        f'({c["held_outside"]:.3f} outside): <span class="{css}"><b>{word}</b></span>.'
    )


def summary(c: dict) -> str:
    """One check in a sentence: the intervals, the test's noise and what it can detect, the verdict."""
    if c.get("protocol") == "earlier":
        return earlier_summary(c)
    if c.get("design") == "sequential":
        return sequential_view.summary(c)
    ref, lever = stages.get(c["reference"]).title, stages.get(c["stage"]).title
    steps = {"the lever": c.get("lever_micro_steps", 1), "the reference": c["micro_steps"]}
    sides = [f"{who} accumulating {m} micro-batches of B={c['batch_size'] // m}" for who, m in steps.items() if m > 1]
    if len(sides) > 1 and len(set(steps.values())) == 1:
        sides = [f"each side accumulating {c['micro_steps']} micro-batches of B={c['batch_size'] // c['micro_steps']}"]
    # one clause, no nested aside: the reviewers could not parse "(the matrix, which the test follows and ...)"
    both = sum(m > 1 for m in steps.values()) > 1
    acc = (
        f", {' and '.join(sides)}, since the matrix timed {'neither stage at a' if both else 'it at no'} batch as "
        f"large as B={c['batch_size']} (the test follows the matrix; the batch sweep comes after it)"
        if sides
        else ""
    )
    passes = f", {c['passes']:.2g} passes over the training text" if c.get("passes") else ""
    noise = (
        "not measured (no seed ran both stages twice)"
        if c["noise_sd"] is None
        else "none: every repeat was bitwise identical"
        if c["noise_sd"] == 0
        else f"{c['noise_sd']:.4f} nats per paired difference"
    )
    detect = (
        f"; with the spread measured, a true difference of {c['detectable']:.4f} nats would be detected "
        f"{c['power'] * 100:g} % of the time"
        if c["detectable"] is not None
        else ""
    )
    verdict = WORDS[c["verdict"]] + (
        f" ({why_undecided(c)})" if c["verdict"] in (parity.UNDECIDED, parity.INCOMPLETE) else ""
    )
    if c["ok"] and (c["detectable"] or 0) > c["margin"]:  # the bounds decide; the power only says how often
        verdict += (
            f" (the upper bounds decide; a harmless lever would hold here under {c['power'] * 100:g} % of the time)"
        )
    css = "ok" if c["ok"] else "bad"
    return (
        f"**Parity test**: {lever} against {ref} at B={c['batch_size']}, {len(c['seeds'])} paired seeds of "
        f"{c['steps']} steps from initialisation{passes}{acc}, so it speaks for the start of training. Mean "
        "paired difference (lever minus reference; the "
        f"{(2 * c['confidence'] - 1) * 100:g} % interval, each end a one-sided {c['confidence'] * 100:g} % "
        f"bound): held-out loss {_interval(c['intervals']['held_out'])}, final "
        f"training loss {_interval(c['intervals']['final'])}. The test's own noise: {noise}{detect}. Margin "
        f'+{c["margin"]:g} nats: <span class="{css}"><b>{html.escape(verdict)}</b></span>.'
        + measurably_worse(c)
        + (
            f" Its runs at B={', B='.join(map(str, c['other_batches']))} decided less and are listed with every run."
            if c.get("other_batches")
            else ""
        )
    )


def measurably_worse(c: dict) -> str:
    """A lever that holds while an interval of its paired difference lies wholly above zero is worse by a measured
    amount, smaller than the margin: the verdict says so rather than 'holds' alone (a reviewer of the H100's FP8
    lm_head, worse in all five seeds, final training loss +0.0007 to +0.0166)."""
    worse = [
        name
        for name, key in (("held-out", "held_out"), ("final training", "final"))
        if c["intervals"][key]["n"] > 1 and c["intervals"][key]["lo"] > 0
    ]
    if c["verdict"] != parity.HOLDS or not worse:
        return ""
    return (
        f" Worse all the same, by less than the margin: the interval of its {' and '.join(worse)} loss lies above zero."
    )


def recommended_check(rep: Report) -> dict | None:
    """The parity test of the recommended stage, else the first one the folder has."""
    all_, best = checks(rep), recommended(rep)
    key = best["stage"] if best is not None and best["stage"] in all_ else next(iter(all_), None)
    return all_[key] if key else None


def recommended_md(rep: Report) -> str:
    c = recommended_check(rep)
    if c is None:
        best = recommended(rep)
        if best is not None and stages.get(best["stage"]).reference == best["stage"]:
            return (
                f"No parity test: the recommended configuration is {best['stage_title']}, the reference "
                "its levers are judged against."
            )
        return "No parity test for this report."
    return summary(c)


def all_md(rep: Report) -> str:
    """The test behind the recommendation, then every other test the folder has (the levers it left out), each in a
    paragraph."""
    first = (recommended_check(rep) or {}).get("stage")
    return "\n\n".join([recommended_md(rep)] + [summary(c) for k, c in checks(rep).items() if k != first])


def rejected(rep: Report) -> dict:
    """stage -> its parity test, for the stages whose test did not hold (never recommended)."""
    return parity.rejected(checks(rep))


def rejected_reason(rep: Report, key: str) -> str:
    c = rejected(rep)[key]
    if c.get("design") == "sequential":
        return sequential_view.short_reason(c)
    if c.get("protocol") == "earlier":
        return (
            f"{_earlier_runs(c)} (the earlier method) failed the {c['tolerance']:g}-nat tolerance: "
            f"{_earlier_failed(c)}; so it is not recommended however fast it runs."
        )
    m = max(c["intervals"], key=lambda k: c["intervals"][k]["lo"])  # the loss that made it worse
    why = (
        why_undecided(c)
        if c["verdict"] == parity.UNDECIDED
        else f"its {parity.METRICS[m]} rose {_interval(c['intervals'][m])}, beyond +{c['margin']:g}"
    )
    found = "found it worse" if c["verdict"] == parity.WORSE else "could not decide"
    return (
        f"its parity test against {stages.get(c['reference']).title} at B={c['batch_size']} {found}: "
        f"{why}; so it is not recommended however fast it runs."
    )


def loss_reason(rep: Report, key: str) -> str | None:
    """Why a lever's loss keeps it out, in a few words: its parity test's (short_reason), else the stage divergence check
    failing; None where its loss held."""
    if key in rejected(rep):
        return short_reason(rep, key)
    if (rep.df[rep.df["stage"] == key]["loss_verdict"].isin(stats.GATE_FAILS)).any():
        return "loss beyond tolerance"
    return None


def short_reason(rep: Report, key: str) -> str:
    """The summary box's few words: why the test did not hold, with the figure that decided it."""
    c = rejected(rep)[key]
    if c.get("design") == "sequential":
        return sequential_view.short_reason(c)
    if c.get("protocol") == "earlier":
        return (
            f"earlier-method parity run failed: training loss {c['outside']:.3f} nats outside the reference's "
            f"envelope, held-out loss {c['held_outside']:.3f} outside its range, tolerance {c['tolerance']:g}"
        )
    if c.get("futile") == "trend" and c["seeds_run"] < c["wanted"]:
        return f"parity test stopped undecided after {_stopped_after(c)}: {_futile_trend(c)}"
    if c.get("futile") and c["seeds_run"] < c["wanted"]:  # its interval is of the noise seeds alone: not the reason
        return (
            f"parity test stopped undecided after {_stopped_after(c)}: {_futile_cause(c)} lets {c['wanted']} seeds "
            f"detect no less than {_futile_reach(c):.4f}, beyond the +{c['margin']:g} margin"
        )
    # The loss that decided: the highest lower bound where the lever was worse, else the highest upper bound.
    end = "lo" if c["verdict"] == parity.WORSE else "hi"
    m = max(c["intervals"], key=lambda k: c["intervals"][k][end])
    return f"parity test {c['verdict']}: {parity.METRICS[m]} {_interval(c['intervals'][m])}, margin +{c['margin']:g}"


def history_md(rep: Report) -> str:
    """Every parity run the folder ever made, superseded ones included (none is removed when the
    recommendation moves): stage, batch, seed, run, steps, losses, and whether the current test uses it."""
    rows = [(r, "current") for r in rep.decisions if r.get("kind") == "parity"]
    old = rep.dir / "superseded" / "parity"
    if old.is_dir():
        rows += [(r, "superseded") for r in store.load_records(old)]
    if not rows:
        return ""
    out = [
        "| stage | B | seed | run | steps | final loss | held-out loss | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r, where in sorted(
        rows, key=lambda x: (x[1], x[0]["stage"], x[0]["batch_size"], parity.seed_of(x[0]), x[0].get("replicate", 0))
    ):
        ok = r.get("status") == record.Status.OK
        losses = (
            f"{r['final_loss']:.4f} | {r['held_out_loss']:.4f} | {where}" if ok else f"— | — | {where}: {r['status']}"
        )
        out.append(
            f"| {stages.get(r['stage']).title} | {r['batch_size']} | {parity.seed_of(r)} | {r.get('replicate', 0) + 1} "
            f"| {r.get('steps')} | {losses} |"
        )
    return "\n".join(out)
