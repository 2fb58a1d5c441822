"""*What launches* the DDP stage: lib.measure.ddp under torchrun on this node's GPUs (or several
nodes'), at the recipe's configuration (the recommendation at GPT-2's global batch, its accumulation
steps shared among the ranks; recipe_target) or, without a recipe, the fastest single-GPU configuration
that leaves room (matrix_target). Fresh processes by the repeats' rule; the scaling efficiency against
that configuration on one GPU in the same sitting, and one rank of the same job beside it (efficiency)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from lib.core import provenance, record, stages
from lib.core.paths import ROOT, resolve
from lib.core.params import Params
from lib.measure import compile_cache
from lib.results import long_choice, noise, store
from lib.run import ddp_target, recipe, runner

DDP_MEMORY_SHARE = 0.85  # the DDP stage replicates only configurations that left this much headroom


# Keep NVLink multicast off (shared hosts: a program using it can take GPUs out of service).
NVLINK_MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _torchrun(
    params: Params, job: dict, n: int, out: Path, timeout_s: float, launch: dict | None = None
) -> dict | None:
    """lib.measure.ddp under torchrun with `n` processes on this node; the record it wrote, or an
    error/OOM record. On a node other than 0 of a multi-node `launch` there is no record: None
    when its ranks ran, RuntimeError with the failing line when they did not."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f, default=store.jsonable)
    run_env = {**runner.child_env(job.get("device_env")), **NVLINK_MULTICAST_OFF}
    run_env.setdefault("OMP_NUM_THREADS", "1")
    if (launch or {}).get("visible"):  # a node rehearsed on one host: its own GPUs of the host
        run_env["CUDA_VISIBLE_DEVICES"] = launch["visible"]
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                *_launch_args(launch, job, timeout_s),
                f"--nproc_per_node={n}",
                "-m",
                "lib.measure.ddp",
                f.name,
                str(out),
            ],
            cwd=ROOT,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        verdict, stderr = f"exit {proc.returncode}", proc.stderr
    except subprocess.TimeoutExpired as e:
        verdict, stderr = f"timed out after {timeout_s:.0f} s", str(e.stderr or "")
    finally:
        os.unlink(f.name)
    if (launch or {}).get("node_rank"):
        if verdict != "exit 0":
            lines = [ln.strip() for ln in stderr.splitlines() if re.search(r"\w(Error|Exception): \S", ln)]
            raise RuntimeError(
                f"DDP ranks of node {launch['node_rank']} failed ({verdict}): {(lines or ['no message'])[-1]}"
            )
        return None
    rec = runner._collect(
        params,
        {"stage": "ddp", "batch_size": job["batch_size"], "out": str(out), "stamp": job.get("stamp")},
        verdict,
        stderr,
    )
    if rec["status"] == record.Status.ERROR and "out of memory" in stderr.lower():
        rec.update(status=record.Status.OOM, reason=f"out of memory on at least one of {n} rank(s)")
        store.write_record(out, rec)
    return rec


RDZV_WAIT_S = 900  # how long a node waits at the rendezvous for the others (node 0 first times one rank alone)


def _launch_args(launch: dict | None, job: dict, timeout_s: float) -> list[str]:
    """torchrun's arguments for where the ranks run: this host alone (`--standalone`), or this node
    of several meeting at RDZV through the c10d rendezvous. The rendezvous id comes from the
    workload (profile, model, run), so every node of one report computes the same id."""
    if not launch or launch["nnodes"] == 1:
        return ["--standalone"]
    params = job["params"]
    rdzv_id = "gpt2-levers-" + store.short_hash(
        {
            "profile": params.name,
            "model": params.model,
            "run": params.run,
            "nnodes": launch["nnodes"],
            "process": job.get("repeat", 0),  # each fresh process meets at a rendezvous of its own
        }
    )
    wait = int(min(RDZV_WAIT_S, timeout_s / 2))
    return [
        f"--nnodes={launch['nnodes']}",
        f"--node_rank={launch['node_rank']}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={launch['rdzv']}",
        f"--rdzv_id={rdzv_id}",
        f"--rdzv_conf=join_timeout={wait},read_timeout={wait}",
    ]


