"""The parity test's runs (lib/results/parity.py decides on them): the recommended stage and its reference
stage, paired per seed on the same weights and data order, then their loss on held-out text.
Run by the batch-sweep chapter (lib/run/evidence.py recommend) before the sweep, on the fastest verified stage."""

from __future__ import annotations

from lib.core import config, data, record, stages
from lib.core.params import Params
from lib.core.paths import resolve
from lib.results import decide, parity, store
from lib.measure.series import restartable
from lib.run import runner
from lib.run.jobs import folder, make_job


def parity_jobs(params: Params, report_dir) -> list[dict]:
    """The parity test's next runs for the fastest verified stage (lib/results/parity.py), at the batch chain_batch
    names: the lever against its own stack, then its full stack against the canonical reference, each to its next
    look (evidence.parity_looks), both sides at the same batch, from the same weights on the same data order, then
    their loss on held-out text (parity_plan gives each run's length). Where a side ran out of memory at that batch
    in the matrix, it accumulates gradients over micro-batches that fit (the same update). None once both tests
    have decided, or one did not let the stage stand."""
    env = runner.environment(report_dir)
    recs = store.decision_records(resolve(report_dir) / "results")
    best = decide.recommended(candidates(recs, params), params)
    if best is None or stages.get(best["stage"]).reference == best["stage"]:
        return []
    key, batch = best["stage"], chain_batch(recs, params, best)
    # Before the sweep, the matrix's batches: a resumed run after the sweep plans the same runs.
    sized = matrix(recs) if getattr(params.evidence, "parity_before_sweep", False) else recs
    # The own stack only where this report timed it: a profile may leave it out, or it may not run here.
    own = [r for r in (stages.own_stack(key),) if r in params.stages and timed_batches(matrix(recs), r)]
    if key in parity.fallbacks(parity.checks(recs, params.evidence)) and not config.runs_evidence(
        params, "parity_alternatives"
    ):
        own = []  # the stack a lever fell back to: its own levers are covered by the canonical check at this depth
    for ref in dict.fromkeys(r for r in (*own, stages.get(key).reference) if r != key):
        test = parity.paired(recs, key, ref, batch, params.evidence)
        if test is None or test["verdict"] == parity.INCOMPLETE:
            micro = {s: micro_steps(sized, s, batch) for s in (key, ref)}
            wanted = test["wanted"] if test else params.evidence.parity_looks[0]
            return parity_plan(params, env, report_dir, key, batch, micro, seeds=wanted)
        if test["verdict"] != parity.HOLDS:
            return []
    return []


