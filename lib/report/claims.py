"""Verdicts on the write-ups' claims (params/claims.yaml) from one report's measurements, each
with the measured figure, or with the reason it could not be measured: one claim's row (verdict),
every claim's (table, for_report), and the summary's table of them (html). The figures come from
lib/report/claim_figures.py, the words and how a figure earns one from lib/report/claim_judge.py, the
verdicts that read more than one stage pair from lib/report/claim_kinds.py."""

from __future__ import annotations

import html as _html
import re

import numpy as np
import pandas as pd

from lib.core.config import preset_of, profile_family
from lib.report import claim_figures, claim_kinds, claim_params, fidelity_view
from lib.report.claim_judge import (
    CSS,
    EXPLAINED,
    NOT_APPLICABLE,
    NOT_MEASURED,
    per_batch_text,
    range_text,
    verdict_word,
)
from lib.report.claim_params import CLAIMS, METRICS  # noqa: F401 (METRICS: what a claim may be judged by)
from lib.report.claim_params import load_claims as load
from lib.results import noise as noise_stats


# After '::', '_' or '<', or a comma not inside a number (1,979), where a non-space follows: the places a kernel
# or config name (cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1) may wrap without splitting a token.
_TOKEN_END = re.compile(r"(?:(?<=::)|(?<=[_<])|(?<=,)(?!\d))(?=\S)")


# A word no longer than this stays whole: lm_head, fp8_head or CHAPTERS=size_sweep broken at its underscore reads as
# two words and breaks a copied command (a reviewer of reports/h100's PDF); only kernel names run longer.
WHOLE_WORD = 24


def breakable(text: str) -> str:
    """`text` escaped, with a line-break opportunity (<wbr>) at each _TOKEN_END of a word longer than WHOLE_WORD:
    report.css breaks a claims cell there and at spaces (elsewhere only a token too long for a whole line), so a
    kernel name wraps between its tokens, never inside one, and a short identifier not at all."""
    return "".join(
        "<wbr>".join(_html.escape(p) for p in _TOKEN_END.split(word)) if len(word) > WHOLE_WORD else _html.escape(word)
        for word in re.split(r"(\s+)", text)
    )


def command(families) -> str:
    """The command that measures a claim on hardware of `families`."""
    names = claim_params.family_profiles(families)
    if not names:
        return f"no profile of {' or '.join(families)} exists yet (add params/<gpu>.yaml)"
    return f"make report GPU={names[0]}" + (f" (or GPU={', '.join(names[1:])})" if names[1:] else "")


def elsewhere(claim: dict) -> str:
    """Where a claim that does not apply to this hardware would be measured."""
    names = " and ".join({"cdna3": "CDNA3", "cpu": "CPU"}.get(f, f.capitalize()) for f in claim["families"])
    return f"the claim speaks about {names} GPUs: {command(claim['families'])} measures it"


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
    """`noise`: the relative process-to-process range behind a timing figure (judge), one number or a
    function of the stages compared (none: the report's floor); `sdpa`: the report's forced-backend
    records; `tolerance`: its loss gate's, in nats; `facts`: claim_figures.facts, what else the report
    measured. `pair`: the stages a timing verdict rests on. A claim about other hardware says where
    it would be measured."""
    applies = profile_family(profile) in claim["families"] and backend in ("cuda", "rocm")
    ev = {
        "gemm": gemm,
        "band": noise if callable(noise) else (lambda *_: noise),
        "sdpa": sdpa,
        "tolerance": tolerance,
        "facts": facts,
    }
    row = _judged(
        claim,
        {
            "id": claim["id"],
            "source": claim.get("source"),
            "claim": claim["claim"],
            "check": "",
            "measured": "",
            "verdict": "",
            "pair": None,
        },
        df,
        applies,
        ev,
    )
    if not applies:
        row["measured"] = "; ".join(filter(None, [row["measured"], elsewhere(claim)]))
    return row


