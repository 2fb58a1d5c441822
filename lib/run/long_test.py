"""The long quality test of one lever (or a whole stack) against its reference: paired seeds on the long corpus
(lib/core/long_corpus.py, text the runs see at most about four times, held-out documents never trained on), to the
horizon of time_to_loss's rule, each run's held-out loss measured along the way so the reference's own curve prices
the lever's loss cost in steps. On a host of several GPUs each GPU runs its own seeds at once.

    python -m lib.run.long_test PROFILE LEVER [--against STAGE] [--batch B] [--micro-steps M] --seeds N
                                [--speedup X --speed-noise F | --report DIR] [--folder DIR]

Records go to DIR/results/long/ (runs/long-<profile> unless --folder names another), the verdict to
DIR/long-<lever>-vs-<reference>.json and stdout. A rerun keeps the runs already measured and adds seeds. A report
reads the test from its own long/ folder (--folder reports/<gpu>/long): its decisions judge the lever there in time to
the same loss, at the report's speed-up (decisions.long_verdicts)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lib.core import config, data, long_corpus, record, stages
from lib.core.config import UsageError
from lib.core.params import ConfigError, Params
from lib.measure.environment import detect
from lib.results import decisions, long_quality, store, time_to_loss
from lib.run import parity_runs, pipeline, runner
from lib.run.jobs import folder as results_folder
from lib.run.jobs import make_job

CURVE_POINTS = 10  # held-out evaluations along each run: the reference's curve, and the paired spread at each
HELD_OUT_TOKENS = 1_000_000  # the floor: a verdict's held-out loss is measured on at least this much text


def plan(
    params: Params,
    env: dict,
    out_dir: Path,
    lever: str,
    reference: str,
    batch: int,
    micro: int,
    seeds: int,
    min_steps: int = time_to_loss.MIN_STEPS,
) -> list[dict]:
    """Both sides' runs for `seeds` paired seeds: each seed reads the training text from its own place (fixed by the
    seed alone, so adding seeds keeps the earlier runs valid), both sides the same batches from the same weights."""
    train_tokens = len(long_corpus.part(params))
    per_step = batch * params.run.seq_len
    steps = time_to_loss.horizon_steps(train_tokens, per_step, min_steps=min_steps)
    points = sorted({max(1, round(steps * (k + 1) / CURVE_POINTS)) for k in range(CURVE_POINTS)})
    # held-out loss on at least HELD_OUT_TOKENS never trained on, as far as the held-out documents reach
    held_tokens = len(long_corpus.part(params, held_out=True))
    held = max(1, min(-(-HELD_OUT_TOKENS // per_step), held_tokens // per_step))
    spread, jobs = parity_runs.devices(env), []
    for seed in range(seeds):
        start = int((seed * 0.6180339887498949) % 1.0 * train_tokens)
        for stage in (lever, reference):
            name = f"{stage}__b{batch}__s{seed}"
            j = make_job(
                params,
                env,
                stage,
                batch,
                results_folder(out_dir, "long") / f"{name}.json",
                kind="parity",
                variant=long_quality.VARIANT,
                steps=steps,
                held_out_batches=held,
                micro_steps=micro,
                seed_offset=seed,
                data_start=start,
                passes=steps * per_step / train_tokens,
                corpus="long",
                eval_points=points,
            )
            j["fingerprint"] += f"-long{steps}x{micro}-s{seed}-at{start}"
            j["device"] = seed % spread if spread > 1 else None
            jobs.append(j)
    return jobs


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", help="the GPU profile (params/<profile>.yaml)")
    ap.add_argument("lever", help="the lever's stage (lib/core/stages.py)")
    ap.add_argument("--against", help="the reference stage (else the lever's own stack)")
    ap.add_argument(
        "--batch", type=int, default=time_to_loss.BATCH, help=f"sequences a step, both sides ({time_to_loss.BATCH})"
    )
    ap.add_argument("--micro-steps", type=int, default=1, help="micro-batches each side accumulates to train --batch")
    ap.add_argument("--seeds", type=int, required=True, help="paired seeds (a host of G GPUs runs G at once)")
    ap.add_argument("--speedup", type=float, help="the lever's speed over its reference as trained")
    ap.add_argument("--speed-noise", type=float, help="the spread a speed-up must beat (a fraction, e.g. 0.0169)")
    ap.add_argument(
        "--report",
        type=Path,
        help="a report folder whose decisions.json gives --speedup and the noise (else the folder's parent)",
    )
    ap.add_argument("--min-steps", type=int, default=time_to_loss.MIN_STEPS, help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help="where the records go (else runs/long-<profile>)")
    args = ap.parse_args(argv)
    try:
        params = config.load(args.profile, batch_sizes=[args.batch])
        reference = args.against or stages.own_stack(args.lever)
        speedup, noise = _speed(args)
        folder = args.folder or Path("runs") / f"long-{args.profile}"
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "params.json").exists():
            store.write_atomic(folder / "params.json", params)
        # the machine that runs it must be the profile's GPU kind, detected here: a folder's environment.json names
        # the machine of its first runs, and a call for an H200 that ran on an H100 had paired nothing of its own
        # kind and set the folder's H200 runs aside as another machine's (their fingerprints name the device)
        here = detect()
        try:
            pipeline.choose_profile(args.profile, here, allow_mismatch=False)  # `make report GPU=`'s own check
        except UsageError:
            raise ValueError(
                f"profile {args.profile!r} is not this machine's {here['name']}: nothing was run"
            ) from None
        env = runner.environment(folder)
        # a side that cannot run here stops the test before any run: a host whose setup missed a lever's package had
        # measured its reference's seeds alone and recorded the lever's as not applicable
        for side in (args.lever, reference):
            if why := stages.get(side).not_applicable(env["device"]):
                raise ValueError(f"{why}: nothing was run")
        jobs = plan(
            params, env, folder, args.lever, reference, args.batch, args.micro_steps, args.seeds, args.min_steps
        )
    except (ConfigError, data.DataError, ValueError, KeyError, StopIteration) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"long test: {args.lever} against {reference}, {args.seeds} seeds, {jobs[0]['steps']} steps at B={args.batch}"
    )
    recs = runner.measure_jobs(parity_runs.in_series(jobs, "long"), env)
    failed = [f"{r['stage']} seed {r.get('seed_offset')}: {r['status']}" for r in recs.values() if r["status"] != "ok"]
    done = [r for r in recs.values() if r["status"] == record.Status.OK]
    v = long_quality.verdict(done, args.lever, reference, args.batch, speedup, noise) if speedup else None
    out = {
        "failed": failed,
        "verdict": v,
        "pairs": None if v else long_quality.pairs(done, args.lever, reference, args.batch),
    }
    store.write_atomic(folder / f"long-{args.lever}-vs-{reference}.json", out)
    print(json.dumps(out, indent=1, default=str))
    return 1 if failed else 0


def _speed(args) -> tuple[float | None, float]:
    """The lever's speed-up over its reference and the noise it must beat: given, or from a report's decisions (the
    speed-up its long verdict was priced at against the same reference, else decisions.lever_speedup; the recipe's
    lead for its whole stack against the canonical trainer's stage), else none (records only)."""
    if args.speedup:
        return args.speedup, args.speed_noise or 0.0
    if not args.report and args.folder and (args.folder.parent / "decisions.json").exists():
        args.report = args.folder.parent  # a report's own long/ folder: the report gives the speed-up
    if not args.report:
        return None, 0.0
    d = json.loads((args.report / "decisions.json").read_text())
    row = next(r for r in d["levers"] if r["stage"] == args.lever)
    # a whole stack against the canonical trainer's stage is judged at the recipe's lead over that trainer, as the
    # report judges it (decisions.whole_stack_long); a lever against its own stack at its own speed-up
    recipe = d.get("recipe") or {}
    reference = args.against or stages.own_stack(args.lever)
    whole = args.lever == recipe.get("stage") and reference == (recipe.get("canonical") or {}).get("stage")
    # a lever's own test at the speed-up the report priced it at (its stage over the reference's in the matrix)
    priced = (row.get("long") or {}).get("speedup") if (row.get("long") or {}).get("reference") == reference else None
    speedup = recipe.get("ratio") if whole else priced
    return speedup or decisions.lever_speedup(row), args.speed_noise if args.speed_noise is not None else d.get(
        "noise_floor"
    ) or 0.0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
