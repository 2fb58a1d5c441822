"""*What launches* each measurement: one fresh Python process per (stage, batch) configuration,
its result written atomically to <report>/results/<stage>__b<batch>.json (the DDP stage's adds
__g<GPUs>). A process that dies (segfault, killed kernel) still leaves a result: an error record
with the end of its stderr."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from lib.core import config, provenance, record, stages
from lib.core.paths import ROOT, resolve
from lib.core.params import Params
from lib.measure import compile_cache, faults, protocol
from lib.results import store


def capture_environment() -> dict:
    """Device and software, captured in a child process: the caller must never hold a GPU
    context while configurations are measured. Raises RuntimeError with the child's last line."""
    proc = subprocess.run(
        [sys.executable, "-m", "lib.measure.environment"], cwd=ROOT, capture_output=True, text=True, env=child_env()
    )
    if proc.returncode:
        lines = proc.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit {proc.returncode}")
    return json.loads(proc.stdout)


def environment(report_dir) -> dict:
    """The environment record of this report, captured on first use."""
    path = resolve(report_dir) / "environment.json"
    if not path.exists():
        store.write_atomic(path, capture_environment())
    env = json.loads(path.read_text())
    if "packages" not in env:  # a report begun before the lever packages were recorded
        from lib.measure.environment import packages

        env["packages"] = packages()
        store.write_atomic(path, env)
    return env


