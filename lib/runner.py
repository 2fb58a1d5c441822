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

from . import compile_cache, faults, provenance, results, stages
from .paths import ROOT, resolve

DDP_MEMORY_SHARE = 0.85  # the DDP stage replicates only configurations that left this much headroom


def capture_environment() -> dict:
    """Device and software, captured in a child process: the caller must never hold a GPU
    context while configurations are measured. Raises RuntimeError with the child's last line."""
    proc = subprocess.run([sys.executable, "-m", "lib.environment"], cwd=ROOT, capture_output=True,
                          text=True, env=child_env())
    if proc.returncode:
        lines = proc.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit {proc.returncode}")
    return json.loads(proc.stdout)


def environment(report_dir) -> dict:
    """The environment record of this report, captured on first use."""
    path = resolve(report_dir) / "environment.json"
    if not path.exists():
        results.write_atomic(path, capture_environment())
    env = json.loads(path.read_text())
    if "packages" not in env:  # a report begun before the lever packages were recorded
        from .environment import packages

        env["packages"] = packages()
        results.write_atomic(path, env)
    return env


def child_env(device_env: dict | None = None) -> dict:
    """The environment of a child process; a measuring one (given the report's environment record)
    also points at the run's compile cache."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if device_env is not None:
        env.update(compile_cache.env_vars(device_env))
    return env


OBSERVERS: list = []  # who hears of each record as the run goes (run_log.RunLog); set by the pipeline


def _finished(env: dict, rec: dict, kept: bool = False) -> None:
    """Every record of the run, measured or kept: its line with the progress, the cache ledger, run.json."""
    if not kept:
        compile_cache.remember(env, rec)
    notes = [observer.record(rec, kept) for observer in OBSERVERS]
    print(describe(rec) + ("  (kept from an earlier run)" if kept else "") + "".join(n for n in notes if n), flush=True)
    for observer in OBSERVERS:
        observer.check_budget()


def describe(rec: dict) -> str:
    head = f"{rec['stage']:>6} B={rec['batch_size']:<4}" + (f" [{rec['variant']}]" if rec.get("variant") else "")
    if rec.get("kind") == "gemm" and rec["status"] == results.Status.OK:
        widths = sorted({p["n"] for p in rec["points"]})
        return (f"lm_head GEMM m={rec['m']} k={rec['k']}: {len(widths)} widths {widths[0]}..{widths[-1]} x "
                f"{', '.join(rec['dtypes'])} in {rec.get('wall_s', 0):.0f} s")
    if rec.get("kind") == "plain" and rec["status"] == results.Status.OK:
        return (f"{head} {rec['ms_per_step']:9.2f} ms/step  {rec['tokens_per_s']:>11,.0f} tok/s  (the plain loop; "
                f"{rec['synced_median_ms']:.2f} ms synchronised every step)")
    if rec.get("kind") == "parity" and rec["status"] == results.Status.OK:
        return (f"{head} {rec['steps']} steps x{rec['micro_steps']} micro-batches: final loss {rec['final_loss']:.3f}, "
                f"held-out loss {rec['held_out_loss']:.3f}")
    if rec["status"] == results.Status.OK and rec.get("world_size"):
        eff = rec.get("scaling_efficiency")
        return (f"{head} {rec['median_ms']:9.2f} ms/step  {rec['tokens_per_s']:>11,.0f} tok/s on {rec['world_size']} ranks "
                f"({rec['per_gpu_tokens_per_s']:,.0f} per rank, scaling efficiency "
                f"{'n/a' if eff is None else f'{eff * 100:.1f} %'}, all-reduce {rec['allreduce_share'] * 100:.1f} % of the step)")
    if rec["status"] in results.TIMED:
        mem = rec.get("mem_allocator_bytes") or rec.get("mem_device_bytes") or 0
        extra = "  DIVERGED" if rec["status"] == results.Status.DIVERGED else ""
        return (f"{head} {rec['median_ms']:9.2f} ms/step  {rec['tokens_per_s']:>11,.0f} tok/s  "
                f"cv {rec['cv']*100:4.1f}%  mem {mem/2**30:6.2f} GiB  loss {rec.get('final_loss', float('nan')):.3f}{extra}")
    return f"{head} {rec['status'].upper()}: {rec.get('reason')}"


def error_record(params: dict, stage_key: str, batch: int, reason: str, stderr: str = "", stamp: dict | None = None) -> dict:
    rec = results.base_record(params, stages.get(stage_key), batch)
    rec.update(status=results.Status.ERROR, reason=reason, stderr_tail=stderr[-3000:], provenance=stamp)
    return rec


def reusable(out: Path, fp: str) -> dict | None:
    """A valid earlier result for exactly this configuration on this machine, or None."""
    try:
        rec = json.loads(out.read_text())
    except (OSError, ValueError):
        return None
    if rec.get("schema_version") == results.SCHEMA_VERSION and rec.get("fingerprint") == fp \
            and rec.get("status") in results.REUSABLE:
        return rec
    return None


def run_stage(stage_key: str, params: dict, report_dir, timeout_s: float = 1800,
              force: bool = False, extra_jobs=()) -> list[dict]:
    """Measure every batch size of one stage, each in its own process; prints a line each.
    A configuration whose valid result already exists for the same workload and machine is
    kept (resume), unless `force`. `extra_jobs` (a chapter's evidence that does not depend on
    the stage's results) run in the same launcher: one PyTorch import instead of two."""
    if faults.get(stage_key) == "stage-raise":
        raise RuntimeError(f"injected fault: stage {stage_key} raised before measuring")
    if stages.get(stage_key).multi_gpu:
        return [run_ddp(params, report_dir, timeout_s=timeout_s, force=force)]
    jobs = stage_jobs(stage_key, params, report_dir)
    recs = measure_jobs(jobs + list(extra_jobs), environment(report_dir), timeout_s=timeout_s, force=force)
    return [recs[j["out"]] for j in jobs]


def stage_jobs(stage_key: str, params: dict, report_dir) -> list[dict]:
    """The stage's configuration at every batch size, as measurement jobs."""
    report_dir = resolve(report_dir)
    env = environment(report_dir)
    stage = stages.get(stage_key)
    skipped = (params.get("skip") or {}).get(stage_key)
    return [{"params": params, "stage": stage_key, "batch_size": batch,
             "out": str(results.record_path(report_dir / "results", stage_key, batch)),
             "fingerprint": results.fingerprint(params, env, stage, batch),
             "not_applicable": skipped and f"not measured by the {params['name']} profile: {skipped}"}
            for batch in params["run"]["batch_sizes"]]


def measure_jobs(jobs: list[dict], env: dict, timeout_s: float = 1800, force: bool = False) -> dict:
    """Run measurement jobs (dicts for lib.measure: params, stage, batch_size, out, fingerprint,
    optional kind / variant / stage_overrides / profile / energy / stop_if_oom) in one launcher,
    each in a fresh child. Returns {out path: record}. Kept results are reused unless `force`;
    a stage that cannot run on this device gets a 'not applicable' record without a process.
    After a job marked stop_if_oom runs out of memory the launcher skips the remaining jobs
    (a batch-size sweep goes no further); they get no record."""
    recs, todo = {}, []
    stamp = provenance.run_stamp(env)
    cold = compile_cache.ledger(env)
    kept_oom = False  # a sweep whose kept result ran out of memory goes no further on resume
    for job in jobs:
        out = Path(job["out"])
        if kept_oom and job.get("stop_if_oom"):
            continue
        kept = None if force else reusable(out, job["fingerprint"])
        if kept:
            recs[job["out"]] = kept
            kept_oom = bool(job.get("stop_if_oom")) and kept.get("status") == results.Status.OOM
            _finished(env, kept, kept=True)
            continue
        if out.exists():
            results.supersede(out)  # never let an older result stand in for this run's, nor lose it
        stage = stages.get(job["stage"])
        reason = job.get("not_applicable") or stage.not_applicable(env["device"])
        if reason:
            rec = results.base_record(job["params"], stage, job["batch_size"])
            rec.update(status=results.Status.NOT_APPLICABLE, reason=reason, fingerprint=job["fingerprint"],
                       variant=job.get("variant"), stage_overrides=job.get("stage_overrides"), provenance=stamp)
            results.write_record(out, rec)
            recs[job["out"]] = rec
            _finished(env, rec)
        else:
            todo.append({**{k: v for k, v in job.items() if k != "not_applicable"}, "stamp": stamp,
                         "cold_compile": cold.get(job["fingerprint"])})
    if not todo:
        return recs
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        # The fault injection of this moment travels with the batch: the launcher outlives the
        # environment it was started in.
        json.dump({"jobs": todo, "timeout_s": timeout_s, "faults": os.environ.get(faults.VAR, "")}, f)
    proc, stderr_lines = _launcher(env)
    stderr_lines.clear()
    finished = False
    try:
        proc.stdin.write(f.name + "\n")
        proc.stdin.flush()
        for line in proc.stdout:  # one line per finished configuration, as it finishes
            if line.startswith(results.BATCH_DONE):
                finished = True
                break
            if not line.startswith(results.DONE_PREFIX):
                continue
            msg = json.loads(line[len(results.DONE_PREFIX):])
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
    stopped = any(j.get("stop_if_oom") and recs.get(j["out"], {}).get("status") == results.Status.OOM for j in todo)
    for job in todo:  # the launcher itself died: what it did not report is an error
        if job["out"] not in recs and not (stopped and job.get("stop_if_oom")):
            recs[job["out"]] = _collect(job["params"], job, f"launcher exited with {proc.poll()}",
                                        "".join(stderr_lines))
            _finished(env, recs[job["out"]])
    return recs


_LAUNCHER: tuple | None = None  # (process, its stderr lines, its compile cache): one per process that measures


def _launcher(env: dict) -> tuple:
    """The measurement launcher (`python -m lib.measure`), started on first use and kept for
    every later batch of jobs, so PyTorch is imported once per run rather than once per chapter.
    It never touches the device: each job still runs in a fresh child forked from it. Started
    again if it died; it exits when its input closes or this process dies."""
    global _LAUNCHER
    cache = compile_cache.env_vars(env)
    if _LAUNCHER is not None and _LAUNCHER[2] != cache:
        _LAUNCHER[0].stdin.close()  # another report's machine or code: its own cache folder
        _LAUNCHER = None
    if _LAUNCHER is None or _LAUNCHER[0].poll() is not None:
        proc = subprocess.Popen([sys.executable, "-m", "lib.measure"], cwd=ROOT, env=child_env(env), text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
        _LAUNCHER = (proc, lines, cache)
    return _LAUNCHER[:2]


def _collect(params, job, verdict, stderr) -> dict:
    out = Path(job["out"])
    if out.exists():
        return json.loads(out.read_text())
    tail = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    # The exception line, not a launcher's closing banner (torchrun ends with a box of '=').
    errors = [ln for ln in tail if re.search(r"\w(Error|Exception): \S", ln)]
    ranked = [ln for ln in errors if ln.startswith("[rank")]
    message = (ranked or errors or tail or ["no message"])[-1]
    rec = error_record(params, job["stage"], job["batch_size"], f"measurement process failed ({verdict}): {message}",
                       stderr, job.get("stamp"))
    results.write_record(out, rec)
    return rec


# Keep NVLink multicast off (shared hosts: a program using it can take GPUs out of service).
NVLINK_MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _torchrun(params: dict, job: dict, n: int, out: Path, timeout_s: float, launch: dict | None = None) -> dict | None:
    """lib.ddp under torchrun with `n` processes on this node; the record it wrote, or an
    error/OOM record. On a node other than 0 of a multi-node `launch` there is no record: None
    when its ranks ran, RuntimeError with the failing line when they did not."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    run_env = {**child_env(job.get("device_env")), **NVLINK_MULTICAST_OFF}
    run_env.setdefault("OMP_NUM_THREADS", "1")
    try:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", *_launch_args(launch, job, timeout_s),
                               f"--nproc_per_node={n}", "-m", "lib.ddp", f.name, str(out)],
                              cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=timeout_s)
        verdict, stderr = f"exit {proc.returncode}", proc.stderr
    except subprocess.TimeoutExpired as e:
        verdict, stderr = f"timed out after {timeout_s:.0f} s", str(e.stderr or "")
    finally:
        os.unlink(f.name)
    if (launch or {}).get("node_rank"):
        if verdict != "exit 0":
            lines = [ln.strip() for ln in stderr.splitlines() if re.search(r"\w(Error|Exception): \S", ln)]
            raise RuntimeError(f"DDP ranks of node {launch['node_rank']} failed ({verdict}): "
                               f"{(lines or ['no message'])[-1]}")
        return None
    rec = _collect(params, {"stage": "ddp", "batch_size": job["batch_size"], "out": str(out), "stamp": job.get("stamp")},
                   verdict, stderr)
    if rec["status"] == results.Status.ERROR and "out of memory" in stderr.lower():
        rec.update(status=results.Status.OOM, reason=f"out of memory on at least one of {n} rank(s)")
        results.write_record(out, rec)
    return rec


RDZV_WAIT_S = 900  # how long a node waits at the rendezvous for the others (node 0 first times one rank alone)


def _launch_args(launch: dict | None, job: dict, timeout_s: float) -> list[str]:
    """torchrun's arguments for where the ranks run: this host alone (`--standalone`), or this node
    of several meeting at RDZV through the c10d rendezvous. The rendezvous id comes from the
    workload (profile, model, run), so every node of one report computes the same id."""
    if not launch or launch["nnodes"] == 1:
        return ["--standalone"]
    params = job["params"]
    rdzv_id = "gpt2-levers-" + results.short_hash({"profile": params["name"], "model": params["model"],
                                                    "run": params["run"], "nnodes": launch["nnodes"]})
    wait = int(min(RDZV_WAIT_S, timeout_s / 2))
    return [f"--nnodes={launch['nnodes']}", f"--node_rank={launch['node_rank']}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={launch['rdzv']}", f"--rdzv_id={rdzv_id}",
            f"--rdzv_conf=join_timeout={wait},read_timeout={wait}"]


def _ddp_gpus(path: Path) -> int | None:
    """The GPU count of a DDP record: from its name (__g<N>), or, for a record named before the
    count was (ddp__b<B>.json, as committed reports hold), its world size; None when unknown
    (an error or 'not applicable' record of that kind)."""
    named = re.search(r"__g(\d+)\.json$", path.name)
    if named:
        return int(named.group(1))
    try:
        return json.loads(path.read_text()).get("world_size")
    except (OSError, ValueError):
        return None


def run_ddp(params: dict, report_dir, nproc: int | None = None, timeout_s: float = 1800,
            force: bool = False, launch: dict | None = None) -> dict | None:
    """The multi-GPU stage: torchrun with one process per GPU, at the best single-GPU
    configuration measured so far (results.best_config: fastest, loss verified), its per-GPU
    batch fixed. `nproc` forces a process count (the CPU test runs 2 gloo processes); otherwise
    it is the host's GPU count. The record is named by its GPU count (NNODES x nproc), so a folder
    keeps one per count: the points of the report's scaling curve.

    `launch` (cli_args.check_launch; None: this host alone) may make this one node of several:
    every node runs `make report` with the same inputs, its own NODE_RANK and the same RDZV, and
    torchrun's c10d rendezvous joins their ranks into one job of NNODES x nproc ranks (every rank
    runs node 0's configuration, lib/ddp.py). Node 0 alone measures the one-rank reference first
    and writes the record; any other node only contributes ranks: it writes no record and returns
    None (RuntimeError if its ranks failed). The other nodes wait up to RDZV_WAIT_S at the
    rendezvous, so a node 0 that keeps its record from an earlier run (no FORCE) leaves them
    waiting that long before they fail."""
    launch = launch or {"nnodes": 1, "node_rank": 0, "rdzv": None}
    nnodes, contributor = launch["nnodes"], launch["node_rank"] > 0
    report_dir = resolve(report_dir)
    env = environment(report_dir)
    stage = stages.get("ddp")
    decided = results.decision_records(report_dir / "results")
    # DDP adds gradient buckets and NCCL buffers: leave out configurations that already filled
    # the device, so the replicated one fits.
    total = env["device"].get("memory_bytes")
    roomy = lambda r: not total or (r.get("mem_device_bytes") or 0) < DDP_MEMORY_SHARE * total  # noqa: E731
    best = results.best_config(decided, params, eligible=roomy)
    if best is None:  # nothing verified (a report without the baseline): the fastest that ran
        ran = [r for r in decided if r.get("variant") is None and r.get("status") == results.Status.OK and not stages.is_multi_gpu(r.get("stage")) and roomy(r)]
        best = max(ran, key=lambda r: r["tokens_per_s"]) if ran else None
    base_key = best["stage"] if best else "vocab"
    batch = best["batch_size"] if best else params["run"]["batch_sizes"][0]
    # One record per GPU count, so hosts with 2, 4 and 8 GPUs resumed into one folder each add
    # their point to the scaling curve; what this run supersedes is this count's record at another
    # batch and an old-style record whose count is unknown.
    gpus = (nproc or env["device"].get("count", 1)) * nnodes
    out = results.record_path(report_dir / "results", "ddp", batch, gpus=gpus)
    for old in (report_dir / "results").glob("ddp__b*.json"):
        if old == out or _ddp_gpus(old) not in (gpus, None):
            continue
        if old == results.record_path(out.parent, "ddp", batch) and not out.exists():
            old.rename(out)  # named before the count was: its fingerprint below still decides whether it is kept
        else:
            results.supersede(old)
    fp = results.fingerprint(params, env, stage, batch) + f"-{base_key}-n{nproc or env['device'].get('count', 1)}" \
        + (f"-nodes{nnodes}" if nnodes > 1 else "")
    kept = None if force or contributor else reusable(out, fp)
    if kept:
        _finished(env, kept, kept=True)
        return kept
    # Several nodes of one GPU each are several GPUs: the job's world size decides.
    reason = None if nproc else stage.not_applicable({**env["device"], "count": env["device"].get("count", 1) * nnodes})
    if reason and contributor:
        print(f"   ddp node {launch['node_rank']}: not applicable ({reason}); node 0 records it", flush=True)
        return None
    if reason:
        rec = results.base_record(params, stage, batch)
        rec.update(status=results.Status.NOT_APPLICABLE, reason=reason, fingerprint=fp, provenance=provenance.run_stamp(env))
        results.write_record(out, rec)
        _finished(env, rec)
        return rec
    n = nproc or env["device"]["count"]
    job = {"params": params, "batch_size": batch, "base_stage": base_key, "fingerprint": fp, **launch,
           "stamp": provenance.run_stamp(env), "device_env": env, "cold_compile": compile_cache.ledger(env).get(fp),
           "single_gpu_tokens_per_s": (best.get("processes") or {}).get("median", best["tokens_per_s"]) if best else None}
    if out.exists():
        results.supersede(out)
    # The same DDP job on one rank first, so the scaling efficiency compares like with like (same
    # wrapper, same host, same minute) rather than against a row measured in another process or run.
    # It stays on this host alone; only node 0, which writes the record, needs it.
    if not contributor:
        with tempfile.TemporaryDirectory() as tmp:
            one = _torchrun(params, {**job, "nnodes": 1, "node_rank": 0, "rdzv": None}, 1, Path(tmp) / "one_rank.json",
                            timeout_s)
        if one["status"] == results.Status.OK:
            job["one_rank_tokens_per_s"] = one["tokens_per_s"]
    rec = _torchrun(params, job, n, out, timeout_s, launch)
    if rec is None:
        print(f"   ddp node {launch['node_rank']} of {nnodes}: contributed {n} rank(s) to the job; node 0 writes "
              "its record", flush=True)
        return None
    _finished(env, rec)
    return rec
