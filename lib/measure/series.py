"""Which parity runs share a measuring process (a series), read by the launcher's side (lib/run/parity_runs.py)
and by the worker that runs them; no torch, so the launcher's side stays light."""

from __future__ import annotations

from lib.core import stages


def restartable(stage) -> bool:
    """Whether the parity runs of `stage` may share a process, each run restarting the first one's compiled
    model from its own seed (lib/measure/parity_run.py, restart). Not where a switch puts GEMMs in FP8: on an H100
    (reports/probes/one-sitting-h100-2026-11-25c) the FP8 lm_head's restarted runs ended 0.017 to 0.114 nats
    from the same seeds run in processes of their own (reports/probes/one-sitting-h100-2026-11-25b), while the
    loss-only and vocab stages' restarted runs matched theirs within 0.002, their run-to-run noise."""
    return not stages.fp8_switches(stage)


def series_groups(jobs: list[dict]) -> list[list[dict]]:
    """The jobs as the processes that run them: consecutive jobs naming the same `series` share one,
    every other job has its own."""
    groups: list[list[dict]] = []
    for job in jobs:
        if groups and job.get("series") is not None and groups[-1][-1].get("series") == job["series"]:
            groups[-1].append(job)
        else:
            groups.append([job])
    return groups
