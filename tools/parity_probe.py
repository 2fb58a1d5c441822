"""The quality test of one lever at one batch size, run alone through the report's own harness (each side a series of
fresh-seeded runs, stamped records), without the matrix that would normally pick it: to decide a lever a report left
undecided, or to see what the test measures on a GPU (its spread, its bounds) at another horizon.

    python tools/parity_probe.py PROFILE STAGE --batch B [--micro-steps M] [--seeds N] [--against STAGE]
                                 [--horizon-tokens T] [--folder DIR]
    e.g. python tools/parity_probe.py h100 fp8_classifier --batch 128 --micro-steps 2 --seeds 12

Prints the test (lib/results/parity.py) as JSON; the records stay in DIR/results/parity/ (runs/parity-STAGE unless
--folder names another).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.core import record  # noqa: E402  (after the path: run as a script from anywhere)
from lib.results import store  # noqa: E402


def main(argv: list[str]) -> int:
    from lib.core import config, stages
    from lib.results import parity
    from lib.run import parity_runs, runner

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("profile", help="the GPU profile (params/<profile>.yaml)")
    ap.add_argument("stage", help="the lever's stage (lib/core/stages.py)")
    ap.add_argument("--batch", type=int, required=True, help="sequences a step, both sides")
    ap.add_argument("--micro-steps", type=int, default=1, help="micro-batches each side accumulates to train --batch")
    ap.add_argument(
        "--seeds", type=int, help="paired seeds judged in one look at its own critical value (else the profile's looks)"
    )
    ap.add_argument("--against", help="the stage to test against (else the lever's own stack)")
    ap.add_argument(
        "--horizon-tokens",
        type=int,
        help="tokens a run trains on (else the profile's horizon; twice it asks whether "
        "the verdict holds further into training)",
    )
    ap.add_argument("--folder", type=Path, help="where the records go (else runs/parity-<stage>)")
    args = ap.parse_args(argv)
    stage, batch, micro = args.stage, args.batch, args.micro_steps
    folder = args.folder or Path("runs") / f"parity-{stage}"
    params = config.load(args.profile, batch_sizes=[batch])
    ev = params.evidence
    if args.seeds:  # one look at this many seeds: a fixed sample, judged at its own critical value
        ev.parity_seeds, ev.parity_looks = args.seeds, [args.seeds]
    reference = args.against or stages.own_stack(stage)
    if args.horizon_tokens:
        ev.parity_horizon_tokens = args.horizon_tokens
        ev.parity_steps = max(ev.parity_steps, ev.parity_horizon_tokens // (batch * params.run.seq_len))
        ev.parity_passes = max(ev.parity_passes, 100.0)  # a probe may look past the report's passes on purpose
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "params.json").exists():
        store.write_atomic(folder / "params.json", params)
    env = runner.environment(folder)
    sides = {stage: micro, reference: micro}
    jobs = parity_runs.parity_plan(params, env, folder, stage, batch, sides)
    recs = runner.measure_jobs(parity_runs.in_series(jobs, "probe"), env)
    failed = [
        f"{r['stage']} seed {r.get('seed_offset')}: {r['status']} {r.get('reason')}"
        for r in recs.values()
        if r["status"] != record.Status.OK
    ]
    check = parity.paired(list(recs.values()), stage, reference, batch, ev)
    print(json.dumps({"failed": failed, "check": check}, indent=1, default=str))
    return 1 if failed or check is None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
