"""The parity test as the report states it (lib/results/parity.py decides; sequential_view.py words each test): the
test behind the recommendation with its bounds, why a stage whose test did not let it stand is not recommended, and
every parity run the folder ever made, superseded ones included."""

from __future__ import annotations

from lib.core import record, stages
from lib.report import formats as fmt
from lib.report import sequential_view
from lib.report.loader import Report, recommended
from lib.results import parity, store

WORDS = {
    parity.HOLDS: parity.HOLDS,
    parity.WORSE: f"{parity.WORSE}: not adopted",
    parity.UNDECIDED: f"{parity.UNDECIDED}: not adopted on this test alone",
    parity.INCOMPLETE: f"{parity.INCOMPLETE}: decides nothing yet",
}


def checks(rep: Report) -> dict:
    return rep.quality_checks


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
    return sequential_view.summary(c, rep.decided["to_decide"].get(c["stage"]))


def all_md(rep: Report) -> str:
    """The test behind the recommendation, then every other test the folder has (the levers it left out), each in a
    paragraph."""
    first = (recommended_check(rep) or {}).get("stage")
    return "\n\n".join(
        [recommended_md(rep)]
        + [sequential_view.summary(c, rep.decided["to_decide"].get(k)) for k, c in checks(rep).items() if k != first]
    )


def rejected(rep: Report) -> dict:
    """stage -> its parity test, for the stages whose test did not hold (never recommended; parity.rejected, decided
    once)."""
    return {k: checks(rep)[k] for k in rep.decided["rejected"]}


def rejected_reason(rep: Report, key: str) -> str:
    """Why a stage's test did not let it stand, in a few words with the figure that decided it."""
    return sequential_view.short_reason(rejected(rep)[key], rep.decided["to_decide"].get(key))


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
        final, held = (fmt.loss(r[k], 4) if ok else "—" for k in ("final_loss", "held_out_loss"))
        losses = f"{final} | {held} | {where}" + ("" if ok else f": {r['status']}")
        out.append(
            f"| {stages.get(r['stage']).title} | {r['batch_size']} | {parity.seed_of(r)} | {r.get('replicate', 0) + 1} "
            f"| {r.get('steps')} | {losses} |"
        )
    return "\n".join(out)
