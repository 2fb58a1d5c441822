"""*How far the numbers can be trusted*, as the report reads it: the harness against the plain
loop (lib/plain_loop.py), the process-to-process spread of the repeated configurations and the
noise floor it gives, and the long parity run behind the recommendation."""
from __future__ import annotations

import html

import numpy as np

from . import data, report, results, stages
from .report import Report, recommended

CROSSCHECK_LIMIT = 0.03  # harness vs plain loop beyond this is flagged in the executive summary


def noise(rep: Report) -> tuple[dict, float | None]:
    """(configuration -> tokens/s of every process that timed it, the report's noise floor)."""
    tps = results.throughputs(rep.decisions)
    return tps, results.decision_floor(rep.decisions, tps)


def repeats_rule(ev: dict) -> str:
    """The repeats rule as the params state it, before any number: when a third process (and more) runs."""
    tol, n = ev.get("repeat_tolerance"), ev["repeats"]
    return "" if n <= 2 else f" and more, {n} in all" if tol is None else (
        f", and further ones (up to {n}) only where the processes so far differ by more than {tol * 100:g} % of their median")


def within_noise(rep: Report, a: tuple[str, int], b: tuple[str, int]) -> bool | None:
    tps, floor = noise(rep)
    if a not in tps or b not in tps:
        return None
    return results.within_noise(tps[a], tps[b], floor, results.across_machines(rep.decisions))


def _harness_ms(rep: Report, key: str, batch: int) -> float | None:
    """The harness's step time at a configuration, as the plain loop's is taken (the mean over the
    timed steps), then the median over the processes that timed it."""
    means = [r["mean_ms"] for r in rep.decisions if (r["stage"], r["batch_size"]) == (key, batch)
             and r.get("status") == "ok" and r.get("variant") in results.TIMING_VARIANTS and r.get("mean_ms")]
    return float(np.median(means)) if means else None


def crosscheck_rows(rep: Report) -> list[dict]:
    """One row per configuration the plain loop ran: both step times and the difference."""
    tps, _ = noise(rep)
    rows = []
    for rec in rep.evidence["crosscheck"]:
        key, batch = rec["stage"], rec["batch_size"]
        harness = _harness_ms(rep, key, batch)
        plain = rec.get("ms_per_step") if rec["status"] == "ok" else None
        rows.append({"stage": key, "batch_size": batch, "harness_ms": harness, "plain_ms": plain,
                     "plain_synced_ms": rec.get("synced_median_ms"),
                     "processes": len(tps.get((key, batch), [])), "status": rec["status"],
                     "difference": harness / plain - 1 if harness and plain else None})
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
        body.append(f"<tr><td>{html.escape(stages.get(r['stage']).title)}</td><td>{r['batch_size']}</td>"
                    f"<td>{_ms(r['harness_ms'])} <small>({r['processes']} process{'es' if r['processes'] != 1 else ''})"
                    f"</small></td><td>{_ms(r['plain_ms']) if r['status'] == 'ok' else r['status'].upper()}</td>"
                    f"<td>{cell}</td><td>{_ms(r['plain_synced_ms'])}</td></tr>")
    return ('<table class="matrix"><thead><tr><th>Stage</th><th>B</th><th>harness ms/step (mean)</th>'
            '<th>plain loop ms/step</th><th>harness vs plain</th>'
            '<th>plain loop, synchronised every step</th></tr></thead><tbody>'
            + "".join(body) + "</tbody></table>"
            + '<p class="note">Both figures are means over the timed steps: the harness\'s of its CUDA-event '
              "step times (the median of that over its processes), the plain loop's the wall time of its timed "
              "steps over their number, the host running ahead of the device as in nanoGPT's loop; the last column times each step after a "
              "<code>torch.cuda.synchronize()</code>, as build-nanogpt does, which adds the host's launch gap at the "
              "start of every step.</p>")


def crosscheck_finding(rep: Report) -> str | None:
    rows = [r for r in crosscheck_rows(rep) if r["difference"] is not None]
    if not rows:
        return None
    worst = max(rows, key=lambda r: abs(r["difference"]))
    where = ", ".join(f"{stages.get(r['stage']).title} B={r['batch_size']} {r['difference'] * 100:+.1f} %" for r in rows)
    _, floor = noise(rep)
    if abs(worst["difference"]) > CROSSCHECK_LIMIT and floor is not None and abs(worst["difference"]) <= floor:
        return (f'<span class="warn"><b>Cross-check within noise only</b>: the harness differs from a plain '
                f"nanoGPT-form loop by more than {CROSSCHECK_LIMIT * 100:.0f} % ({where}), but by less than this "
                f"report's process-to-process noise ({floor * 100:.1f} %).</span>")
    if abs(worst["difference"]) > CROSSCHECK_LIMIT:
        return (f'<span class="bad"><b>Cross-check failed</b>: the harness differs from a plain nanoGPT-form loop '
                f"by more than {CROSSCHECK_LIMIT * 100:.0f} % ({where}); its numbers may not carry over to "
                "that code.</span>")
    return (f"**Cross-check**: the harness's step time is within {CROSSCHECK_LIMIT * 100:.0f} % of a plain "
            f"nanoGPT-form training loop at every configuration compared ({where}).")


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
        s = results.spread(values)
        body.append(f"<tr><td>{html.escape(stages.get(key).title)}</td><td>{batch}</td><td>{s['n']}</td>"
                    f"<td>{s['median']:,.0f}</td><td>{s['lo']:,.0f} – {s['hi']:,.0f}</td>"
                    f"<td>{s['spread'] * 100:.2f} %</td></tr>")
    return ('<table class="matrix"><thead><tr><th>Stage</th><th>B</th><th>processes</th><th>median tok/s</th>'
            '<th>range</th><th>range / median</th></tr></thead><tbody>' + "".join(body) + "</tbody></table>"
            + f'<p class="note">Noise floor of this report (the largest range / median above): '
              f"{floor * 100:.2f} %. A ratio closer to 1 than that is reported as within noise.</p>")


