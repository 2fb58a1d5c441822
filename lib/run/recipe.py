"""What the recommended configuration is worth, measured as it would be trained (batch-sweep
chapter, after the recommendation is known):

- recipe_jobs:   the recommended configuration at GPT-2's global batch (evidence.global_batch_tokens,
                 524,288 tokens): its micro-batch and the gradient-accumulation steps that reach
                 that batch, the optimizer step amortised over them; beside it, in the same call, the
                 plain loop (lib/train/plain_loop.py) at the canonical trainer's configuration
                 (evidence.baseline: torch.compile + fused AdamW at B=64) with the same global batch,
                 interleaved: every side in two fresh processes, and in up to evidence.repeats only where
                 a side's processes so far differ by more than evidence.repeat_tolerance (the repeats'
                 rule, fixed before any number).
- ablation_jobs: leave-one-out from the recommended configuration: each of its levers switched
                 off in turn at the same micro-batch, so a lever's worth does not depend on the
                 order of the cumulative stages.

Results live in results/recipe/ and results/ablation/."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from lib.core import config, provenance, stages
from lib.core.paths import resolve
from lib.core.levers import introduced_by, levers_of
from lib.core.record import PREDICTED_OOM, Status
from lib.core.params import Params
from lib.results import decide, long_choice, noise, store
from lib.run import runner
from lib.run.jobs import PLAIN_LOOP_SWITCHES, folder, make_job, plain_loop_source


def recipe_params(params: Params) -> Params:
    """Fewer steps than the matrix: each one is a whole global batch."""
    ev = params.evidence
    return replace(
        params, run=replace(params.run, warmup_steps=ev.recipe_warmup_steps, timed_steps=ev.recipe_timed_steps)
    )


def side_path(report_dir, role: str, key: str, batch: int, k: int) -> Path:
    """Where the recipe keeps the record of one side's k-th process."""
    return folder(report_dir, "recipe") / f"{role}__{key}__b{batch}__r{k}.json"


def recipe_jobs(params: Params, report_dir, best: dict) -> list[dict]:
    env, n = runner.environment(report_dir), params.evidence.repeats
    p = recipe_params(params)
    base = params.evidence.baseline
    plain_stage, plain_batch = stages.get(base.stage), base.batch_size
    # The recommendation, the canonical trainer's configuration in this harness, and the same in
    # the plain loop: the last two show that the gap to the first is the levers', not the harness's.
    # The harness at the trainer's configuration: left to full depth, where the plain loop's cross-check at the
    # recommendation already shows the harness and the plain loop agree.
    harness = (best["stage"], best["batch_size"]) != (base.stage, plain_batch) and config.runs_evidence(
        params, "recipe_harness"
    )
    plans = [
        ("recommended", best["stage"], best["batch_size"], {}),
        *([("baseline-harness", base.stage, plain_batch, {})] if harness else []),
        (
            "baseline",
            base.stage,
            plain_batch,
            {"kind": "plain", "switches": {s: getattr(plain_stage, s) for s in PLAIN_LOOP_SWITCHES}},
        ),
    ]
    source = plain_loop_source()
    jobs = []
    for k in range(n):  # interleaved, so a slow minute of the device hits both sides alike
        for role, key, batch, extra in plans:
            micro = params.micro_steps(batch)
            if micro is None:
                continue
            job = make_job(
                p,
                env,
                key,
                batch,
                side_path(report_dir, role, key, batch, k),
                variant=f"recipe: {role}",
                micro_steps=micro,
                repeat=k,
                profile=False,
                energy=False,
                sdpa_probe=False,
                **extra,
            )
            job["fingerprint"] += f"-accum{micro}-r{k}" + (f"-{source}" if extra else "")
            jobs.append(job)
    return jobs