def child_env(device_env: dict | None = None) -> dict:
    """The environment of a child process; a measuring one (given the report's environment record)
    also points at the run's compile cache."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if device_env is not None:
        env.update(compile_cache.env_vars(device_env))
    return env


# Who hears of each record as the run goes (run_log.RunLog); set by the pipeline. An observer counts the records
# kept from earlier runs and says so in one line (RunLog.kept_line), so none of them has a line of its own.
OBSERVERS: list = []


def _finished(env: dict, rec: dict, kept: bool = False) -> None:
    """Every record of the run, measured or kept: its line with the progress, the cache ledger, run.json."""
    if not kept:
        compile_cache.remember(env, rec)
    notes = [observer.record(rec, kept) for observer in OBSERVERS]
    if not (kept and OBSERVERS):
        print(
            describe(rec) + ("  (kept from an earlier run)" if kept else "") + "".join(n for n in notes if n),
            flush=True,
        )
    for observer in OBSERVERS:
        observer.check_budget()


def describe(rec: dict) -> str:
    head = f"{rec['stage']:>6} B={rec['batch_size']:<4}" + (f" [{rec['variant']}]" if rec.get("variant") else "")
    if rec.get("kind") == "gemm" and rec["status"] == record.Status.OK:
        widths = sorted({p["n"] for p in rec["points"]})
        return (
            f"lm_head GEMM m={rec['m']} k={rec['k']}: {len(widths)} widths {widths[0]}..{widths[-1]} x "
            f"{', '.join(rec['dtypes'])} in {rec.get('wall_s', 0):.0f} s"
        )
    if rec.get("kind") == "plain" and rec["status"] == record.Status.OK:
        return (
            f"{head} {rec['ms_per_step']:9.2f} ms/step  {rec['tokens_per_s']:>11,.0f} tok/s  (the plain loop; "
            f"{rec['synced_median_ms']:.2f} ms synchronised every step)"
        )
    if rec.get("kind") == "parity" and rec["status"] == record.Status.OK:
        return (
            f"{head} {rec['steps']} steps x{rec['micro_steps']} micro-batches: final loss {rec['final_loss']:.3f}, "
            f"held-out loss {rec['held_out_loss']:.3f}"
        )
    if rec["status"] == record.Status.OK and rec.get("world_size"):
        eff = rec.get("scaling_efficiency")
        return (
            f"{head} {rec['median_ms']:9.2f} ms/step  {rec['tokens_per_s']:>11,.0f} tok/s on {rec['world_size']} ranks "
            f"({rec['per_gpu_tokens_per_s']:,.0f} per rank, scaling efficiency "
            f"{'n/a' if eff is None else f'{eff * 100:.1f} %'}, all-reduce {rec['allreduce_share'] * 100:.1f} % of the step)"
        )
    if rec["status"] in record.TIMED:
        mem = rec.get("mem_allocator_bytes") or rec.get("mem_device_bytes") or 0
        extra = "  DIVERGED" if rec["status"] == record.Status.DIVERGED else ""
        return (
            f"{head} {rec['median_ms']:9.2f} ms/step  {rec['tokens_per_s']:>11,.0f} tok/s  "
            f"cv {rec['cv'] * 100:4.1f}%  mem {mem / 2**30:6.2f} GiB  loss {rec.get('final_loss', float('nan')):.3f}{extra}"
        )
    return f"{head} {rec['status'].upper()}: {rec.get('reason')}"


def error_record(
    params: Params, stage_key: str, batch: int, reason: str, stderr: str = "", stamp: dict | None = None
) -> dict:
    rec = store.base_record(params, stages.get(stage_key), batch)
    rec.update(status=record.Status.ERROR, reason=reason, stderr_tail=stderr[-3000:], provenance=stamp)
    return rec


def reusable(out: Path, fp: str) -> dict | None:
    """A valid earlier result for exactly this configuration on this machine, or None."""
    try:
        rec = json.loads(out.read_text())
    except (OSError, ValueError):
        return None
    if (
        rec.get("schema_version") == record.SCHEMA_VERSION
        and rec.get("fingerprint") == fp
        and rec.get("status") in record.REUSABLE
    ):
        return rec
    return None


def run_stage(
    stage_key: str, params: Params, report_dir, timeout_s: float = 1800, force: bool = False, extra_jobs=()
) -> list[dict]:
    """Measure every batch size of one stage, each in its own process; prints a line each.
    A configuration whose valid result already exists for the same workload and machine is
    kept (resume), unless `force`. `extra_jobs` (a chapter's evidence that does not depend on
    the stage's results) run in the same launcher: one PyTorch import instead of two."""
    if faults.get(stage_key) == "stage-raise":
        raise RuntimeError(f"injected fault: stage {stage_key} raised before measuring")
    jobs = stage_jobs(stage_key, params, report_dir)
    recs = measure_jobs(jobs + list(extra_jobs), environment(report_dir), timeout_s=timeout_s, force=force)
    return [recs[j["out"]] for j in jobs]


def stage_jobs(stage_key: str, params: Params, report_dir) -> list[dict]:
    """The stage's configuration at every batch size, as measurement jobs."""
    report_dir = resolve(report_dir)
    env = environment(report_dir)
    stage = stages.get(stage_key)
    skipped = (params.skip or {}).get(stage_key)
    return [
        {
            "params": params,
            "stage": stage_key,
            "batch_size": batch,
            "out": str(store.record_path(report_dir / "results", stage_key, batch)),
            "fingerprint": store.fingerprint(params, env, stage, batch),
            "not_applicable": skipped and f"not measured by the {params.name} profile: {skipped}",
        }
        for batch in config.stage_batches(params, stage_key)
    ]


def measure_jobs(jobs: list[dict], env: dict, timeout_s: float = 1800, force: bool = False) -> dict:
    """Run measurement jobs (dicts for lib.measure.worker: params, stage, batch_size, out, fingerprint,
    optional kind / variant / stage_overrides / profile / energy) in one launcher,
    each in a fresh child. Returns {out path: record}. Kept results are reused unless `force`;
    a stage that cannot run on this device gets a 'not applicable' record without a process."""
    recs, todo = {}, []
    stamp = provenance.run_stamp(env)
    cold = compile_cache.ledger(env)
    for job in jobs:
        out = Path(job["out"])
        kept = None if force else reusable(out, job["fingerprint"])
        if kept:
            recs[job["out"]] = kept
            _finished(env, kept, kept=True)
            continue
        if out.exists():
            store.supersede(out)  # never let an older result stand in for this run's, nor lose it
        stage = stages.get(job["stage"])
        reason = job.get("not_applicable") or stage.not_applicable(env["device"])
        if reason:
            rec = store.base_record(job["params"], stage, job["batch_size"])
            rec.update(
                status=record.Status.NOT_APPLICABLE,
                reason=reason,
                fingerprint=job["fingerprint"],
                variant=job.get("variant"),
                stage_overrides=job.get("stage_overrides"),
                provenance=stamp,
            )
            store.write_record(out, rec)
            recs[job["out"]] = rec
            _finished(env, rec)
        else:
            todo.append(
                {
                    **{k: v for k, v in job.items() if k != "not_applicable"},
                    "stamp": stamp,
                    "cold_compile": cold.get(job["fingerprint"]),
                }
            )
    if not todo:
        return recs
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        # The fault injection of this moment travels with the batch: the launcher outlives the
        # environment it was started in.
        json.dump(
            {"jobs": todo, "timeout_s": timeout_s, "faults": os.environ.get(faults.VAR, "")}, f, default=store.jsonable
        )
    proc, stderr_lines = _launcher(env)
    stderr_lines.clear()
    finished = False
    try:
        proc.stdin.write(f.name + "\n")
        proc.stdin.flush()
        for line in proc.stdout:  # one line per finished configuration, as it finishes
            if line.startswith(protocol.BATCH_DONE):
                finished = True
                break
            if not line.startswith(protocol.DONE_PREFIX):
                continue
            msg = json.loads(line[len(protocol.DONE_PREFIX) :])
            job = next(j for j in todo if j["out"] == msg["out"])
            recs[job["out"]] = _collect(job["params"], job, msg["verdict"], "".join(stderr_lines))
            _finished(env, recs[job["out"]])
    except BrokenPipeError:
        pass  # the launcher died; what it did not report becomes an error record below
    finally:
        os.unlink(f.name)
    if not finished:  # the launcher died mid-batch
        proc.wait()
        time.sleep(0.2)  # its last stderr lines reach the drain thread
    for job in todo:  # the launcher itself died: what it did not report is an error
        if job["out"] not in recs:
            recs[job["out"]] = _collect(
                job["params"], job, f"launcher exited with {proc.poll()}", "".join(stderr_lines)
            )
            _finished(env, recs[job["out"]])
    return recs


_LAUNCHER: tuple | None = None  # (process, its stderr lines, its compile cache): one per process that measures


def _launcher(env: dict) -> tuple:
    """The measurement launcher (`python -m lib.measure.worker`), started on first use and kept for
    every later batch of jobs, so PyTorch is imported once per run rather than once per chapter.
    It never touches the device: each job still runs in a fresh child forked from it. Started
    again if it died; it exits when its input closes or this process dies."""
    global _LAUNCHER
    cache = compile_cache.env_vars(env)
    if _LAUNCHER is not None and _LAUNCHER[2] != cache:
        _LAUNCHER[0].stdin.close()  # another report's machine or code: its own cache folder
        _LAUNCHER = None
    if _LAUNCHER is None or _LAUNCHER[0].poll() is not None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lib.measure.worker"],
            cwd=ROOT,
            env=child_env(env),
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        lines: list[str] = []
        threading.Thread(target=drain, args=(proc.stderr, lines), daemon=True).start()
        _LAUNCHER = (proc, lines, cache)
    return _LAUNCHER[:2]


def drain(stream, lines: list[str]) -> None:
    """The launcher's stderr, kept for the error record of a job that fails; its own notes also go to the log."""
    for line in stream:
        lines.append(line)
        if line.startswith(protocol.LAUNCHER_NOTE):
            print(line.rstrip(), flush=True)


def _collect(params, job, verdict, stderr) -> dict:
    out = Path(job["out"])
    if out.exists():
        return json.loads(out.read_text())
    tail = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    # The exception line, not a launcher's closing banner (torchrun ends with a box of '=').
    errors = [ln for ln in tail if re.search(r"\w(Error|Exception): \S", ln)]
    ranked = [ln for ln in errors if ln.startswith("[rank")]
    message = (ranked or errors or tail or ["no message"])[-1]
    rec = error_record(
        params,
        job["stage"],
        job["batch_size"],
        f"measurement process failed ({verdict}): {message}",
        stderr,
        job.get("stamp"),
    )
    store.write_record(out, rec)
    return rec
