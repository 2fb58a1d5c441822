"""Verdicts on the write-ups' claims (params/claims.yaml) from one report's measurements, as data: one claim's row
(verdict), every claim's (table, for_report), then in words (measured_text) and the summary's table of them (html).
The figures come from lib/report/claim_figures.py, how each kind of claim is judged from lib/report/claim_kinds.py,
the words and how a figure earns one from lib/report/claim_judge.py."""

from __future__ import annotations

import html as _html
import re

import pandas as pd

from lib.core.config import preset_of, profile_family
from lib.report import claim_figures, claim_kinds, claim_params, fidelity_view
from lib.report.claim_judge import CSS, EXPLAINED, NOT_APPLICABLE, NOT_MEASURED, range_text
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
    """One claim's row, as data: the verdict word, `figure` (the measured figure it rests on: text, value, the word
    it earns), `beside` (the other figures, each {text, value?, word?}), `why` (why there is no figure, or where a
    claim about other hardware would be measured), the claim with its source (`source`: what the write-up is) and
    `quote`, the `check` that would confirm it, `pair` (the stages a timing verdict rests on) and `measured`, all
    of it in words. `noise`: the relative process-to-process range behind a timing figure (judge), one number or
    a function of the stages compared (none: the report's floor); `sdpa`: the report's forced-backend records;
    `tolerance`: its loss gate's, in nats; `facts`: claim_figures.facts, what else the report measured."""
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
    why = "; ".join(filter(None, [got.get("why", ""), "" if applies else elsewhere(claim)]))
    row = {
        "id": claim["id"],
        "source": claim.get("cite", ""),
        "claim": claim["claim"],
        "quote": claim.get("quote", ""),
        "check": got["check"],
        "verdict": word if applies else NOT_APPLICABLE,
        "figure": fig,
        "beside": beside,
        "why": why,
        "ran": got.get("ran"),
        "pair": got.get("pair"),
    }
    return {**row, "measured": measured_text(row)}


def measured_text(row: dict, html: bool = False) -> str:
    """A row's figures in words: the one the verdict rests on (or why there is none), then the ones beside it, each
    with the word it would earn alone where the claim applies here; `html`: escaped, what is beside in small type
    on a line of its own (in bold the figure would keep WeasyPrint from breaking a kernel name at its <wbr>)."""
    fig, words, esc = row["figure"], row["verdict"] != NOT_APPLICABLE, breakable if html else str
    head = [esc(t) for t in (fig and fig["text"] + fig["note"], row["why"]) if t]
    tail = [
        esc(b["text"] + b.get("note", "") + (f" (alone: {b['word']})" if words and b.get("word") else ""))
        for b in row["beside"]
    ]
    if not html or not tail:
        return "; ".join(head + tail)
    return "; ".join(head) + f"<br><small>{'; '.join(tail)}</small>"


def table(df: pd.DataFrame, profile: str, backend: str, path=CLAIMS, **evidence) -> pd.DataFrame:
    """Every claim's row (verdict); `evidence`: verdict's keyword arguments (gemm, noise, sdpa, tolerance, facts)."""
    return pd.DataFrame([verdict(c, df, profile, backend, **evidence) for c in load(path)["claims"]])


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
    """The write-ups the claims come from, each as what it is."""
    return "; ".join(_html.escape(v) for v in load(path)["sources"].values())


# The rules behind the figure a verdict rests on, stated once (params/claims.yaml states them in full).
RULES = (
    "A cell gives first the figure the verdict rests on (its stages in the check), then in small type the others. A "
    "padding claim is judged on the recommendation's stack (compiled, where it is), the eager figure beside; a claim "
    "about FP8 on the largest speed-up, over the stage it is added to, of the forms earning the best verdict (one its "
    "parity test found worse not counted; undecided where only a form whose test could not decide would confirm it); "
    "a claim that names an implementation only where that one ran. Each GPU is judged on its own figure; beside "
    "TF32's, its GEMM time and the rest of the step, which TF32 leaves: the measured cause where two GPUs of one "
    "family differ."
)

# How a quoted figure becomes the range that confirms it (the check), as params/claims.yaml `expect` states it.
RANGES = (
    "Ranges in the check: a figure of the write-up's prose (about X, X×, X %), X ± 10 % of X; a quoted range or a "
    "figure of its own table, widened by 0.03 (3 points) for rounding; up to X (a best case), X − 10 % to X + 0.03; "
    "X % slower, 1 + X/100 times the time; faster or use X, any speed-up; only about 3 %, 1.00× to 1.06×; no figure, "
    "the check's threshold."
)


def html(rep, path=CLAIMS) -> str:
    """The claims table, by source (a row that says what the write-up is, then its claims): each claim with the
    sentence it quotes, the check that would confirm it, what was measured (measured_text; a row that measured the
    same as the one above says so) and the verdict. The PDF drops the check column and prints the check under the
    verdict."""
    t, env, sources = for_report(rep, path), rep.env, load(path)["sources"]
    stack = f"{env['device']['name']}, PyTorch {env.get('torch')}" + (
        f", CUDA {env['cuda']}, cuBLAS {env.get('cublas')}, cuDNN {env.get('cudnn')}" if env.get("cuda") else ""
    )
    rows, last, cited = [], None, {c["id"]: c["source"] for c in load(path)["claims"]}
    for r in t.to_dict("records"):
        key, cell = cited.get(r["id"]), measured_text(r, html=True)
        if last is None or key != last[0]:
            rows.append(f'<tr><td colspan="4"><b>From {_html.escape(sources.get(key, r["source"]))}</b></td></tr>')
        same = last is not None and cell == last[1] and r["verdict"] != NOT_APPLICABLE
        rows.append(
            f'<tr><td style="width: 30%">{breakable(r["claim"])}<br><small>“{breakable(r["quote"])}”</small></td>'
            f"<td>{breakable(r['check'])}</td><td>{'the same figures as the row above' if same else cell}</td>"
            f'<td><span class="{CSS[r["verdict"]]}">{r["verdict"]}</span>'
            + (f'<small class="print-only">{breakable(r["check"])}</small>' if r["check"] else "")
            + "</td></tr>"
        )
        last = (key, cell)
    return (
        '<table class="claims with-check"><thead><tr><th>Claim</th><th>Check (confirms if)</th><th>Measured here</th>'
        f'<th>Verdict</th></tr></thead><tbody>{"".join(rows)}</tbody></table><p class="note">Measured on {stack}, '
        f"with the {preset_of(rep.params)} model ({rep.params.model.n_layer} layers, d={rep.params.model.n_embd}). "
        f"Verdicts: {EXPLAINED}. {RULES} {_html.escape(RANGES)} Claims, thresholds and rules: "
        "<code>params/claims.yaml</code>.</p>"
        '<p class="print-only note">Under each verdict, the check it applied: what would confirm the claim (a '
        "column of this table in the HTML report).</p>"
    )
