"""*How far the numbers can be trusted*, as the report reads it: the harness against the plain
loop (lib/train/plain_loop.py), the process-to-process spread of the repeated configurations and the
noise floor it gives (the parity test: lib/report/parity_view.py)."""

from __future__ import annotations

import html

import numpy as np

from lib.core import record, stages
from lib.core.params import Evidence
from lib.report import export
from lib.report.loader import Report
from lib.results import decide
from lib.results import noise as noise_stats

CROSSCHECK_LIMIT = 0.03  # harness vs plain loop beyond this is flagged in the executive summary


def noise(rep: Report) -> tuple[dict, float | None]:
    """(configuration -> tokens/s of every process that timed it, the report's noise floor)."""
    tps = decide.throughputs(rep.decisions)
    return tps, noise_stats.decision_floor(rep.decisions, tps)


def repeats_rule(ev: Evidence) -> str:
    """The repeats rule as the params state it, before any number: when a third process (and more) runs."""
    tol, n = ev.repeat_tolerance, ev.repeats
    return (
        ""
        if n <= 2
        else f" and more, {n} in all"
        if tol is None
        else (
            f", and further ones (up to {n}) only where the processes so far differ by more than {tol * 100:g} % of their median"
        )
    )


def claim_repeats_rule(ev: Evidence) -> str:
    """Which timing claims' sides get a second process, as the params state it (lib/run/evidence.py claim_configs)."""
    margin = getattr(ev, "claim_repeat_margin", None)
    if margin is None:
        return "both sides of the timing claims the runs knew of"
    return (
        "both sides of each timing claim whose verdict one process may not decide: where its figure, moved by up to "
        f"{margin:g} times the noise floor measured on the first two, could get another verdict (no change, the "
        "claimed range's ends, within noise of them); a claim farther from all of them is judged on one process a "
        "side against that floor"
    )


def within_noise(rep: Report, a: tuple[str, int], b: tuple[str, int]) -> bool | None:
    tps, floor = noise(rep)
    if a not in tps or b not in tps:
        return None
    return noise_stats.within_noise(tps[a], tps[b], floor, noise_stats.across_machines(rep.decisions))


def _harness_ms(rep: Report, key: str, batch: int) -> float | None:
    """The harness's step time at a configuration, as the plain loop's is taken (the mean over the
    timed steps), then the median over the processes that timed it."""
    means = [
        r["mean_ms"]
        for r in rep.decisions
        if (r["stage"], r["batch_size"]) == (key, batch)
        and r.get("status") == "ok"
        and r.get("variant") in record.TIMING_VARIANTS
        and r.get("mean_ms")
    ]
    return float(np.median(means)) if means else None


def crosscheck_rows(rep: Report) -> list[dict]:
    """One row per configuration the plain loop ran: both step times and the difference."""
    tps, _ = noise(rep)
    rows = []
    for rec in rep.evidence["crosscheck"]:
        key, batch = rec["stage"], rec["batch_size"]
        harness = _harness_ms(rep, key, batch)
        plain = rec.get("ms_per_step") if rec["status"] == "ok" else None
        rows.append(
            {
                "stage": key,
                "batch_size": batch,
                "harness_ms": harness,
                "plain_ms": plain,
                "plain_synced_ms": rec.get("synced_median_ms"),
                "processes": len(tps.get((key, batch), [])),
                "status": rec["status"],
                "difference": harness / plain - 1 if harness and plain else None,
            }
        )
    return rows


