"""Verdicts on the write-ups' claims (params/claims.yaml), judged once a report folder: one claim's row (verdict),
and what decisions.compute keeps under decisions.json's `claims` (judged): the sources, and
each claim's row as plain JSON data, so the views (lib/report/claims_view.py, compare_view, rules) draw the table
without judging. The figures come from lib/results/claim_figures.py, how each kind of claim is judged from
lib/results/claim_kinds.py, the words and how a figure earns one from lib/results/claim_judge.py."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lib.core.config import profile_family
from lib.core.params import Params
from lib.results import claim_kinds, claim_params, decide
from lib.results import noise as noise_stats
from lib.results.claim_judge import NOT_APPLICABLE, NOT_MEASURED, range_text
from lib.results.claim_params import CLAIMS, load_claims


def elsewhere(claim: dict) -> str:
    """Where a claim that does not apply to this hardware would be measured."""
    names = " and ".join({"cdna3": "CDNA3", "cpu": "CPU"}.get(f, f.capitalize()) for f in claim["families"])
    return f"the claim speaks about {names} GPUs: {claim_params.command(claim['families'])} measures it"


def verdict(
    claim: dict,
    df: pd.DataFrame,
    profile: str,
    backend: str,
    gemm: dict | None = None,
    noise=None,
    sdpa: list | None = None,
    tolerance: float | None = None,
    facts: dict | None = None,
) -> dict:
    """One claim's row, as data: the verdict word, `figure` (the measured figure it rests on: text, value, the word
    it earns), `beside` (the other figures, each {text, value?, word?}), `why` (why there is no figure, or where a
    claim about other hardware would be measured), the claim with its source (`source`: how the write-up is cited,
    `source_key`: its key among the file's sources) and `quote`, the `check` that would confirm it with its `metric`
    and `expect` (the range it was tested against), the chip `families` it speaks about and `elsewhere` (where it
    does not apply here: where a report of them is measured), `pair`
    (the stages a timing verdict rests on) and `ran`. `noise`: the relative process-to-process range behind a timing
    figure (judge), one number or a function of the stages compared (none: the report's floor); `sdpa`: the report's
    forced-backend records; `tolerance`: its loss gate's, in nats; `facts`: claim_figures.facts, what else the
    report measured."""
    applies = profile_family(profile) in claim["families"] and backend in ("cuda", "rocm")
    ev = {"gemm": gemm, "band": noise if callable(noise) else (lambda *_: noise), "sdpa": sdpa, "facts": facts}
    metric = claim["metric"]
    if metric == "none":
        got = {"check": f"{claim['check']}: {range_text('speedup', claim['expect'])}", "why": claim["reason"]}
    elif metric in ("kernels", "misalignment"):
        got = claim_kinds.gemm_pair(claim, ev)
    elif metric == "alignment":
        got = claim_kinds.alignment(claim, df, ev)
    elif metric == "loss_gate":
        got = claim_kinds.loss_gate(claim, df, tolerance)
    elif metric == "attention":
        got = claim_kinds.attention(claim, ev)
    else:
        got = claim_kinds.forms(claim, df, ev) if "forms" in claim else claim_kinds.pair(claim, df, ev)
    fig, beside = got.get("figure"), got.get("beside", [])
    word = got.get("verdict") or (fig["word"] if fig else NOT_MEASURED)
    there = None if applies else elsewhere(claim)  # read only where needed: it lists every profile of params/
    return {
        "id": claim["id"],
        "source": claim.get("cite", ""),
        "source_key": claim.get("source"),
        "claim": claim["claim"],
        "quote": claim.get("quote", ""),
        "metric": metric,
        "expect": claim.get("expect"),
        "check": got["check"],
        "verdict": word if applies else NOT_APPLICABLE,
        "figure": fig,
        "beside": beside,
        "why": "; ".join(filter(None, [got.get("why", ""), there])),
        "families": claim["families"],
        "elsewhere": there,
        "ran": got.get("ran"),
        "pair": got.get("pair"),
    }


def judged(
    df: pd.DataFrame, records: list[dict], evidence: dict, params: Params, facts: dict, floor: float | None, path=CLAIMS
) -> dict:
    """decisions.json's `claims`: {sources: each write-up as what it is, verdicts: every claim's row (verdict)}, its
    timing figures judged against the report's noise, as plain JSON data (lists, floats) so the file a render writes
    equals what its views read. decisions.compute's own: `df` (decide.table of the matrix), `records`
    (store.decision_records), `evidence` (the matrix's records under 'matrix'), `facts` (claim_figures.facts: what the
    verdicts read beyond the matrix, decided once there) and the noise floor."""
    tps = decide.throughputs(records)

    def noise(*keys):  # the widest process-to-process range among the stages compared, where repeated; else the floor
        bands = [noise_stats.spread(v)["spread"] for (s, _), v in tps.items() if s in keys and len(v) > 1]
        return max(bands) if bands else floor

    data = load_claims(path)
    gemm, sdpa, tolerance = evidence.get("gemm"), evidence.get("sdpa"), params.run.loss_tolerance
    rows = [verdict(c, df, params.name, params.backend, gemm, noise, sdpa, tolerance, facts) for c in data["claims"]]
    return plain({"sources": data["sources"], "verdicts": rows})


def plain(value):
    """`value` as JSON holds it: tuples as lists, numpy numbers as Python's, so a render's decisions.json reads back
    equal to what it wrote (and two renders write the same bytes)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value
