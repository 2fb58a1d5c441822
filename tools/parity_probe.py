"""The quality test of one lever at one batch size, run alone through the report's own harness (each side a series of
fresh-seeded runs, stamped records), without the matrix that would normally pick it: to decide a lever a report left
undecided, or to see what the test measures on a GPU (its spread, its bounds) at another horizon.

    python tools/parity_probe.py PROFILE STAGE BATCH MICRO FOLDER [SEEDS] [REFERENCE] [HORIZON_TOKENS]
    e.g. python tools/parity_probe.py h100 fp8_classifier 128 2 runs/parity-fp8_classifier 12

MICRO: the micro-batches each side accumulates to train BATCH sequences a step (where it does not fit at once).
SEEDS: paired seeds, judged in one look (the profile's looks where not given). REFERENCE: the stage to test against
(the lever's own stack where not given). HORIZON_TOKENS: tokens a run trains on (the profile's horizon where not
given; twice it asks whether the verdict holds further into training).
Prints the test (lib/results/parity.py) as JSON; the records stay in FOLDER/results/parity/.
"""

from __future__ import annotations

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

    if not 5 <= len(argv) <= 8:
        sys.exit(__doc__)
    profile, stage, batch, micro, folder = argv[0], argv[1], int(argv[2]), int(argv[3]), Path(argv[4])
    params = config.load(profile, batch_sizes=[batch])
    ev = params.evidence
    if len(argv) >= 6:  # one look at this many seeds: a fixed sample, judged at its own critical value
        ev.parity_seeds, ev.parity_looks = int(argv[5]), [int(argv[5])]
    reference = argv[6] if len(argv) >= 7 else stages.own_stack(stage)
    if len(argv) == 8:
        ev.parity_horizon_tokens = int(argv[7])
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
