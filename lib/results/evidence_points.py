"""The evidence chapters' figures read from a report's records: the sequence-length sweep's records by length, and
how much each memory layer of one stage differs from another's at every batch both ran. A Report is passed in, not
imported."""

from __future__ import annotations

OK = ("ok", "diverged")


def seq_by_length(rep) -> dict[int, dict[str, dict]]:
    """{sequence length: {stage: its record}} of the sequence-length sweep, shortest length first."""
    by = {}
    for r in rep.evidence["seq"]:
        by.setdefault(r["seq_len"], {})[r["stage"]] = r
    return dict(sorted(by.items()))


def layer_changes(rep, stage: str, versus: str, cols) -> dict[str, list[tuple]]:
    """{memory column of `cols`: [(batch, `stage` over `versus` - 1, `stage` - `versus` in bytes), ...]} at every batch
    where both timed their steps and `versus` has the column."""
    changes = {}
    for b in rep.params.run.batch_sizes:
        a, s = rep.rec(versus, b), rep.rec(stage, b)
        if a and s and a["status"] in OK and s["status"] in OK:
            for col in cols:
                if a.get(col) and s.get(col) is not None:
                    changes.setdefault(col, []).append((b, s[col] / a[col] - 1, s[col] - a[col]))
    return changes
