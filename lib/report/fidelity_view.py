"""*How far the numbers can be trusted*, as the report reads it: the harness against the plain
loop (lib/train/plain_loop.py), the process-to-process spread of the repeated configurations and the
noise floor it gives (the parity test: lib/report/parity_view.py)."""

from __future__ import annotations

import html


from lib.core import stages
from lib.core.params import Evidence
from lib.report import export
from lib.report import formats as fmt
from lib.report.loader import Report
from lib.results import crosscheck, decide
from lib.results import noise as noise_stats


def noise(rep: Report) -> tuple[dict, float | None]:
    """(configuration -> tokens/s of every process that timed it, the report's noise floor as decided once)."""
    return decide.throughputs(rep.decisions), rep.decided["noise_floor"]


def repeats_rule(ev: Evidence) -> str:
    """The repeats rule as the params state it, before any number: when a third process (and more) runs."""
    tol, n = ev.repeat_tolerance, ev.repeats
    if n <= 2 or tol is None:
        return "" if n <= 2 else f" and more, {n} in all"
    return f", and further ones (up to {n}) only where the processes so far differ by more than {fmt.pct(tol, None)} of their median"


def claim_repeats_rule(ev: Evidence) -> str:
    """Which timing claims' sides get a second process, as the params state it (lib/run/evidence.py claim_configs)."""
    margin = getattr(ev, "claim_repeat_margin", None)
    if margin is None:
        return "both sides of the timing claims the runs knew of"
    return (
        "both sides of each timing claim whose verdict one process may not decide: where its figure, moved by up to "
        f"{fmt.setting(margin)} times the noise floor measured on the first two, could get another verdict (no "
        "change, the claimed range's ends, within noise of them); a claim farther from all of them is judged on one "
        "process a side against that floor"
    )


def crosscheck_rows(rep: Report) -> list[dict]:
    """One row per configuration the plain loop ran, with its verdict (lib/results/crosscheck.py, decided once)."""
    return rep.decided["crosscheck"]


def crosscheck_html(rep: Report) -> str:
    rows = crosscheck_rows(rep)
    if not rows:
        return '<p class="note">The plain-loop cross-check was not run for this report.</p>'
    body = []
    for r in rows:
        diff = r["difference"]
        cell = fmt.pct(diff, sign="+")
        if r["verdict"] == crosscheck.DIFFERS:
            cell = f'<span class="bad">{cell}</span>'
        elif r["verdict"] == crosscheck.WITHIN_NOISE:
            cell += " <small>(within noise)</small>"
        body.append(
            f"<tr><td>{html.escape(stages.get(r['stage']).title)}</td><td>{r['batch_size']}</td>"
            f"<td>{fmt.ms(r['harness_ms'])} <small>({r['processes']} process{'es' if r['processes'] != 1 else ''})"
            f"</small></td><td>{fmt.ms(r['plain_ms']) if r['status'] == 'ok' else r['status'].upper()}</td>"
            f"<td>{cell}</td><td>{fmt.pct(r['noise'])}</td><td>{fmt.ms(r['plain_synced_ms'])}</td></tr>"
        )
    return (
        '<table class="matrix"><thead><tr><th>Stage</th><th>B</th><th>harness ms/step (mean)</th>'
        "<th>plain loop ms/step</th><th>harness vs plain</th><th>noise</th>"
        "<th>plain loop, synchronised every step</th></tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
        + '<p class="note">The two compared figures are means over the timed steps: the harness\'s of its CUDA-event '
        "step times (the median of that over its processes), the plain loop's the wall time of its timed "
        "steps over their number, the host running ahead of the device as in nanoGPT's loop. The last column is "
        "the median of the plain loop's steps timed each after a "
        "<code>torch.cuda.synchronize()</code>, as build-nanogpt does, which adds the host's launch gap at the "
        f"start of every step. A difference beyond {fmt.pct(crosscheck.LIMIT, 0)} is judged against the noise "
        "column: the larger of this report's process-to-process floor, the harness's range over its processes there, "
        "the step-time CV of each side in its own process, and how much slower the plain loop's unsynchronised "
        "steps ran than its synchronised ones (synchronising can only add time); inside it, the two cannot be told "
        "apart here.</p>"
    )


def repeats_html(rep: Report) -> str:
    tps, floor = noise(rep)
    repeated = {k: v for k, v in tps.items() if len(v) > 1}
    if not repeated:
        return '<p class="note">No configuration was run in more than one process for this report.</p>'
    order = {k: i for i, k in enumerate(stages.ORDER)}
    body = []
    for (key, batch), values in sorted(repeated.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
        s = noise_stats.spread(values)
        body.append(
            f"<tr><td>{html.escape(stages.get(key).title)}</td><td>{batch}</td><td>{s['n']}</td>"
            f"<td>{fmt.tok(s['median'])}</td><td>{fmt.tok(s['lo'])} – {fmt.tok(s['hi'])}</td>"
            f"<td>{fmt.pct(s['spread'], 2)}</td></tr>"
        )
    table = (
        '<table class="matrix"><thead><tr><th>Stage</th><th>B</th><th>processes</th><th>median tok/s</th>'
        "<th>range</th><th>range / median</th></tr></thead><tbody>" + "".join(body) + "</tbody></table>"
    )
    return (
        export.html_only_block(
            table,
            f"The {len(repeated)} configurations timed in several processes, each with its range, are a "
            "table in the HTML report.",
        )
        + f'<p class="note">Noise floor of this report (the largest range / median among them): '
        f"{fmt.pct(floor, 2)}: the within-noise rule (the method) uses it where a configuration ran once.</p>"
    )


# How decide.best_config chooses among the batch sizes of the recommended stage (the method states it).
def batch_tie_rule(ev) -> str:
    """The tie rule between batch sizes, as the report's params state it (evidence.batch_min_gain)."""
    gain = getattr(ev, "batch_min_gain", None)
    return (
        "the fastest batch size of the recommended stage by its median tokens/s, unless another batch size "
        "of that stage, timed in at least two processes, lies within the noise of the two figures compared "
        "(the larger of their own process-to-process ranges, widened to the spread between machines where "
        "they were timed on different ones)"
        + (
            f" or within {fmt.pct(gain, None)} of it (a smaller gain need not repeat on the next GPU of the kind)"
            if gain
            else ""
        )
        + ": that is a tie; the fastest is still recommended, and a smaller batch that ties with it is listed as a "
        "memory saver. Only a "
        "micro-batch that reaches GPT-2's batch by whole accumulation steps can be recommended: the recommendation "
        "is the recipe a team trains with."
    )


def tie_basis(a: dict) -> str:
    """What a tie call between two batch sizes (decide.against) was judged against, in words."""
    gain = a.get("min_gain") or 0.0
    if gain > a["band"]:
        return f"the {fmt.pct(gain, None)} a batch size must gain (their noise: {fmt.pct(a['band'], 2)})"
    return f"their noise of {fmt.pct(a['band'], 2)}"


def noise_sentence(rep: Report) -> str:
    _, floor = noise(rep)
    if floor is None:
        return "not measured for this report (no configuration ran in more than one process)."
    return (
        f"the largest process-to-process range of tokens/s among the repeated configurations is "
        f"{fmt.pct(floor, 2)} of its median; speed-ups closer to 1 than the ranges of the two "
        "configurations compared (this floor where one ran once) are reported as *within noise*."
    )