def _ddp_nodes(path: Path) -> int:
    """The node count of a DDP record, from its name (__n<M>; one node where it names none)."""
    named = re.search(r"__n(\d+)\.json$", path.name)
    return int(named.group(1)) if named else 1


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


def plan(params: Params, report_dir, nproc: int | None, nnodes: int) -> dict:
    """What a DDP job of `nproc` ranks a node (the host's GPU count where None) over `nnodes` nodes runs, where its
    record goes and its fingerprint (run_ddp's; a rehearsal asks it before starting its second node)."""
    report_dir = resolve(report_dir)
    env = runner.environment(report_dir)
    stage = stages.get("ddp")
    decided = store.decision_records(report_dir / "results")
    # DDP adds gradient buckets and NCCL buffers: leave out configurations that already filled
    # the device, so the replicated one fits.
    total = env["device"].get("memory_bytes")
    roomy = lambda r: not total or (r.get("mem_device_bytes") or 0) < DDP_MEMORY_SHARE * total  # noqa: E731
    best = long_choice.choose(
        decided, params, store.load_evidence(report_dir / "results"), eligible=roomy, keep_timed=False
    )[0]
    if best is None:  # nothing verified (a report without the baseline): the fastest that ran
        ran = [
            r
            for r in decided
            if r.get("variant") is None
            and r.get("status") == record.Status.OK
            and not stages.is_multi_gpu(r.get("stage"))
            and roomy(r)
        ]
        best = max(ran, key=lambda r: r["tokens_per_s"]) if ran else None
    # GPT-2's global batch where the recipe measured it on one GPU and its sequences divide among the ranks:
    # the same configuration and tokens per optimizer step as its one-GPU reference (ddp_target.shared).
    gpus = (nproc or env["device"].get("count", 1)) * nnodes
    target = ddp_target.recipe_target(params, report_dir, gpus, roomy) or ddp_target.unshared(
        params, report_dir, gpus, best
    )
    base_key, batch, micro = target["stage"], target["batch_size"], target["micro_steps"]
    # One record per GPU count, so hosts with 2, 4 and 8 GPUs resumed into one folder each add
    # their point to the scaling curve; what this run supersedes is this count's record at another
    # batch and an old-style record whose count is unknown.
    out = store.record_path(report_dir / "results", "ddp", batch, gpus=gpus, nodes=nnodes)
    fp = (
        store.fingerprint(params, env, stage, batch)
        + f"-{base_key}-n{nproc or env['device'].get('count', 1)}-accum{micro}"
        + f"-ref{target['tokens_per_s'] or 0:.0f}"  # a re-measured reference re-measures the job: one sitting
        + (f"-nodes{nnodes}" if nnodes > 1 else "")
    )
    return {"env": env, "stage": stage, "target": target, "gpus": gpus, "out": out, "fp": fp, "report_dir": report_dir}


