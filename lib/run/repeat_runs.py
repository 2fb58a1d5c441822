"""The repeats: configurations timed again in fresh processes, so that the report can state the process-to-process
spread a decision is judged against. Run by the batch-sweep chapter (lib/run/evidence.py recommend) before each
parity test and after the sweep; which configurations, and how many processes, by rules fixed before any number."""

from __future__ import annotations

import numpy as np

from lib.core import record
from lib.core.params import Params
from lib.core.paths import resolve
from lib.results import claim_judge, claim_params
from lib.results import decide, noise, store
from lib.run import runner
from lib.run.jobs import folder, make_job


def repeat_configs(params: Params, report_dir) -> list[tuple[str, int]]:
    """The two fastest verified configurations (the recommendation and its runner-up): what runs in several
    processes first, so that the noise floor the claims are then read against is measured."""
    recs = store.decision_records(resolve(report_dir) / "results")
    ranked = decide.ranked_configs(recs, params, decide.recommendable(params))
    return [(r["stage"], r["batch_size"]) for r in ranked[:2]]


def claim_configs(params: Params, report_dir) -> list[tuple[str, int]]:
    """Both sides of each timing claim, at the smallest batch size where both ran, where one process may not decide
    its verdict. The rule, fixed before any number (evidence.claim_repeat_margin): a claim's figure, as the report
    takes it (the median over the batch sizes both ran), is settled where the verdict it gets is the same anywhere
    within that many noise floors (the floor measured on the configurations repeated so far) of where it lies; a
    second process could not change it. Without the margin, or before any floor is measured, every claim's sides.
    On an H100 the margin of 3 spares TF32 against FP32 (27 floors from its nearest bound) and its like, about 70 s of
    processes, and repeats vocab against flash (0.3 floors from the end of its claimed range)."""
    recs = store.decision_records(resolve(report_dir) / "results")
    tps = decide.throughputs(recs)
    floor, margin = noise.decision_floor(recs, tps), getattr(params.evidence, "claim_repeat_margin", None)
    ok = {
        (r["stage"], r["batch_size"]) for r in recs if r.get("status") == record.Status.OK and r.get("variant") is None
    }
    chosen = []
    for claim in claim_params.timed_claim_checks(params.name):
        common = sorted(b for (s, b) in ok if s == claim["stage"] and (claim["versus"], b) in ok)
        if common and (margin is None or floor is None or not settled(claim, common, tps, margin, floor)):
            chosen += [(claim["stage"], common[0]), (claim["versus"], common[0])]
    return list(dict.fromkeys(chosen))


def settled(claim: dict, batches: list[int], tps: dict, margin: float, floor: float) -> bool:
    """Whether a timing claim's verdict (claim_judge.judge, against the floor) stays the same with its figure moved by
    up to `margin` floors either way."""
    ratio = float(
        np.median([np.median(tps[(claim["stage"], b)]) / np.median(tps[(claim["versus"], b)]) for b in batches])
    )

    def word(r: float) -> str:  # speedup: throughput ratio; time_change: step-time ratio minus one
        value = r if claim["metric"] == "speedup" else 1 / r - 1
        return claim_judge.judge(claim["metric"], value, claim["expect"], floor)

    width = margin * floor
    return word(ratio * (1 - width)) == word(ratio) == word(ratio * (1 + width))


def measure(params: Params, report_dir, force: bool = False) -> list[dict]:
    """Each of repeat_configs, then of claim_configs, in up to evidence.repeats - 1 more fresh processes (the first
    is the matrix's or the sweep's own), so the report can state the process-to-process spread. The rule,
    fixed before any number: a second process always; a further one only where the processes so
    far differ by more than evidence.repeat_tolerance (absent: always). The repeats move the medians
    the ranking was read from, so a configuration can enter the top two only after them: the ranking
    is read again until every configuration it names has been repeated (each once, so this ends); the claims'
    sides are read after, against the floor those repeats measured."""
    out, done = [], set()
    for pick in (repeat_configs, claim_configs):
        while configs := [c for c in pick(params, report_dir) if c not in done]:
            done.update(configs)
            out += _repeat(params, report_dir, configs, force)
    return out


def _repeat(params: Params, report_dir, configs: list[tuple[str, int]], force: bool) -> list[dict]:
    env, ev = runner.environment(report_dir), params.evidence
    tolerance, out = ev.repeat_tolerance, []
    for k in range(1, ev.repeats):
        if k > 1 and tolerance is not None:
            tps = decide.throughputs(store.decision_records(resolve(report_dir) / "results"))
            configs = [c for c in configs if noise.another_process(tps.get(c) or [1.0], tolerance)]
        jobs = []
        for stage, batch in configs:
            job = make_job(
                params,
                env,
                stage,
                batch,
                folder(report_dir, "repeats") / f"{stage}__b{batch}__r{k}.json",
                variant="repeat",
                repeat=k,
                profile=False,
                energy=False,
                sdpa_probe=False,
            )
            job["fingerprint"] += f"-r{k}"
            jobs.append(job)
        recs = runner.measure_jobs(jobs, env, force=force)
        out += [recs[j["out"]] for j in jobs if j["out"] in recs]
    return out