def micro_steps(recs: list[dict], stage: str, batch: int) -> int:
    """How many micro-batches `stage` accumulates to train at `batch`: the fewest whose size it was timed at or below
    (in one go, not a parity run), so that it fits; 1 where it was timed at `batch` itself."""
    largest = max(timed_batches(recs, stage), default=batch)
    return next(k for k in range(1, batch + 1) if batch % k == 0 and batch // k <= largest)


def candidates(recs: list[dict], params: Params) -> list[dict]:
    """The records the stage to test, and its batch, are chosen from: with evidence.parity_before_sweep, all but the
    batch sweep's, which runs only once a test has held (so a resumed run after the sweep plans the same test);
    else all."""
    if not getattr(params.evidence, "parity_before_sweep", False):
        return recs
    return [r for r in recs if r.get("variant") != record.SWEEP]


def inherited_batch(recs: list[dict], params: Params) -> int | None:
    """The batch size of a parity test that did not let its stage stand (read from the records, so a resumed run
    takes the same path as one that was not cut): where the stage that takes over is measured and tested; None
    before any such test."""
    return next((c["batch_size"] for c in parity.rejected(parity.checks(recs, params.evidence)).values()), None)


def chain_batch(recs: list[dict], params: Params, best: dict) -> int:
    """The batch size the parity test of `best` runs at: evidence.parity_batch where the params fix one (each side in
    micro-batches that fit: micro_steps); else, with evidence.parity_chain_batch, inherited_batch where the stage was
    timed there; else, with evidence.parity_before_sweep, the largest batch the matrix timed it at (the sweep comes
    after the test); else `best`'s own. One batch for every test of a report: the tie rule may recommend
    another batch of the stage that takes over, and a test there would run more steps on the same tokens (on an H100
    the loss-only forward's test moved from B=96 to B=64 on a 1.2 % near-tie between two machines, and stopped there
    on a spread its B=96 test did not have: reports/probes/warm-h100-2026-11-26)."""
    if getattr(params.evidence, "parity_batch", None):  # one batch for every test, in micro-batches that fit
        return params.evidence.parity_batch
    earlier = inherited_batch(recs, params) if getattr(params.evidence, "parity_chain_batch", False) else None
    if earlier in timed_batches(recs, best["stage"]):
        return earlier
    if getattr(params.evidence, "parity_before_sweep", False):  # the largest batch the matrix timed it at
        return max(timed_batches(matrix(recs), best["stage"]))
    return best["batch_size"]


def matrix(recs: list[dict]) -> list[dict]:
    """The stage x batch matrix's own records: no sweep point, no repeat, no evidence variant."""
    return [r for r in recs if r.get("variant") is None]


def timed_batches(recs: list[dict], stage: str) -> set[int]:
    """The batch sizes `stage` was timed at (matrix, sweep or repeat), completed."""
    return {
        r["batch_size"]
        for r in recs
        if r["stage"] == stage and r.get("status") == record.Status.OK and r.get("variant") in record.TIMING_VARIANTS
    }


def measure(params: Params, report_dir, force: bool = False) -> None:
    """The parity test's rounds (lib/results/sequential.py): each round runs the seeds up to the next look of the
    stage's next undecided test (its own stack first, then the canonical reference), then the records are read again;
    it ends when the stage's tests have decided or one did not let it stand. Seeds already run are kept (a run of the
    reference for one lever serves another's test)."""
    jobs, env, rounds = parity_jobs(params, report_dir), runner.environment(report_dir), 0
    while jobs:
        test, look = jobs[0]["stage"], max(j["seed_offset"] for j in jobs) + 1
        ref = next(j["stage"] for j in jobs if j["stage"] != test)
        print(f"    parity test: {test} against {ref}, to {look} seeds", flush=True)
        runner.measure_jobs(in_series(jobs, f"to {look} seeds"), env, force=force and not rounds)
        rounds += 1
        before, jobs = {j["fingerprint"] for j in jobs}, parity_jobs(params, report_dir)
        if {j["fingerprint"] for j in jobs} <= before:  # nothing new to run: a failed run cannot be made to pass here
            return


def in_series(jobs: list[dict], round_name: str) -> list[dict]:
    """A round's runs, one process a side (a parity series, lib/measure/series.py): the lever's runs in
    one, its reference's in another, seed after seed, each from its own seed's weights with no optimizer
    state carried over. One compilation a side instead of one a run; what the runs compute is unchanged
    (tests/test_parity.py holds a series to the losses of separate processes). A side that cannot restart
    (lib/measure/series.py, restartable: FP8) keeps a process a run. On a host of several GPUs each GPU has its own
    series a side (parity_plan spreads the seeds), and the launcher runs the GPUs' lanes at once."""
    sides = list(dict.fromkeys(j["stage"] for j in jobs))
    ordered = sorted(jobs, key=lambda j: (sides.index(j["stage"]), j.get("device") or 0))  # stable: seed order kept
    return [
        {**j, "series": f"{j['stage']} {round_name}{_on(j)}" if restartable(stages.get(j["stage"])) else None}
        for j in ordered
    ]


def _on(job: dict) -> str:
    return "" if job.get("device") is None else f" on GPU {job['device']}"


def devices(env: dict) -> int:
    """The GPUs a parity round spreads its seeds over: every GPU of the host (one on a CPU or a one-GPU host)."""
    dev = env.get("device") or {}
    return int(dev.get("count") or 1) if dev.get("backend") in ("cuda", "rocm") else 1


def parity_plan(
    params: Params, env: dict, report_dir, key: str, batch: int, micro: dict, seeds: int | None = None
) -> list[dict]:
    """The parity test's runs of stage `key` against the other stage `micro` names at `batch`, each side accumulating
    `micro[side]` micro-batches, at the first `seeds` seeds (evidence.parity_seeds where not given). Each run is
    evidence.parity_horizon_tokens long (the horizon, stated before any number), within
    evidence.parity_steps steps and evidence.parity_passes passes over the training text."""
    ev, ref = params.evidence, next(s for s in micro if s != key)
    train_tokens = len(data.split(data.load_tokens(params.model.vocab_size))[0])
    per_step = batch * params.run.seq_len
    horizon_steps = ev.parity_horizon_tokens // per_step
    steps = max(1, min(ev.parity_steps, horizon_steps, int(ev.parity_passes * train_tokens // per_step)))
    jobs, spread = [], devices(env)
    for seed in range(seeds or ev.parity_seeds):
        # Each seed reads the text from its own place, fixed by the seed alone (golden-ratio steps), so
        # adding seeds later leaves the earlier ones' runs valid.
        start = int((seed * 0.6180339887498949) % 1.0 * train_tokens)
        for s, m in ((key, micro[key]), (ref, micro[ref])):
            name = f"{s}__b{batch}" + (f"__s{seed}" if seed else "")
            j = make_job(
                params,
                env,
                s,
                batch,
                folder(report_dir, "parity") / f"{name}.json",
                kind="parity",
                variant="parity",
                steps=steps,
                held_out_batches=ev.held_out_batches,
                micro_steps=m,
                replicate=0,  # one run a side at each seed
                eval_batch=ev.crosscheck_batch,
                seed_offset=seed,
                data_start=start,
                passes=steps * per_step / train_tokens,
            )
            # "-r0": the suffix the runs already measured carry (a resume keeps them)
            j["fingerprint"] += f"-parity{steps}x{m}-lr-schedule-s{seed}-at{start}-r0"
            j["device"] = seed % spread if spread > 1 else None  # each GPU of the host its own seeds, at once
            jobs.append(j)
    return jobs
