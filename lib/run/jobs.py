"""How a measurement beyond the stage matrix is described to the launcher: its job (the
fingerprint covers the stage's switches after any overrides, plus the variant) and the folder
of results/ its record goes to. Shared by the chapters' evidence and the recipe."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lib.core import stages
from lib.core.paths import PLAIN_LOOP, resolve
from lib.results import store


def folder(report_dir, kind: str) -> Path:
    return resolve(report_dir) / "results" / kind


def make_job(params, env, stage_key, batch, out, **extra) -> dict:
    stage = stages.get(stage_key)
    if extra.get("stage_overrides"):
        stage = dataclasses.replace(stage, **extra["stage_overrides"])
    fp = store.fingerprint(params, env, stage, batch) + (f"-{extra['variant']}" if extra.get("variant") else "")
    return {"params": params, "stage": stage_key, "batch_size": batch, "out": str(out), "fingerprint": fp, **extra}


PLAIN_LOOP_SWITCHES = (
    "tf32",
    "autocast",
    "attention",
    "padded_vocab",
    "fused_adamw",
    "compile",
    "residual_dtype",
    "fp8_lm_head",
    "return_logits",
)


def plain_loop_can(stage) -> bool:
    """Whether the plain loop can run `stage`: only the switches of the canonical trainers, and
    torchao's conversion of the lm_head as its README writes it (FP8 in the blocks, fused losses,
    compile modes and forced SDPA backends are not among them)."""
    return set(stage.identity()) <= {"key", "peak", *PLAIN_LOOP_SWITCHES}


def plain_loop_source() -> str:
    """The plain loop's code, hashed: part of every plain-loop job's fingerprint, so a change to what the
    loop does re-measures what it measured (a comment or a reformatting does not)."""
    return store.code_hash(PLAIN_LOOP.read_text())
