"""The result record, described once: one JSON object per measured configuration (stage x batch,
or an evidence point), written atomically by the measuring process. Every key is optional but
those of base_record; a failed configuration keeps its identity, status and reason."""

from __future__ import annotations

from typing import TypedDict

SCHEMA_VERSION = 1


class Status:
    """A record's status."""

    OK = "ok"  # timed, loss finite
    OOM = "oom"  # ran out of device memory: a result, not a failure
    DIVERGED = "diverged"  # timed, but a loss became NaN or infinite
    ERROR = "error"  # the measurement failed; a re-run measures it again
    NOT_APPLICABLE = "not_applicable"  # the device (or the profile) cannot run this stage


STATUSES = (Status.OK, Status.OOM, Status.DIVERGED, Status.ERROR, Status.NOT_APPLICABLE)
TIMED = (Status.OK, Status.DIVERGED)  # records with step times
SWEEP = "batch sweep"  # the variant of the batch sweep's records
TIMING_VARIANTS = (None, SWEEP, "repeat")  # records that time a (stage, batch) the matrix's way
# The reason of a batch-sweep point left out because its memory, extended from the points that ran, would not fit
# (lib/run/evidence.py predicted_oom): a 'not applicable' record, so the report says what was not measured.
PREDICTED_OOM = "not measured: predicted out of memory"


def is_predicted_oom(rec: dict) -> bool:
    """Whether `rec` is a configuration not measured because the memory measured before it says it cannot fit."""
    return rec.get("status") == Status.NOT_APPLICABLE and str(rec.get("reason", "")).startswith(PREDICTED_OOM)


def cannot_fit(rec: dict) -> bool:
    """Whether `rec` ran out of memory, or was not run because it was predicted to."""
    return rec.get("status") == Status.OOM or is_predicted_oom(rec)


# Why a run.json entry left 'running' ended: its process is gone without closing it (lib/run/run_log.py settles it
# when the next run starts; page 1 says so of the last run, lib/report/tables.py).
UNCLOSED_RUN = "the process ended without closing its run, killed or its machine gone"
REUSABLE = (Status.OK, Status.OOM, Status.DIVERGED, Status.NOT_APPLICABLE)  # a resumed run keeps these


class Record(TypedDict, total=False):
    # identity (store.base_record)
    schema_version: int
    profile: str  # params/<profile>.yaml
    stage: str  # stages.STAGES key
    stage_title: str
    batch_size: int
    seq_len: int
    status: str  # a Status
    reason: str | None  # why, for every status but ok
    warmup_steps: int
    timed_steps: int
    peak_precision: str  # the datasheet peak MFU is quoted against
    fingerprint: str  # store.fingerprint (+ a suffix for evidence variants)
    kind: str  # absent: a timed step; "gemm", "plain" (plain loop), "parity"
    variant: str | None  # None: the matrix; "batch sweep", "repeat", "T=<n>", "plain loop", ...
    repeat: int  # 0 for the first process of a configuration, then 1, 2, ...
    # timing (stats.fill_timing): per-step milliseconds of the timed steps and their statistics
    step_ms: list[float]
    median_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    cv: float  # standard deviation / mean
    first_step_s: float  # the first step alone, compilation included
    phases_s: dict  # seconds of each part of the measuring process (build, first_step, warmup, timed, ...)
    tokens_per_step: int
    tokens_per_s: float  # tokens_per_step / median
    # throughput against the datasheet (stats.fill_mfu)
    flops_per_token: int  # 6N + 12 L d T
    achieved_tflops: float
    peak_tflops: float | None
    mfu: float | None
    n_params: int
    # memory, three layers (worker.memory)
    mem_tensors_bytes: int | None  # max_memory_allocated
    mem_allocator_bytes: int | None  # max_memory_reserved
    mem_device_bytes: int | None  # device total - free (on a CPU: peak RSS)
    mem_device_note: str
    # device memory sampled during the steps (energy.MemorySampler, filled in worker.run; single-GPU
    # timing records only, None where absent): NVML's `used`, every 5 ms from the first warm-up step to
    # the last timed one, the maximum; an observation, not a switch, so no part of the fingerprint
    mem_device_sampled_peak_bytes: int | None
    mem_device_sampled_note: str  # how it was sampled, or why the peak is None (CPU, MPS, ROCm, no pynvml, NVML error)
    # loss (stats.fill_loss)
    losses: list[float]  # every step, warm-up included
    final_loss: float  # mean of the last final_loss_window steps
    init_checksum: str  # model.init_checksum before the first step
    # evidence of one configuration
    sdpa_backend: str  # which SDPA kernel family ran
    kernel_profile: dict  # kernel_profile.profile_steps
    energy: dict  # energy.EnergyMeter (joules_per_token, avg_power_w) or {"unavailable": why}
    # the plain loop (kind "plain"): its mean step and its build-nanogpt-style synchronised steps
    ms_per_step: float
    synced_step_ms: list[float]
    synced_median_ms: float
    # the parity run (kind "parity")
    steps: int
    micro_steps: int
    replicate: int
    held_out_loss: float
    held_out_tokens: int
    series: dict  # {index, runs, first}: the runs of one side and round share a process (lib/measure/parity_run.py)
    # the multi-GPU stage (ddp.run)
    world_size: int
    per_gpu_batch: int
    per_gpu_tokens_per_s: float
    no_sync_median_ms: float
    allreduce_share: float
    base_stage: str
    backend_dist: str
    global_batch_tokens: int  # tokens per optimizer step over every rank (micro_steps x batch x T x ranks)
    single_gpu_tokens_per_s: float | None  # the configuration on one GPU in the same sitting (ddp_launch.efficiency)
    scaling_efficiency: float | None  # per-GPU tokens/s over single_gpu_tokens_per_s: the one efficiency quoted
    efficiency_reference: str | None  # what single_gpu_tokens_per_s is, in words
    one_rank_tokens_per_s: float | None  # the same DDP job on one rank, beside the efficiency
    one_rank_efficiency: float | None
    processes: dict  # noise.spread of tokens/s over the job's fresh processes
    process_runs: list  # each process's own figures
    # bookkeeping
    wall_s: float
    finished_at: str
    stderr_tail: str  # an error record's last lines of the measuring process


# How a step is built and timed, recorded in every report's params (config.load) and part of every
# fingerprint, so results measured another way are never kept and a report of another method is
# archived, not resumed. In words, as the comparison's environment table explains its figure:
METHODS = {
    1: "unrecorded, before 2026-11-22: the loss copied the logits to fp32",
    2: "the canonical loss path, one step core, static torch.compile",
}
METHOD = 2
