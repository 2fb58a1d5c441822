"""The measurements behind the chapters' explanations, beyond the stage x batch matrix, each
run through the same launcher as the stages (a fresh process per point, resumable):

- seq_jobs:    naive attention vs SDPA across sequence lengths at constant tokens per step
               (flash chapter);
- gemm_job:    the lm_head GEMM across vocabulary widths around 50257, plus the kernels cuBLAS
               picks (vocab chapter; lib/measure/gemm_sweep.py);
- vocab_under_compile: the compile stage at the unpadded vocabulary (compile chapter: does
               padding still pay once inductor has fused the rest?);
- batch_sweep: the fastest verified stage at growing batch sizes above the matrix's until memory runs out
               (batch-sweep chapter, which also names the recommended configuration);
- sdpa_jobs:   the flash stage with each SDPA backend forced (flash chapter);
- ce_filter_job: the fused cross-entropy stage with the library's default gradient filter (DEPTH=full);
- repeats, crosscheck_jobs: what the recommendation rests on: the top configurations and the timing
               claims in fresh processes again (noise); lib/run/parity_runs.py: the parity test against the
               reference stage; then, for the stage the test lets stand, the plain loop beside the harness
               (lib/train/plain_loop.py) and lib/run/recipe.py: the recommendation at GPT-2's global batch,
               and its leave-one-out ablation.

Results live in results/<kind>/ so they never mix with the matrix in results/*.json."""

from __future__ import annotations

import copy

from lib.core import chapters, config, record, stages
from lib.core.paths import resolve
from lib.core.params import Params
from lib.results import decide, store
from lib.run import ddp_launch, ddp_nodes, parity_runs, recipe, repeat_runs, runner, size_sweep
from lib.run.jobs import PLAIN_LOOP_SWITCHES, folder, make_job, plain_loop_source, plain_loop_can