def crosscheck_html(rep: Report) -> str:
    rows = crosscheck_rows(rep)
    if not rows:
        return '<p class="note">The plain-loop cross-check was not run for this report.</p>'
    body = []
    for r in rows:
        diff = r["difference"]
        cell = "n/a" if diff is None else f"{diff * 100:+.1f} %"
        if diff is not None and abs(diff) > CROSSCHECK_LIMIT:
            cell = f'<span class="bad">{cell}</span>'
        body.append(
            f"<tr><td>{html.escape(stages.get(r['stage']).title)}</td><td>{r['batch_size']}</td>"
            f"<td>{_ms(r['harness_ms'])} <small>({r['processes']} process{'es' if r['processes'] != 1 else ''})"
            f"</small></td><td>{_ms(r['plain_ms']) if r['status'] == 'ok' else r['status'].upper()}</td>"
            f"<td>{cell}</td><td>{_ms(r['plain_synced_ms'])}</td></tr>"
        )
    return (
        '<table class="matrix"><thead><tr><th>Stage</th><th>B</th><th>harness ms/step (mean)</th>'
        "<th>plain loop ms/step</th><th>harness vs plain</th>"
        "<th>plain loop, synchronised every step</th></tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
        + '<p class="note">The two compared figures are means over the timed steps: the harness\'s of its CUDA-event '
        "step times (the median of that over its processes), the plain loop's the wall time of its timed "
        "steps over their number, the host running ahead of the device as in nanoGPT's loop. The last column is "
        "the median of the plain loop's steps timed each after a "
        "<code>torch.cuda.synchronize()</code>, as build-nanogpt does, which adds the host's launch gap at the "
        "start of every step.</p>"
    )


def crosscheck_finding(rep: Report) -> str | None:
    rows = [r for r in crosscheck_rows(rep) if r["difference"] is not None]
    if not rows:
        return None
    worst = max(rows, key=lambda r: abs(r["difference"]))
    where = ", ".join(
        f"{stages.get(r['stage']).title} B={r['batch_size']} {r['difference'] * 100:+.1f} %" for r in rows
    )
    _, floor = noise(rep)
    if abs(worst["difference"]) > CROSSCHECK_LIMIT and floor is not None and abs(worst["difference"]) <= floor:
        return (
            f'<span class="warn"><b>Cross-check within noise only</b>: the harness differs from a plain '
            f"nanoGPT-form loop by more than {CROSSCHECK_LIMIT * 100:.0f} % ({where}), but by less than this "
            f"report's process-to-process noise ({floor * 100:.1f} %).</span>"
        )
    if abs(worst["difference"]) > CROSSCHECK_LIMIT:
        return (
            f'<span class="bad"><b>Cross-check failed</b>: the harness differs from a plain nanoGPT-form loop '
            f"by more than {CROSSCHECK_LIMIT * 100:.0f} % ({where}); its numbers may not carry over to "
            "that code.</span>"
        )
    return (
        f"**Cross-check**: the harness's step time is within {CROSSCHECK_LIMIT * 100:.0f} % of a plain "
        f"nanoGPT-form training loop at every configuration compared ({where})."
    )


def _ms(v) -> str:
    return "n/a" if v is None else f"{v:.1f}"


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
            f"<td>{s['median']:,.0f}</td><td>{s['lo']:,.0f} – {s['hi']:,.0f}</td>"
            f"<td>{s['spread'] * 100:.2f} %</td></tr>"
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
        f"{floor * 100:.2f} %: the within-noise rule (the method) uses it where a configuration ran once.</p>"
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
            f" or within {gain * 100:g} % of it (a smaller gain need not repeat on the next GPU of the kind)"
            if gain
            else ""
        )
        + ": that is a tie, and a tie goes to the batch size that needs the least memory."
    )


def tie_basis(a: dict) -> str:
    """What a tie call between two batch sizes (decide.against) was judged against, in words."""
    gain = a.get("min_gain") or 0.0
    if gain > a["band"]:
        return f"the {gain * 100:g} % a batch size must gain (their noise: {a['band'] * 100:.2f} %)"
    return f"their noise of {a['band'] * 100:.2f} %"


def noise_sentence(rep: Report) -> str:
    _, floor = noise(rep)
    if floor is None:
        return "not measured for this report (no configuration ran in more than one process)."
    return (
        f"the largest process-to-process range of tokens/s among the repeated configurations is "
        f"{floor * 100:.2f} % of its median; speed-ups closer to 1 than the ranges of the two "
        "configurations compared (this floor where one ran once) are reported as *within noise*."
    )


def noise_note(rep: Report, key: str) -> str:
    """' (within noise)' when every batch size's lever effect lies inside the measured noise."""
    prev = decide.previous_stage(key)
    if stages.is_multi_gpu(key) or prev is None:
        return ""
    batches = rep.ok()[rep.ok()["stage"] == key]["batch_size"].tolist()
    verdicts = [within_noise(rep, (key, b), (prev, b)) for b in batches]
    verdicts = [v for v in verdicts if v is not None]
    return " (within noise)" if verdicts and all(verdicts) else ""