def run_ddp(
    params: Params,
    report_dir,
    nproc: int | None = None,
    timeout_s: float = 1800,
    force: bool = False,
    launch: dict | None = None,
) -> dict | None:
    """The multi-GPU stage: torchrun with one process per GPU, at the recipe's configuration where
    there is one (recipe_target), else the best single-GPU configuration measured so far
    (decide.best_config: fastest, loss verified) at its own batch. `nproc` forces a process count (the CPU test runs 2 gloo processes); otherwise
    it is the host's GPU count. The record is named by its GPU count (NNODES x nproc), so a folder
    keeps one per count: the points of the report's scaling curve.

    `launch` (cli_args.check_launch; None: this host alone) may make this one node of several:
    every node runs `make report` with the same inputs, its own NODE_RANK and the same RDZV, and
    torchrun's c10d rendezvous joins their ranks into one job of NNODES x nproc ranks (every rank
    runs node 0's configuration, lib/measure/ddp.py). Node 0 alone measures the one-rank reference first
    and writes the record; any other node only contributes ranks: it writes no record and returns
    None (RuntimeError if its ranks failed). The other nodes wait up to RDZV_WAIT_S at the
    rendezvous, so a node 0 that keeps its record from an earlier run (no FORCE) leaves them
    waiting that long before they fail."""
    launch = launch or {"nnodes": 1, "node_rank": 0, "rdzv": None}
    nnodes, contributor = launch["nnodes"], launch["node_rank"] > 0
    job_plan = plan(params, report_dir, nproc, nnodes)
    env, stage, target, gpus, out, fp = (job_plan[k] for k in ("env", "stage", "target", "gpus", "out", "fp"))
    report_dir, base_key, batch, micro = (
        job_plan["report_dir"],
        target["stage"],
        target["batch_size"],
        target["micro_steps"],
    )
    # Only node 0 writes records, so only it tidies them: two nodes rehearsed on one host share the folder, and a
    # second node moving the same record aside raced node 0 and left it waiting at the rendezvous (CI, stop 59).
    for old in (report_dir / "results").glob("ddp__b*.json"):
        if contributor or old == out or _ddp_gpus(old) not in (gpus, None) or _ddp_nodes(old) != nnodes:
            continue
        if old == store.record_path(out.parent, "ddp", batch) and not out.exists():
            old.rename(out)  # named before the count was: its fingerprint below still decides whether it is kept
        else:
            store.supersede(old)
    kept = None if force or contributor else runner.reusable(out, fp)
    if kept:
        runner._finished(env, kept, kept=True)
        return kept
    # Several nodes of one GPU each are several GPUs: the job's world size decides.
    reason = None if nproc else stage.not_applicable({**env["device"], "count": env["device"].get("count", 1) * nnodes})
    if reason and contributor:
        print(f"   ddp node {launch['node_rank']}: not applicable ({reason}); node 0 records it", flush=True)
        return None
    if reason:
        rec = store.base_record(params, stage, batch)
        rec.update(
            status=record.Status.NOT_APPLICABLE, reason=reason, fingerprint=fp, provenance=provenance.run_stamp(env)
        )
        store.write_record(out, rec)
        runner._finished(env, rec)
        return rec
    n = nproc or env["device"]["count"]
    job = {
        "params": job_params(params, batch, micro, gpus),
        "batch_size": batch,
        "micro_steps": micro,
        "base_stage": base_key,
        "fingerprint": fp,
        **launch,
        "stamp": provenance.run_stamp(env),
        "device_env": env,
        "cold_compile": compile_cache.ledger(env).get(fp),
    }
    if out.exists() and not contributor:
        store.supersede(out)
    # The same DDP job on one rank first: the wrapper's own cost, beside the efficiency (same host,
    # same minute). It stays on this host alone; only node 0, which writes the record, needs it. A job of several
    # nodes takes it from the one-node job of as many GPUs where that ran (the same micro-steps a rank: the same
    # one-rank job), so a rehearsal does not time it twice while its second node waits.
    one_rank = None if nnodes == 1 else _one_rank_of_one_node(out.parent, batch, gpus)
    if not contributor and one_rank is None:
        with tempfile.TemporaryDirectory() as tmp:
            one = _torchrun(
                params, {**job, "nnodes": 1, "node_rank": 0, "rdzv": None}, 1, Path(tmp) / "one_rank.json", timeout_s
            )
        if one["status"] == record.Status.OK:
            one_rank = one["tokens_per_s"]
    # Fresh processes by the repeats' rule (fixed before any number): two, a third (and later) only
    # where those so far differ by more than evidence.repeat_tolerance. Nodes other than 0 cannot see
    # the times, so a job of several nodes runs two on every node.
    ev, runs = params.evidence, []
    most = ev.repeats if nnodes == 1 else min(2, ev.repeats)
    for k in range(most):
        if k >= 2 and not noise.another_process([r["tokens_per_s"] for r in runs], ev.repeat_tolerance):
            break
        with tempfile.TemporaryDirectory() as tmp:
            rec = _torchrun(params, {**job, "repeat": k}, n, Path(tmp) / f"process{k}.json", timeout_s, launch)
        if rec is None:  # a node other than 0: its ranks ran; node 0 writes the record
            continue
        if rec["status"] != record.Status.OK:  # the failure is the record; earlier processes are not kept half
            store.write_record(out, rec)
            runner._finished(env, rec)
            return rec
        runs.append(rec)
    if contributor:
        print(
            f"   ddp node {launch['node_rank']} of {nnodes}: contributed {n} rank(s) to {most} processes; node 0 "
            "writes the record",
            flush=True,
        )
        return None
    rec = merge_processes(runs)
    rec.update(efficiency(rec, target, one_rank))
    store.write_record(out, rec)
    runner._finished(env, rec)
    return rec


