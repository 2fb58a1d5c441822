"""The batch-size sweep read from a report's records: each swept stage's points by batch size (matrix and sweep
together), where its sweep ended (out of memory, a predicted OOM, the run's end, or every size fitting), and the stage
measured at one batch alone because it took over from a stage whose parity test did not let it stand. A Report is
passed in, not imported."""

from __future__ import annotations

from lib.core import record


def sweeps(rep) -> dict[str, list[dict]]:
    """{stage: its points by batch size, matrix and sweep together}, one entry per stage that was
    swept (a re-run whose fastest stage changed has swept two)."""
    sweep = rep.evidence["sweep"]
    out = {}
    for key in dict.fromkeys(r["stage"] for r in sweep):
        have = {r["batch_size"]: r for r in rep.records if r["stage"] == key}
        have.update({r["batch_size"]: r for r in sweep if r["stage"] == key})
        out[key] = [have[b] for b in sorted(have)]
    return out


def end(pts: list[dict]) -> dict:
    """Where a stage's sweep (`pts`, by batch size) ended: {"oom": the first batch out of memory or None, "predicted":
    the first point predicted out of memory or None, "last": the largest batch measured, "largest": the largest
    batch that timed its steps or None}."""
    return {
        "oom": next((r["batch_size"] for r in pts if r["status"] == "oom"), None),
        "predicted": next((r for r in pts if record.is_predicted_oom(r)), None),
        "last": max(r["batch_size"] for r in pts),
        "largest": max((r["batch_size"] for r in pts if r["status"] in record.TIMED), default=None),
    }


def inherited_from(rep, key: str, swept: dict, rejected: dict) -> tuple[str, int] | None:
    """Why stage `key` was measured at one batch size and not swept: (the stage it took over from, whose parity test
    (`rejected`: stage -> its test) did not let it stand, the batch size that stage's sweep chose), where `key`'s
    sweep points are all at that batch (lib/run/evidence.py measure_chapter); None otherwise."""
    points = {r["batch_size"] for r in rep.evidence["sweep"] if r["stage"] == key}
    for k, check in rejected.items():
        if k != key and k in swept and points <= {check["batch_size"]}:
            return k, check["batch_size"]
    return None