def ablation_jobs(params: Params, report_dir, best: dict) -> list[dict]:
    env, stage, batch = runner.environment(report_dir), stages.get(best["stage"]), best["batch_size"]
    matrix = [r for r in store.load_records(resolve(report_dir) / "results") if r.get("variant") is None]
    jobs = []
    for name, off in levers_of(stage).items():
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        jobs.append(
            make_job(
                params,
                env,
                stage.key,
                batch,
                folder(report_dir, "ablation") / f"without-{slug}__b{batch}.json",
                variant=f"without {name}",
                lever=name,
                stage_overrides=off,
                profile=False,
                energy=False,
                sdpa_probe=False,
            )
        )
        jobs[-1]["not_applicable"] = removal_cannot_fit(name, stage, batch, matrix)
    return jobs


def removal_cannot_fit(lever: str, stage, batch: int, matrix: list[dict]) -> str | None:
    """Why the configuration without `lever` is not worth a process, or None: in the matrix, the lever is what made a
    batch no larger than this one fit (the stage that added it ran there, the stage before it ran out of memory).
    On an H100 the run without SDPA attention at B=64 compiled for 36 s and then ran out of memory, as the matrix's
    BF16 stage had (reports/probes/warm-h100-2026-11-26). The run without TF32 is not predicted so: the TF32 stage
    ran out of memory there too, for want of SDPA, and without TF32 the recommendation fits."""
    added = introduced_by(lever, [stages.get(k) for k in decide.lineage(stage.key)])
    before = decide.previous_stage(added.key) if added else None
    status = {(r["stage"], r["batch_size"]): r.get("status") for r in matrix}
    fitted = sorted(
        b
        for (k, b), st in status.items()
        if added and k == added.key and st == Status.OK and b <= batch and status.get((before, b)) == Status.OOM
    )
    if not fitted:
        return None
    return (
        f"{PREDICTED_OOM}: in the matrix this lever made B={fitted[-1]} fit ({added.title} ran there, "
        f"{stages.get(before).title} ran out of memory)"
    )


def recipe_config(params: Params, report_dir) -> dict | None:
    """What the recipe trains: the recommendation, whose micro-batch reaches the global batch, with the levers the
    folder's long quality tests admit (long_choice.choose)."""
    results = resolve(report_dir) / "results"
    return long_choice.choose(store.decision_records(results), params, store.load_evidence(results), keep_timed=False)[
        0
    ]


def measure(params: Params, report_dir, best: dict, force: bool = False) -> None:
    """The recipe, then the ablation, after the rest of the recommendation's evidence. The recipe's
    sides are compared as measured in one sitting: where any of them must be measured (a side added,
    one whose configuration changed, or one a cut-off call left unmeasured) and a kept one comes from
    another sitting (another commit or machine), all of them are measured again."""
    env, ev = runner.environment(resolve(report_dir)), params.evidence
    pick = recipe_config(params, report_dir)
    jobs = recipe_jobs(params, report_dir, pick) if pick else []
    stamp = provenance.run_stamp(env)
    kept = [runner.reusable(Path(j["out"]), j["fingerprint"]) for j in jobs if j["repeat"] < 2]
    partly_kept = None in kept and any(r and not provenance.same_sitting(r, stamp) for r in kept)
    done: dict = {}
    for k in range(ev.repeats):
        if k >= 2 and not sides_disagree(done, ev.repeat_tolerance):
            break
        done |= runner.measure_jobs([j for j in jobs if j["repeat"] == k], env, force=force or partly_kept)
    # around the recipe as timed, not the short tests' recommendation: a lever the long test admitted has its part
    # too (reports/h200 of 25022d9 ran it around the loss-only forward while the recipe was the FP8 classifier)
    runner.measure_jobs(ablation_jobs(params, report_dir, pick or best), env, force=force)


def sides_disagree(recs: dict, tolerance: float | None) -> bool:
    """Whether any side of the recipe (its role) differs between its processes by more than
    `tolerance` in tokens/s (no tolerance: always, every round runs)."""
    sides: dict[str, list[float]] = {}
    for r in recs.values():
        if r.get("tokens_per_s"):
            sides.setdefault(r["variant"], []).append(r["tokens_per_s"])
    return tolerance is None or any(noise.another_process(v, tolerance) for v in sides.values())