def job_params(params: Params, batch: int, micro: int, gpus: int) -> Params:
    """A job that trains GPT-2's batch (accumulating, or one micro-step a rank over enough ranks) times global-batch
    steps, as the recipe it is set against does: reports/h100-x4's 4-GPU job, one micro-step a rank, took the
    matrix's 5 + 25 steps against its 1-GPU recipe's 3 + 8. A job of the matrix's batch keeps the matrix's steps."""
    whole = micro > 1 or batch * gpus * params.run.seq_len == params.evidence.global_batch_tokens
    return recipe.recipe_params(params) if whole else params


def _one_rank_of_one_node(results: Path, batch: int, gpus: int) -> float | None:
    """The one-rank figure of the one-node DDP record of `gpus` GPUs at `batch`, where it ran."""
    path = store.record_path(results, "ddp", batch, gpus=gpus, nodes=1)
    rec = json.loads(path.read_text()) if path.exists() else {}
    return rec.get("one_rank_tokens_per_s") if rec.get("status") == record.Status.OK else None


def merge_processes(runs: list[dict]) -> dict:
    """One DDP record from the records of its fresh processes (each rank 0's): the first process's
    record (its losses, memory, clocks, compile), the tokens/s and all-reduce share as the medians over
    the processes, and every process's own figures under `process_runs`."""
    tps = [r["tokens_per_s"] for r in runs]
    spread = noise.spread(tps)
    rec = dict(runs[0])
    world, tokens = rec["world_size"], rec["global_batch_tokens"]
    rec.update(
        tokens_per_s=spread["median"],
        per_gpu_tokens_per_s=spread["median"] / world,
        median_ms=tokens / spread["median"] * 1e3,
        allreduce_share=float(np.median([r["allreduce_share"] for r in runs])),
        processes=spread,
        process_runs=[
            {k: r.get(k) for k in ("tokens_per_s", "median_ms", "no_sync_median_ms", "allreduce_share", "first_step_s")}
            | {"compile_cache": (r.get("compile_cache") or {}).get("state")}
            for r in runs
        ],
    )
    return rec


def efficiency(rec: dict, target: dict, one_rank: float | None) -> dict:
    """Scaling efficiency, stated once: tokens/s per GPU over the single-GPU reference measured in this
    sitting (target: the recipe's side, or the matrix's best); one rank of this same DDP job beside it,
    named as such (what the DDP wrapper costs alone)."""
    per_gpu, single = rec["per_gpu_tokens_per_s"], target["tokens_per_s"]
    return {
        "single_gpu_tokens_per_s": single,
        "efficiency_reference": target["source"],
        "scaling_efficiency": per_gpu / single if single else None,
        "one_rank_tokens_per_s": one_rank,
        "one_rank_efficiency": per_gpu / one_rank if one_rank else None,
    }
