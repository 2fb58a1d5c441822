"""What a person types on the command line (make's variables), checked: batch sizes, stage lists, a
price, the DDP launch. Each bad value is a one-line UsageError or ConfigError, raised before anything runs.
The params files are lib/core/config.py's."""

from __future__ import annotations

import re

from lib.core.config import ConfigError, UsageError


def parse_batches(text: str) -> list[int]:
    """'16 32,64' -> [16, 32, 64]; anything but positive integers is an error."""
    parts = [p for p in re.split(r"[\s,]+", str(text).strip()) if p]
    if not parts:
        raise ConfigError("batch sizes are empty")
    for p in parts:
        if not re.fullmatch(r"[0-9]+", p) or int(p) <= 0:
            raise ConfigError(f"batch size {p!r} is not a positive integer")
    return [int(p) for p in parts]


def parse_price(text: str | None) -> float | None:
    """PRICE_PER_GPU_HOUR='2.49' -> 2.49; empty -> None; anything but a positive number is an error."""
    if text is None or not str(text).strip():
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UsageError(f"PRICE_PER_GPU_HOUR {text!r} is not a positive number (a price per GPU-hour, e.g. 2.49)")
    return value


def parse_stages(text: str) -> list[str]:
    """'fp32 vocab,ddp' -> the named stages in the registry's (cumulative) order."""
    from lib.core import stages

    names = [p for p in re.split(r"[\s,]+", str(text).strip()) if p]
    if not names:
        raise ConfigError("the stage list is empty")
    for n in names:
        if n not in stages.STAGES:
            raise ConfigError(f"unknown stage {n!r} (stages: {', '.join(stages.ORDER)})")
    return [k for k in stages.ORDER if k in names]


def check_launch(nnodes=None, node_rank=None, rdzv=None) -> dict:
    """NNODES, NODE_RANK, RDZV (text from the environment, or ints) -> the DDP stage's launch,
    {"nnodes", "node_rank", "rdzv"}: where its ranks run, never part of the measured params.
    Empty means the default (one node, rank 0). RDZV (host:port of the rendezvous) is required
    with several nodes and refused with one: a forgotten NNODES must not silently run one node."""

    def text(value) -> str:
        return str(value).strip() if value is not None else ""

    n_text, rank_text = text(nnodes) or "1", text(node_rank) or "0"
    if not re.fullmatch(r"[0-9]+", n_text) or int(n_text) < 1:
        raise UsageError(f"NNODES {n_text!r} is not a positive integer (the number of nodes)")
    n = int(n_text)
    if not re.fullmatch(r"[0-9]+", rank_text) or int(rank_text) >= n:
        raise UsageError(f"NODE_RANK {rank_text!r} is out of range for NNODES={n}: give each node one of 0..{n - 1}")
    rank = int(rank_text)
    rdzv = text(rdzv)
    if n == 1:
        if rdzv:
            raise UsageError(f"RDZV={rdzv!r} is given but NNODES is 1: set NNODES to the node count, or drop RDZV")
        return {"nnodes": 1, "node_rank": 0, "rdzv": None}
    if not rdzv:
        raise UsageError(
            f"NNODES={n} needs RDZV=host:port, the rendezvous address every node reaches (e.g. 10.0.0.1:29500)"
        )
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):([0-9]{1,5})", rdzv)
    if not m:
        raise UsageError(f"RDZV {rdzv!r} is not host:port (e.g. 10.0.0.1:29500)")
    if not 1 <= int(m.group(2)) <= 65535:
        raise UsageError(f"RDZV {rdzv!r}: port {int(m.group(2))} is out of range 1..65535")
    return {"nnodes": n, "node_rank": rank, "rdzv": rdzv}