def _judged(claim: dict, row: dict, df: pd.DataFrame, applies: bool, ev: dict) -> dict:
    metric = claim["metric"]
    if metric in ("kernels", "misalignment"):
        return claim_kinds.gemm_pair_verdict(claim, row, applies, ev)
    if metric == "alignment":
        return claim_kinds.alignment_verdict(claim, row, df, applies, ev)
    if metric == "loss_gate":
        return claim_kinds.loss_gate_verdict(claim, row, df, applies, ev["tolerance"])
    if metric == "attention":
        return claim_kinds.attention_verdict(claim, row, applies, ev)
    if metric == "none":
        return {
            **row,
            "check": f"{claim['check']}: {range_text('speedup', claim['expect'])}",
            "measured": claim["reason"],
            "verdict": NOT_MEASURED if applies else NOT_APPLICABLE,
        }
    if "forms" in claim:
        return claim_kinds.forms_verdict(claim, row, df, applies, ev)
    row["check"] = (
        f"{claim['stage']} vs {claim['versus']}"
        + (f", {claim['layer'].replace('_', ' ')} memory" if metric == "memory_change" else "")
        + f": {range_text(metric, claim['expect'])}"
    )
    values = claim_figures.per_batch(df, claim)
    if values.empty:
        row.update(
            measured=claim_figures.why_unmeasured(df, claim), verdict=NOT_APPLICABLE if not applies else NOT_MEASURED
        )
        return row
    word, note = verdict_word(
        metric, float(np.median(values)), claim["expect"], ev["band"](claim["stage"], claim["versus"]), applies
    )
    # A padding claim of a write-up that timed eager steps rests on the eager figure, the compiled one
    # beside it; a lever's claim rests on its own comparison, its worth on top of the others beside it.
    label = (
        f" eager ({claim['stage']} vs {claim['versus']})"
        if claim.get("compiled")
        else f" alone over {claim['versus']}"
        if claim.get("leave_one_out")
        # the PDF drops the check column: the figure names what it compares (and, for memory, the layer)
        else (f", {claim['layer'].replace('_', ' ')} memory" if metric == "memory_change" else "")
        + f" ({claim['stage']} vs {claim['versus']})"
    )
    beside = [
        claim_kinds.compiled_padding_text(claim, df, ev, judged=True) if claim.get("compiled") else "",
        claim_figures.on_top(ev["facts"], claim["leave_one_out"]) if claim.get("leave_one_out") else "",
    ]
    return {
        **row,
        "measured": "; ".join(filter(None, [per_batch_text(metric, values) + label + note, *beside])),
        "verdict": word,
        "pair": (claim["stage"], claim["versus"]) if metric in ("speedup", "time_change") else None,
    }


def table(
    df: pd.DataFrame,
    profile: str,
    backend: str,
    path=CLAIMS,
    gemm: dict | None = None,
    noise=None,
    sdpa: list | None = None,
    tolerance: float | None = None,
    facts: dict | None = None,
) -> pd.DataFrame:
    """`noise`, as verdict takes it."""
    return pd.DataFrame(
        [verdict(c, df, profile, backend, gemm, noise, sdpa, tolerance, facts) for c in load(path)["claims"]]
    )


def for_report(rep, path=CLAIMS) -> pd.DataFrame:
    """Every claim's verdict on one report, its timing figures judged against the report's noise."""
    tps, floor = fidelity_view.noise(rep)

    def noise(*keys):  # the widest process-to-process range among the stages compared, where repeated; else the floor
        bands = [noise_stats.spread(v)["spread"] for (s, _), v in tps.items() if s in keys and len(v) > 1]
        return max(bands) if bands else floor

    return table(
        rep.df,
        rep.params.name,
        rep.params.backend,
        path,
        gemm=rep.evidence["gemm"],
        noise=noise,
        sdpa=rep.evidence["sdpa"],
        tolerance=rep.params.run.loss_tolerance,
        facts=claim_figures.facts(rep),
    )


def sources_html(path=CLAIMS) -> str:
    """The write-ups the claims come from, by the number each claim names."""
    return "; ".join(f"[{k}] {_html.escape(v)}" for k, v in load(path)["sources"].items())


def html(rep, path=CLAIMS) -> str:
    t = for_report(rep, path)
    env = rep.env
    stack = f"{env['device']['name']}, PyTorch {env.get('torch')}" + (
        f", CUDA {env['cuda']}, cuBLAS {env.get('cublas')}, cuDNN {env.get('cudnn')}" if env.get("cuda") else ""
    )
    rows = "".join(
        f"<tr><td>{breakable(r.claim)} <small>[{r.source}]</small></td><td>{breakable(r.check)}</td><td>{breakable(r.measured or '—')}</td>"
        f'<td><span class="{CSS[r.verdict]}">{r.verdict}</span>'
        + (f'<small class="print-only">{breakable(r.check)}</small>' if r.check else "")
        + "</td></tr>"
        for r in t.itertuples()
    )
    return (
        f'<table class="claims with-check"><thead><tr><th>Claim</th><th>Check (confirms if)</th><th>Measured here</th>'
        f'<th>Verdict</th></tr></thead><tbody>{rows}</tbody></table><p class="note">Measured on {stack}, with the {preset_of(rep.params)} '
        f"model ({rep.params.model.n_layer} layers, d={rep.params.model.n_embd})"
        + ("; the size-sweep chapter measures the FP8 forms at every GPT-2 size" if rep.evidence.get("size") else "")
        + f". Verdicts: {EXPLAINED}. A claim about a chip speaks about every GPU of its family (the H100's about "
        "the H200 too: both are GH100). A padding claim of a write-up that timed eager steps rests on the eager "
        "figure, the compiled one beside it; a claim about FP8 rests on the fastest FP8 form at the report's model, "
        f"the other forms and sizes beside it. Claims, thresholds and these rules: <code>params/claims.yaml</code>; "
        f"sources: {sources_html(path)}.</p>"
        '<p class="print-only note">Under each verdict, the check it applied: what would confirm the claim (a '
        "column of this table in the HTML report).</p>"
    )
