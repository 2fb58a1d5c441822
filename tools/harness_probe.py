"""Does the harness change what a configuration measures? One (stage, batch) configuration timed in fresh
processes: cold (an empty compile cache) and warm, with the host threads that sample clocks and energy over
the timed steps on and off, and with Python's garbage collector frozen before the timed steps. Seen on an H100
(2026-11-25): the torchao float8 stage at B=16 ran 40.4 ms a step in warm processes and 46.4 ms (cv 7.6 %) in
the cold one that compiled it, its first five timed steps at 40.7 ms and the rest slower. Not part of the
report: it decides how the worker times a step.

    python tools/harness_probe.py h100 fp8_torchao 16 runs/harness-probe   # one JSON line per process
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name, compile cache (a fresh one is cold for its first process), samplers on, gc frozen before the timed steps
PLAN = (
    ("cold", "a", True, False),
    ("warm", "a", True, False),
    ("cold, gc frozen", "b", True, True),
    ("warm, no samplers", "a", False, False),
)


def main(profile: str, stage: str, batch: int, out: Path) -> None:
    from lib.core import config
    from lib.results import store
    from lib.run import runner
    from lib.run.jobs import make_job

    out.mkdir(parents=True, exist_ok=True)
    params = config.load(profile)
    env = runner.environment(out)
    for name, cache, samplers, frozen in PLAN:
        os.environ["COMPILE_CACHE"] = str(out / f"cache-{cache}")
        job = make_job(
            params,
            env,
            stage,
            batch,
            out / f"{store.short_hash(name)}.json",
            variant=f"harness probe: {name}",
            energy=samplers,
            clocks=samplers,
            gc_freeze=frozen,
            profile=False,
        )
        rec = runner.measure_jobs([job], env, force=True)[job["out"]]
        steps = rec.get("step_ms") or []
        print(
            json.dumps(
                {
                    "name": name,
                    "compile": (rec.get("compile_cache") or {}).get("state"),
                    "first_step_s": rec.get("first_step_s"),
                    "median_ms": rec.get("median_ms"),
                    "cv": rec.get("cv"),
                    "first5_ms": statistics.median(steps[:5]) if steps else None,
                    "rest_ms": statistics.median(steps[5:]) if steps else None,
                    "step_ms": [round(s, 2) for s in steps],
                    "status": rec.get("status"),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
