"""Fault injection for the reliability tests: GPT2_LEVERS_FAULT="stage[@batch]:kind[,...]"
(with @batch, only that batch size of the stage).

Kinds: `oom` (the measurement raises CUDA's out-of-memory error), `nan` (the loss turns NaN
half-way), `raise` (the measurement raises), `kill` (the measuring process is SIGKILLed),
`stage-raise` (the stage notebook raises before measuring). Unset in normal use: then every
function here is a no-op."""

from __future__ import annotations

import os
import signal

VAR = "GPT2_LEVERS_FAULT"


def get(stage: str, batch: int | None = None) -> str | None:
    for item in filter(None, os.environ.get(VAR, "").split(",")):
        key, _, kind = item.partition(":")
        name, _, at = key.strip().partition("@")
        if name == stage and (not at or (batch is not None and at == str(batch))):
            return kind.strip()
    return None


def inject(kind: str | None, where: str) -> None:
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError(f"CUDA out of memory. Injected at {where} by {VAR}.")
    if kind == "raise":
        raise RuntimeError(f"injected fault at {where} ({VAR})")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
