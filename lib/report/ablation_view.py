"""The leave-one-out ablation as the report reads it (batch-sweep chapter): each lever of the recommendation switched
off alone, its worth against the recommendation's processes and the measured noise, the lever's stage, and the
rows that did not run and why. From the report folder's records only."""

from __future__ import annotations

from lib.core import record, stages
from lib.report.evidence_view import none, ok, table
from lib.report.loader import Report, gib, pct, recommended, short, signed_pct, tok
from lib.results import leave_one_out

PREDICTED_NOTE = (
    " A row not run was predicted not to fit: in the matrix its lever made a batch no larger than this one fit (the"
    " stage that added it ran there, the stage before it ran out of memory)."
)
NOT_MEASURED = leave_one_out.NOT_MEASURED


def ablation_rows(rep: Report) -> tuple[dict | None, list[dict]]:
    """The leave-one-out of the report (lib/results/leave_one_out.py, decided once): the configuration with every
    lever, and a row per lever removed."""
    loo = rep.decided["leave_one_out"]
    return loo["full"], loo["rows"]


def ablation_calls_apart(full: dict | None, rows: list[dict]) -> str | None:
    """'in another device call (date) than ...' where the configuration with all levers and the rows
    without one finished on different days: their ratio then holds the drift between calls too."""
    days = {(r["record"].get("finished_at") or "")[:10] for r in rows} - {""}
    mine = ((full or {}).get("finished_at") or "")[:10]
    if not mine or not days or days == {mine}:
        return None
    return (
        f"in another device call ({mine}) than the runs without a lever ({', '.join(sorted(days))}), so each "
        "worth also holds the drift between those calls"
    )


NOISE_NOTE = {True: " (within noise)", None: " (not judged: another machine, offset not measured)", False: ""}


def _status_cell(r: dict) -> str:
    return "NOT RUN" if record.is_predicted_oom(r) else r["status"].upper().replace("_", " ")


def _no_worth(r: dict) -> str:
    """Why a leave-one-out row has no worth, in a few words (a whole reason would widen the table past the page)."""
    if r["status"] == "oom":
        return "does not fit at this batch without it"
    return "predicted not to fit at this batch without it" if record.is_predicted_oom(r) else short(r.get("reason"))


def ablation_html(rep: Report) -> str:
    full, rows = ablation_rows(rep)
    if not rows:
        return none("The leave-one-out ablation was not measured for this report.")
    p, rec = (full or {}).get("processes"), recommended(rep)
    around = f"{stages.get(full['stage']).title} at B={full['batch_size']}" if full else ""
    if full and rec and (rec["stage"], rec["batch_size"]) != (full["stage"], full["batch_size"]):
        around += (
            f", the recommendation of the rule this ablation ran under (a micro-batch that need not divide GPT-2's "
            f"batch); the recipe is now B={rec['batch_size']}"
        )
    shown = [
        {
            "removed": f"nothing ({around})",
            "tok/s": (tok(p["median"]) + (f" (median of {p['n']} processes)" if p["n"] > 1 else "")) if p else "",
            "the lever's worth": "",
            "allocator GiB": gib(full.get("mem_allocator_bytes")) if full else "",
        }
    ]
    for row in rows:
        r = row["record"]
        oom = r["status"] == "oom"  # its allocator peak is where it failed, short of what it asked for
        shown.append(
            {
                "removed": row["lever"],
                "tok/s": tok(r["tokens_per_s"]) if ok(r) else _status_cell(r),
                "the lever's worth": f"{signed_pct(row['worth'])}{NOISE_NOTE[row['within_noise']]}"
                if row["worth"] is not None
                else _no_worth(r),
                "allocator GiB": gib(mem := r.get("mem_allocator_bytes")) + (" at failure" if oom and mem else ""),
            }
        )
    return (
        table(shown, "matrix keep-together")
        + (  # its ten rows split 4 and 5 over two pages of reports/h200
            '<p class="note">Each lever switched off alone'
            + (f" at B={full['batch_size']}" if full else " at the first row's micro-batch")
            + ", one process each; its worth is the first row's (every lever on) median tokens/s over the configuration "
            'without it, minus one, and "within noise" where that lies inside the noise floor (the widest spread between '
            "processes of one configuration, page 1's)."
            + (PREDICTED_NOTE if any(record.is_predicted_oom(r["record"]) for r in rows) else "")
            + twin_note(rep.decided.get("leave_one_out_twin"))
            + (f" The first row was timed {apart}." if (apart := ablation_calls_apart(full, rows)) else "")
            + "</p>"
        )
    )


def twin_note(twin: dict | None) -> str:
    """The leave-one-out note's sentence on a row timed twice (decisions.ablation_twin), or nothing."""
    if not twin:
        return ""
    floor = twin["floor"]
    said = (
        f" The row {twin['lever']} is the configuration of {stages.get(twin['stage']).title} at B={twin['batch']}, "
        f"timed in the matrix too: {pct(twin['gap'], 2)} apart"
    )
    if twin["within_floor"]:
        return said + f", within the process-to-process spread ({pct(floor, 2)})."
    return (
        said + ", a drift between the two timings that the process-to-process spread "
        f"({'not measured' if floor is None else pct(floor, 2)}) does not cover, so a worth within it is "
        "called within noise too."
    )
