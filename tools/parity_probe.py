"""The parity test of one stage at one batch size, run alone through the report's own harness (each run a
fresh process, stamped records), without the matrix that would normally pick the stage: to see what the
test measures on a GPU (its noise, its interval, what it can detect) before a report relies on it.

    python tools/parity_probe.py PROFILE STAGE BATCH MICRO FOLDER [SEEDS] [PASSES] [REFERENCE]
    e.g. python tools/parity_probe.py h100 fp8_head 128 2 runs/parity-probe 5

MICRO: the micro-batches the reference (an eager stage) accumulates where the batch does not fit at once.
REFERENCE: another stage to test against (the lever's own stack, e.g. loss_only); both sides then accumulate MICRO.
Prints the test (lib/results/parity.py) as JSON; the records stay in FOLDER/results/parity/.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lib.core import record
from lib.results import store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    from lib.core import config, stages
    from lib.results import parity
    from lib.run import parity_runs, runner

    if len(argv) not in (5, 6, 7, 8):
        sys.exit(__doc__)
    profile, stage, batch, micro, folder = argv[0], argv[1], int(argv[2]), int(argv[3]), Path(argv[4])
    params = config.load(profile, batch_sizes=[batch])
    if len(argv) >= 6:  # more seeds than the profile's rule asks for: to see how the interval narrows
        params.evidence.parity_seeds = int(argv[5])
    if len(argv) >= 7:  # longer runs than the rule's passes: does the seeds' spread shrink past the early transient?
        params.evidence.parity_passes = float(argv[6])
    if len(argv) == 8:  # against its own stack: the seeds' spread is the test's noise, no repeat pairs
        params.evidence.parity_noise_seeds = 0
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "params.json").exists():
        store.write_atomic(folder / "params.json", params)
    env = runner.environment(folder)
    reference = argv[7] if len(argv) == 8 else stages.get(stage).reference
    sides = {stage: micro if len(argv) == 8 else 1, reference: micro}  # the lever at once unless a reference is named
    recs = runner.measure_jobs(parity_runs.parity_plan(params, env, folder, stage, batch, sides), env)
    failed = [
        f"{r['stage']} seed {r.get('seed_offset')}: {r['status']} {r.get('reason')}"
        for r in recs.values()
        if r["status"] != record.Status.OK
    ]
    check = parity.paired(list(recs.values()), stage, reference, batch, params.evidence)
    print(json.dumps({"failed": failed, "check": check}, indent=1, default=str))
    return 1 if failed or check is None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
