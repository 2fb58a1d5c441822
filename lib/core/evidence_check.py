"""The rules the evidence section of a profile must keep (params/default.yaml states each key's meaning)."""

from __future__ import annotations

from lib.core import stages
from lib.core.params import ConfigError


MIN_TIMED_STEPS = 5  # fewer cannot give a meaningful p10/p90


def positive_ints(values) -> bool:
    return bool(values) and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)


def validate(ev, where: str, presets: dict) -> None:
    """Raise ConfigError (lib/core/config.py) naming the first key of the evidence section that breaks its rule."""
    for key in ("seq_lens", "sweep_batch_sizes"):
        if not positive_ints(getattr(ev, key)):
            raise ConfigError(
                f"{where}: evidence.{key} must be a non-empty list of positive integers, got {getattr(ev, key)!r}"
            )
    positive = ("seq_tokens", "gemm_batch", "seq_timed_steps", "repeats", "crosscheck_batch", "parity_steps")
    for key in (*positive, "held_out_batches", "parity_passes", "parity_margin"):
        if getattr(ev, key) <= 0:
            raise ConfigError(f"{where}: evidence.{key} must be positive, got {getattr(ev, key)}")
    if ev.sweep_oom_margin is not None and ev.sweep_oom_margin < 0:
        raise ConfigError(
            f"{where}: evidence.sweep_oom_margin must be a fraction of at least 0, got {ev.sweep_oom_margin}"
        )
    if ev.parity_looks is not None:
        looks = ev.parity_looks
        if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:])) or looks[-1] != ev.parity_seeds:
            raise ConfigError(
                f"{where}: evidence.parity_looks must be rising seed counts from at least 2 that end at parity_seeds"
            )
    if ev.parity_horizon_tokens is not None and ev.parity_horizon_tokens <= 0:
        raise ConfigError(f"{where}: evidence.parity_horizon_tokens must be positive")
    if ev.parity_seeds < 2:
        raise ConfigError(f"{where}: evidence.parity_seeds must be at least 2")
    if not 0 < min(ev.parity_confidence, ev.parity_power) <= max(ev.parity_confidence, ev.parity_power) < 1:
        raise ConfigError(f"{where}: evidence.parity_confidence and parity_power must lie in (0, 1)")
    if ev.seq_timed_steps < MIN_TIMED_STEPS:
        raise ConfigError(
            f"{where}: evidence.seq_timed_steps {ev.seq_timed_steps} is too few for p10/p90 "
            f"statistics (at least {MIN_TIMED_STEPS})"
        )
    if ev.seq_warmup_steps < 0:
        raise ConfigError(f"{where}: evidence.seq_warmup_steps must be a non-negative integer")
    if ev.global_batch_tokens <= 0 or ev.recipe_warmup_steps < 1 or ev.recipe_timed_steps < MIN_TIMED_STEPS:
        raise ConfigError(
            f"{where}: evidence.global_batch_tokens must be positive, recipe_warmup_steps at least 1 "
            f"and recipe_timed_steps at least {MIN_TIMED_STEPS}"
        )
    size = ev.size_sweep
    if (
        not size.presets
        or size.repeats < 1
        or size.batch_size <= 0
        or size.warmup_steps < 1
        or (size.timed_steps < MIN_TIMED_STEPS)
    ):
        raise ConfigError(
            f"{where}: evidence.size_sweep needs presets (a non-empty list), a positive batch_size, "
            f"warmup_steps at least 1 and timed_steps at least {MIN_TIMED_STEPS}, got {size!r}"
        )
    for name in size.presets:
        if name not in presets:
            raise ConfigError(f"{where}: evidence.size_sweep: {name!r} is no preset ({', '.join(presets)})")
    fp8 = [k for k in stages.ORDER if stages.fp8_switches(stages.STAGES[k])]
    for key in size.fp8_stages:
        if key not in fp8:
            raise ConfigError(f"{where}: evidence.size_sweep.fp8_stages: {key!r} is no FP8 stage ({', '.join(fp8)})")
    if ev.baseline.stage not in stages.STAGES or not positive_ints([ev.baseline.batch_size]):
        raise ConfigError(
            f"{where}: evidence.baseline must name a stage and a positive batch_size, got {ev.baseline!r}"
        )
