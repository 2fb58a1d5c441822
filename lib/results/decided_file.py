"""A report's decisions.json read back into its Report: a notebook drawn after the render wrote the decisions reads
them (the recipe, each lever's, the quality tests, the recommended configuration) instead of judging again, while
their records digest is the folder's (store.records_digest); otherwise the Report judges afresh."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from lib.core import record
from lib.core.paths import ROOT
from lib.results import decisions, store


def render_env() -> tuple:
    """What the decisions read at render time besides the folder: the stated price (loader.price_per_gpu_hour; make
    exports an unset variable as empty, which states no price either) and the code and params that decide, so a
    decisions.json written by other code is judged afresh rather than read into views that expect today's keys."""
    return (os.environ.get("PRICE_PER_GPU_HOUR") or None, _deciding_code())


@functools.lru_cache(maxsize=1)
def _deciding_code() -> str:
    h = hashlib.sha256()
    for top in ("lib/core", "lib/results", "params"):
        for p in sorted((ROOT / top).rglob("*")):
            if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts:
                h.update(f"{p.relative_to(ROOT)}\0".encode() + p.read_bytes())
    return h.hexdigest()


def sitting_gpu_seconds(rep) -> float | None:
    """What a sitting like this folder's costs in GPU-seconds: its measured seconds times the device's GPUs."""
    return (store.measured_seconds(rep.run) or 0) * (rep.env["device"].get("count") or 1) or None


def read_into(rep) -> None:
    """Fill the Report's (lib/report/loader.py, not imported: it imports this) decisions from decisions.json where it
    was computed from the folder as it is now."""
    try:
        decided = json.loads((rep.dir / decisions.FILE).read_text())
    except (OSError, ValueError):
        return
    if decided.get("records_digest") != store.records_digest(rep.dir, *render_env()):
        return  # stale or from an older decisions.json: judged afresh
    best = decided.get("best")
    record_ = None
    if best:
        record_ = next(
            r
            for r in rep.decisions
            if (r["stage"], r["batch_size"], r.get("variant")) == (best["stage"], best["batch_size"], best["variant"])
            and r.get("status") == record.Status.OK
        )
        recipe = decided["recipe"] or {}
        record_ = {**record_, "processes": recipe.get("micro_batch_alone"), "against": recipe.get("against")}
    # cached_property reads the instance's own attribute first: these stand for what they would compute
    rep.__dict__.update(decided=decided, quality_checks=decided["quality_checks"], choice=(record_, None))