def seq_jobs(params: Params, report_dir) -> list[dict]:
    """Naive attention (the BF16 stage) against SDPA (the flash stage) at every sequence length
    in evidence.seq_lens, with B = seq_tokens / T so every point trains the same tokens per step.
    Fewer steps than the matrix: this is a curve, not a verdict."""
    ev, env = params.evidence, runner.environment(report_dir)
    jobs = []
    for t in ev.seq_lens:
        p = copy.deepcopy(params)
        p.run.seq_len = t
        p.model.block_size = max(t, p.model.block_size)
        p.run.warmup_steps, p.run.timed_steps = ev.seq_warmup_steps, ev.seq_timed_steps
        batch = max(1, ev.seq_tokens // t)
        for key in ("bf16", "flash"):
            jobs.append(
                make_job(
                    p,
                    env,
                    key,
                    batch,
                    folder(report_dir, "seq") / f"{key}__t{t}.json",
                    variant=f"T={t}",
                    profile=False,
                    energy=False,
                )
            )
    return jobs


def sdpa_jobs(params: Params, report_dir) -> list[dict]:
    """The flash stage with each SDPA backend forced in turn, at the cross-check batch: what each
    costs on this device beside PyTorch's own choice (the stage itself). A backend the device or
    the shape does not support comes back 'not applicable' with SDPA's reason."""
    env, b = runner.environment(report_dir), crosscheck_batch(params)
    return [
        make_job(
            params,
            env,
            "flash",
            b,
            folder(report_dir, "sdpa") / f"flash-{name}__b{b}.json",
            variant=f"SDPA {name}",
            stage_overrides={"sdpa_backend": name},
            profile=False,
            energy=False,
        )
        for name in ("flash", "cudnn", "efficient")
    ]


def ce_filter_job(params: Params, report_dir) -> dict:
    """The fused cross-entropy stage with cut-cross-entropy's default gradient filter, at the
    matrix's first batch size: what the exact form the stage uses costs, and what the filter does
    to the loss."""
    b = params.run.batch_sizes[0]
    return make_job(
        params,
        runner.environment(report_dir),
        "fused_ce",
        b,
        folder(report_dir, "variants") / f"fused_ce-filtered__b{b}.json",
        variant="default gradient filter",
        stage_overrides={"loss": "cut_cross_entropy_filtered"},
        profile=False,
        energy=False,
    )


def gemm_widths(real_vocab: int, padded_vocab: int) -> list[int]:
    """The widths the lm_head GEMM sweep (lib/measure/gemm_sweep.py) times: every multiple of 8 within +-128 of the
    padded width, plus the real (usually odd) width. Here, not there: importing that module imports torch, which
    cost every resumed call of an H100 report 3.3 s in the vocab chapter for this list alone."""
    lo, hi = padded_vocab - 128, padded_vocab + 128
    first = -(-lo // 8) * 8  # round lo up to a multiple of 8
    return sorted(set(range(first, hi + 1, 8)) | {real_vocab})


def gemm_job(params: Params, report_dir) -> dict:
    """The lm_head GEMM (m = gemm_batch x T, k = n_embd, n = vocabulary width) forward and
    backward at every multiple of 8 around the padded width, and at the real vocabulary."""
    m, ev, env = params.model, params.evidence, runner.environment(report_dir)
    spec = {
        "m": ev.gemm_batch * params.run.seq_len,
        "k": m.n_embd,
        "ns": gemm_widths(m.vocab_size, m.padded_vocab_size),
        "kernel_ns": (m.vocab_size, m.padded_vocab_size),
        "dev": {"rocm": "cuda"}.get(params.backend, params.backend),
    }
    job = make_job(
        params,
        env,
        "vocab",
        ev.gemm_batch,
        folder(report_dir, "gemm") / "lm_head.json",
        kind="gemm",
        variant="lm_head GEMM sweep",
        spec=spec,
    )
    job["fingerprint"] += "-" + store.short_hash(spec)
    return job


def vocab_under_compile(params: Params, report_dir, force: bool = False) -> dict | None:
    """The compile stage once more with the vocabulary left at 50257, at the smallest batch the
    compile stage measured (the cheapest compilation), so the chapter can set padded against
    unpadded under compile."""
    env = runner.environment(report_dir)
    done = [
        r
        for r in store.load_records(resolve(report_dir) / "results")
        if r["stage"] == "compile" and r["status"] == record.Status.OK
    ]
    if not done:
        return None
    batch = min(r["batch_size"] for r in done)
    job = make_job(
        params,
        env,
        "compile",
        batch,
        folder(report_dir, "variants") / f"compile-unpadded__b{batch}.json",
        variant="unpadded vocab",
        stage_overrides={"padded_vocab": False},
        profile=False,
    )
    jobs = [job]
    # The control for why compiled padding is worth less than eager: Inductor pads a misaligned matmul
    # itself (its shape_padding), so the unpadded run is timed once more with that switched off.
    if config.runs_evidence(params, "shape_padding_control"):
        flags = stages.get("compile").backend_flags + ((SHAPE_PADDING, False),)
        jobs.append(
            make_job(
                params,
                env,
                "compile",
                batch,
                folder(report_dir, "variants") / f"compile-unpadded-no-shape-padding__b{batch}.json",
                variant=NO_SHAPE_PADDING,
                stage_overrides={"padded_vocab": False, "backend_flags": flags},
                profile=False,
            )
        )
    return runner.measure_jobs(jobs, env, force=force)[job["out"]]


SHAPE_PADDING = "torch._inductor.config.shape_padding"
NO_SHAPE_PADDING = "unpadded vocab, Inductor shape padding off"


def batch_sweep(params: Params, report_dir, force: bool = False) -> list[dict]:
    """The fastest verified single-GPU stage at the batch sizes of evidence.sweep_batch_sizes above the largest
    the matrix measured for it (below it the matrix's own points draw the curve), ascending, one process each,
    until the first that runs out of memory or that the memory measured so far says cannot fit
    (predicted_oom: written as a record that says it was not measured, and why). Verified includes the parity
    runs measured so far: the stage whose test held (recommend)."""
    report_dir = resolve(report_dir)
    env = runner.environment(report_dir)
    matrix = store.load_records(report_dir / "results")
    best = decide.recommended(store.decision_records(report_dir / "results"), params)
    if best is None:
        return []
    key = best["stage"]
    out = sorted((r for r in matrix if r["stage"] == key), key=lambda r: r["batch_size"])
    if any(r["status"] == record.Status.OOM for r in out):
        return out
    top = max((r["batch_size"] for r in out), default=0)
    # a micro-batch that cannot reach the global batch by whole accumulation steps is never the recipe: not swept
    for b in sorted(b for b in params.evidence.sweep_batch_sizes if b > top and params.micro_steps(b)):
        job = make_job(
            params,
            env,
            key,
            b,
            folder(report_dir, "sweep") / f"{key}__b{b}.json",
            variant=record.SWEEP,
            sdpa_probe=False,
        )
        job["not_applicable"] = predicted_oom(out, b, (env.get("device") or {}).get("memory_bytes"), params)
        rec = runner.measure_jobs([job], env, force=force)[job["out"]]
        out.append(rec)
        if rec["status"] in (record.Status.OOM, record.Status.NOT_APPLICABLE):
            break
    return out


# The device memory a configuration used, most complete first: NVML's sampled peak (every process, the CUDA
# context and library workspaces), the device's use after the run, the caching allocator's peak.
MEMORY_KEYS = ("mem_device_sampled_peak_bytes", "mem_device_bytes", "mem_allocator_bytes")


def predicted_oom(points: list[dict], batch: int, device_bytes: int | None, params: Params) -> str | None:
    """Why `batch` is not worth a process, or None: the device memory of the two largest batch sizes that ran,
    extended in a straight line, exceeds the device's memory by more than evidence.sweep_oom_margin (a fraction)
    at `batch`. Activation memory grows linearly with the batch, so the line is a fair guide; the margin keeps a
    batch that might just fit in the sweep."""
    ran = [
        (r["batch_size"], used)
        for r in points
        if r.get("status") == record.Status.OK and (used := next((r[k] for k in MEMORY_KEYS if r.get(k)), None))
    ]
    margin = params.evidence.sweep_oom_margin
    if margin is None or not device_bytes or len(ran) < 2:
        return None
    (b1, m1), (b2, m2) = ran[-2:]
    per_sequence = (m2 - m1) / (b2 - b1)
    predicted = m2 + per_sequence * (batch - b2)
    if predicted <= device_bytes * (1 + margin):
        return None
    gib = 2**30
    return (
        f"{record.PREDICTED_OOM}: {m2 / gib:.1f} GiB of peak device memory at B={b2}, {per_sequence / gib:.2f} GiB more per "
        f"sequence from B={b1}, so about {predicted / gib:.0f} GiB at B={batch}, beyond the device's "
        f"{device_bytes / gib:.1f} GiB by more than {margin:.0%}"
    )


def crosscheck_jobs(params: Params, report_dir, configs: list[tuple[str, int]]) -> list[dict]:
    """The plain loop (lib/train/plain_loop.py) at each (stage, batch) of `configs`, in fresh processes.
    Stages the plain loop cannot express (plain_loop_can) are left out."""
    env = runner.environment(report_dir)
    source = plain_loop_source()
    jobs = []
    for key, batch in dict.fromkeys(configs):
        stage = stages.get(key)
        if not plain_loop_can(stage) or key not in params.stages:
            continue
        job = make_job(
            params,
            env,
            key,
            batch,
            folder(report_dir, "crosscheck") / f"{key}__b{batch}.json",
            kind="plain",
            variant="plain loop",
            switches={s: getattr(stage, s) for s in PLAIN_LOOP_SWITCHES},
        )
        job["fingerprint"] += "-" + source
        jobs.append(job)
    return jobs


def crosscheck_batch(params: Params) -> int:
    """Where the flash and vocab chapters run the plain loop: evidence.crosscheck_batch if the
    matrix measures it, else the matrix's first batch size."""
    b = params.evidence.crosscheck_batch
    return b if b in params.run.batch_sizes else params.run.batch_sizes[0]


def recommend(params: Params, report_dir, force: bool = False) -> list[dict]:
    """The batch-sweep chapter: what the recommendation rests on, tested before it is swept (the order
    evidence.parity_before_sweep states). The repeats read the ranking with its noise (and measure the loss noise the
    matrix's gate allows for); the fastest verified stage takes its parity test at the batch parity_runs.chain_batch
    names (evidence.parity_batch, in micro-batches that fit); where the test does not let it stand, the next verified
    stage is tested in its turn at that batch. Only the stage whose test holds is swept, its sweep's points repeated
    by the same rule, and the tie rule names its batch: a stage that cannot be recommended is never swept (on an H100
    the two FP8 stages' sweeps and their repeats cost about 150 s of a report). Then, for that stage alone, the plain
    loop beside the harness and the recipe with its leave-one-out. Every step reads the records, so a run cut
    anywhere resumes on the same path."""
    env = runner.environment(report_dir)

    def decided():
        return decide.recommended(store.decision_records(resolve(report_dir) / "results"), params)

    held = None
    for _ in stages.single_gpu(params.stages):
        repeat_runs.measure(params, report_dir, force=force)
        best = decided()
        if best is None:
            return []
        parity_runs.measure(params, report_dir, force=force)
        held = decided()
        if held is None or held["stage"] == best["stage"]:
            break
    if held is None:
        return []
    swept = batch_sweep(params, report_dir, force=force)
    # The sweep's points enter the ranking, and the tie rule reads them.
    repeat_runs.measure(params, report_dir, force=force)
    held = decided()
    # The plain loop beside the harness only at the recommendation the parity test let stand (on an H100 the FP8
    # lm_head's test came back undecided, and a cross-check spent on it served nothing).
    runner.measure_jobs(crosscheck_jobs(params, report_dir, [(held["stage"], held["batch_size"])]), env, force=force)
    recipe.measure(params, report_dir, held, force=force)
    return swept


def ddp_chapter(params: Params, report_dir, force: bool = False) -> list[dict]:
    """The DDP chapter: GPT-2's batch over 2, 4, ... GPUs and the host's own count (the scaling curve, each point
    against the same sitting's one-GPU recipe), then, on a host of four or more (an even count), two nodes rehearsed
    on it; on one GPU, the stage's 'not applicable' record."""
    points = chapters.ddp_points(int(runner.environment(report_dir)["device"].get("count") or 1))
    if not points:
        return [ddp_launch.run_ddp(params, report_dir, force=force)]
    return [
        ddp_launch.run_ddp(params, report_dir, nproc=n, force=force)
        if nodes == 1
        else ddp_nodes.rehearse_two_nodes(params, report_dir, n // nodes, force=force)
        for n, nodes in points
    ]


def measure_chapter(key: str, params: Params, report_dir, force: bool = False):
    """Everything one chapter measures: its stage's configurations and the evidence behind its
    explanation. `make report` calls this for every chapter before it draws them; a notebook run by
    hand calls it for its own. The report's params.json is the CLI's (written before measuring);
    a folder measured by hand gets the params of its first measurement."""
    params_file = resolve(report_dir) / "params.json"
    if not params_file.exists():
        store.write_atomic(params_file, params)
    if key == "batch_sweep":
        return recommend(params, report_dir, force)
    if key == "size_sweep":
        return size_sweep.measure(params, report_dir, force=force)
    if stages.get(key).multi_gpu:
        return ddp_chapter(params, report_dir, force)
    # The chapter's evidence that does not need the stage's own results runs in the same launcher,
    # the plain loop beside the harness in the flash and vocab chapters.
    extra = {
        "flash": lambda: (
            (seq_jobs(params, report_dir) if config.runs_evidence(params, "seq_curve") else [])
            + sdpa_jobs(params, report_dir)
        ),
        "vocab": lambda: [gemm_job(params, report_dir)],
        "fused_ce": lambda: [ce_filter_job(params, report_dir)] if config.runs_evidence(params, "ce_filter") else [],
    }
    jobs = extra[key]() if key in extra else []
    if key in ("flash", "vocab"):
        jobs += crosscheck_jobs(params, report_dir, [(key, crosscheck_batch(params))])
    recs = runner.run_stage(key, params, report_dir, force=force, extra_jobs=jobs)
    if key == "compile":
        vocab_under_compile(params, report_dir, force=force)
    return recs
