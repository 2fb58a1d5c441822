"""The write-ups' claims as the summary shows them: decisions.json's `claims` (lib/results/claims.py judged them
once a render) laid out as the summary's table, each claim's figures in words (measured_text), the colour and the
legend of each verdict word, and the rules and ranges the table's note states. Nothing is judged here."""

from __future__ import annotations

import html as _html
import re

from lib.core.config import preset_of
from lib.results.claim_judge import (  # the verdict words, spelt once there
    CONFIRMED,
    CONTRADICTED,
    EXCEEDED,
    FELL_SHORT,
    NO_CHANGE,
    NOT_APPLICABLE,
    NOT_MEASURED,
    UNDECIDED,
    WITHIN_NOISE,
)

# The CSS class each verdict word is shown in.
CSS = {
    CONFIRMED: "ok",
    WITHIN_NOISE: "ok",
    EXCEEDED: "ok",
    FELL_SHORT: "warn",
    CONTRADICTED: "bad",
    UNDECIDED: "warn",
    NOT_APPLICABLE: "note",
    NOT_MEASURED: "warn",
}
EXPLAINED = (
    f"{CONFIRMED}, inside the claimed range; {WITHIN_NOISE}, outside it by less than the measured noise; "
    f"{EXCEEDED}, further from no change than claimed; {FELL_SHORT}, the claimed direction, beyond the measured "
    f"noise of no change, but less than claimed; {CONTRADICTED}, {NO_CHANGE} (within the measured noise of no "
    'change, where a change was claimed), the opposite direction, or past a claimed "at most"; '
    f"{UNDECIDED}, only a form whose parity test could not decide would confirm it, or a claim on quality that only "
    f"the divergence check (which catches a broken lever) has looked at; {NOT_APPLICABLE} or "
    f"{NOT_MEASURED}: the measured column says why (for a claim that names an implementation, which one ran)"
)


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


def sources_html(judged: dict) -> str:
    """The write-ups the claims come from, each as what it is (`judged`: decisions.json's `claims`)."""
    return "; ".join(_html.escape(v) for v in judged["sources"].values())


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


def html(rep) -> str:
    """The claims table of decisions.json's `claims` (rep.decided), by source (a row that says what the write-up is,
    then its claims): each claim with the sentence it quotes, the check that would confirm it, what was measured
    (measured_text; a row that measured the same as the one above says so) and the verdict. The PDF drops the check
    column and prints the check under the verdict."""
    judged, env = rep.decided["claims"], rep.env
    sources = judged["sources"]
    stack = f"{env['device']['name']}, PyTorch {env.get('torch')}" + (
        f", CUDA {env['cuda']}, cuBLAS {env.get('cublas')}, cuDNN {env.get('cudnn')}" if env.get("cuda") else ""
    )
    rows, last = [], None
    for r in judged["verdicts"]:
        key, cell = r["source_key"], measured_text(r, html=True)
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
