"""Where things are: the repository root and the folders under it, defined once."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "lib"
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"
PLAIN_LOOP = LIB / "train" / "plain_loop.py"  # its source is part of every cross-check's fingerprint


def resolve(path) -> Path:
    """A path as given when absolute, else relative to the repository root (the notebooks and
    the CLI may run in any working folder)."""
    p = Path(path)
    return p if p.is_absolute() else ROOT / p