def noise_sentence(rep: Report) -> str:
    _, floor = noise(rep)
    if floor is None:
        return "not measured for this report (no configuration ran in more than one process)."
    return (f"the largest process-to-process range of tokens/s among the repeated configurations is "
            f"{floor * 100:.2f} % of its median; speed-ups closer to 1 than the ranges of the two "
            "configurations compared (this floor where one ran once) are reported as *within noise*.")


def parity(rep: Report) -> dict | None:
    """The long parity run of the recommended stage, if it was run (results.parity_checks)."""
    best = recommended(rep)
    checks = results.parity_checks(rep.decisions, rep.params["run"]["loss_tolerance"])
    key = best["stage"] if best is not None and best["stage"] in checks else next(iter(checks), None)
    return {**checks[key], "stage": key} if key else None


def parity_md(rep: Report) -> str:
    p = parity(rep)
    if p is None:
        best = recommended(rep)
        if best is not None and stages.get(best["stage"]).reference == best["stage"]:
            return (f"No long parity run: the recommended configuration is {best['stage_title']}, the reference "
                    "its levers are judged against.")
        return "No long parity run for this report."
    tol = rep.params["run"]["loss_tolerance"]
    ref = stages.get(p["reference"]).title
    lever = stages.get(p["stage"]).title
    acc = (f", the reference accumulating {p['micro_steps']} micro-batches of B={p['batch_size'] // p['micro_steps']}"
           if p["micro_steps"] > 1 else "")
    verdict = "held" if p["ok"] else '<span class="bad"><b>failed: not adopted</b></span>'
    refs = ", ".join(f"{v:.3f}" for v in p["reference_held_out_loss"])
    text = (f"**{p['steps']}-step parity run**: {lever} against {ref} at B={p['batch_size']}{acc}. ")
    if p["noise_gap"] is not None:
        text += (f"{ref} ran twice; its two runs drifted up to {p['noise_gap']:.3f} nats apart (5-step average), "
                 f"the loss noise of a {p['steps']}-step run. ")
    text += (f"{lever}'s loss left the envelope of {ref}'s runs by at most {p['outside']:.3f} nats "
             f"(largest gap to its first run {p['gap']:.3f}); held-out loss {p['held_out_loss']:.3f} against "
             f"{refs} ({p['held_out_delta']:+.3f} nats from their mean). Tolerance {tol:g} nats beyond the envelope: "
             f"{verdict}.")
    corpus = report.manifest().get("tokens")
    if corpus:
        passes = p["steps"] * p["batch_size"] * rep.params["run"]["seq_len"] / (corpus * (1 - data.HELD_OUT))
        if passes > 1:
            text += (f" The run passes over the training text about {passes:.0f} times, so the held-out loss also "
                     "measures how fast each run overfits this small corpus.")
    return text


def rejected(rep: Report) -> dict:
    """stage -> its parity check, for the stages whose long run left the band (never recommended)."""
    checks = results.parity_checks(rep.decisions, rep.params["run"]["loss_tolerance"])
    return {k: c for k, c in checks.items() if not c["ok"]}


def failed_checks(rep: Report, key: str) -> dict[str, float]:
    """Of a rejected stage's long parity run, the checks that failed and by how many nats:
    'training' (its loss against the reference's envelope), 'held-out' (against their range)."""
    c, tol = rejected(rep)[key], rep.params["run"]["loss_tolerance"]
    return {name: v for name, v in (("training", c["outside"]), ("held-out", c["held_outside"])) if v > tol}


def rejected_reason(rep: Report, key: str) -> str:
    """Why a stage the speed alone would pick is not recommended: which of its long parity run's two
    checks failed (the training loss against the reference's envelope, or the held-out loss against
    the reference's), by how much, against the tolerance."""
    c, tol = rejected(rep)[key], rep.params["run"]["loss_tolerance"]
    ref, held_refs = stages.get(c["reference"]).title, ", ".join(f"{v:.3f}" for v in c["reference_held_out_loss"])
    checks = failed_checks(rep, key)
    failed = ([f"its training loss left the envelope of {ref}'s runs by {checks['training']:.3f} nats (5-step average)"]
              if "training" in checks else []) + (
        [f"its held-out loss, {c['held_out_loss']:.3f}, lies {checks['held-out']:.3f} nats outside the range of "
         f"{ref}'s ({held_refs})"] if "held-out" in checks else [])
    runs = (f"the worst of its {c['runs']} {c['steps']}-step parity runs at B={c['batch_size']}" if c["runs"] > 1
            else f"its one {c['steps']}-step parity run at B={c['batch_size']}")
    return (f"{runs} failed the {tol:g}-nat tolerance: " + " and ".join(failed)
            + ", so it is not recommended however fast it runs.")


def noise_note(rep: Report, key: str) -> str:
    """' (within noise)' when every batch size's lever effect lies inside the measured noise."""
    prev = results.previous_stage(key)
    if stages.is_multi_gpu(key) or prev is None:
        return ""
    batches = rep.ok()[rep.ok()["stage"] == key]["batch_size"].tolist()
    verdicts = [within_noise(rep, (key, b), (prev, b)) for b in batches]
    verdicts = [v for v in verdicts if v is not None]
    return " (within noise)" if verdicts and all(verdicts) else ""
