"""The chapter registry: every chapter a report can have, with its title and its text. A stage's
chapter is its stage entry's (title and key); the chapters that are not a stage are listed here.
Every chapter is drawn by one template notebook (TEMPLATE) from its text, notebooks/chapters/<key>.md,
which says where its views go (lib/report/chapter_page.py). A missing text fails at import, never in
the middle of a GPU run."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lib.core import stages
from lib.core.config import UsageError
from lib.core.paths import NOTEBOOKS


@dataclass(frozen=True)
class Chapter:
    key: str  # a stage key, or one of NOT_STAGES
    title: str
    text: Path  # its prose and where its views go

    @property
    def notebook(self) -> str:
        """The executed chapter's file name in a report's notebooks/ folder."""
        return f"{self.key}.ipynb"


# Chapters that are not a stage, with their titles. The batch sweep comes after the single-GPU
# stages and before the multi-GPU ones, which replicate the configuration it recommends; the size
# sweep after it, since it varies the model around that configuration.
NOT_STAGES = {
    "batch_sweep": "Batch-size sweep and recommended configuration",
    "size_sweep": "Model size: what FP8 buys from GPT-2 small to XL",
}
TEMPLATE, TEXTS = NOTEBOOKS / "chapter.ipynb", NOTEBOOKS / "chapters"
SUMMARY, COMPARE = NOTEBOOKS / "summary.ipynb", NOTEBOOKS / "compare.ipynb"
assert tuple(NOT_STAGES) == stages.BEYOND_STAGES, "stages.BEYOND_STAGES names these chapters, in this order"


def _registry() -> dict[str, Chapter]:
    out = {s.key: Chapter(s.key, s.title, TEXTS / f"{s.key}.md") for s in stages.STAGES.values()}
    out.update({k: Chapter(k, title, TEXTS / f"{k}.md") for k, title in NOT_STAGES.items()})
    missing = sorted(f"chapters/{c.text.name}" for c in out.values() if not c.text.is_file())
    missing += [p.name for p in (TEMPLATE, SUMMARY, COMPARE) if not p.is_file()]
    if missing:
        raise ImportError(f"chapter notebooks or texts missing from {NOTEBOOKS}: {', '.join(missing)}")
    return out


CHAPTERS = _registry()


def order(stage_keys: list[str], beyond: list[str] | None = None) -> list[Chapter]:
    """A run's chapters: its single-GPU stages, the batch sweep, the size sweep, then its multi-GPU stages.
    `beyond` (params' chapters) names which chapters that are not a stage the report has; None: all."""
    extra = [k for k in NOT_STAGES if beyond is None or k in beyond]
    keys = stages.single_gpu(stage_keys) + extra + [k for k in stage_keys if stages.is_multi_gpu(k)]
    return [CHAPTERS[k] for k in keys]


def parse(text: str) -> list[str]:
    """CHAPTERS='batch_sweep autotune' -> those chapter keys, in the order given (duplicates
    dropped); an unknown name is an error that lists the chapters."""
    names = list(dict.fromkeys(p for p in re.split(r"[\s,]+", str(text).strip()) if p))
    if not names:
        raise UsageError("the chapter list is empty")
    for n in names:
        if n not in CHAPTERS:
            raise UsageError(f"unknown chapter {n!r} (chapters: {', '.join(CHAPTERS)})")
    return names


def check_part_of(keys: list[str], stage_keys: list[str]) -> None:
    """CHAPTERS may name only chapters of the run's own stage list (or a chapter beyond the stages, which
    then joins the report)."""
    have = [c.key for c in order(stage_keys)]
    absent = [k for k in keys if k not in have]
    if absent:
        raise UsageError(
            f"CHAPTERS names {', '.join(absent)}, not a chapter of this report (its chapters: {', '.join(have)})"
        )


def ddp_points(gpus: int) -> list[tuple[int, int]]:
    """The (GPUs, nodes) the DDP chapter measures on a host of `gpus` GPUs: 2, 4, ... doubling and the host's own
    count on one node (the scaling curve), then, on a host of four or more (an even count), two nodes of half its
    GPUs each rehearsed on it; none on one GPU."""
    counts, k = [], 2
    while k < gpus:
        counts.append(k)
        k *= 2
    counts += [gpus] if gpus >= 2 else []
    rehearsal = [(gpus, 2)] if gpus >= 4 and gpus % 2 == 0 else []
    return [(n, 1) for n in counts] + rehearsal
