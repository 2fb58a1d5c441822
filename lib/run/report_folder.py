"""A report folder's state across runs: where it lives, the lock of the run writing it, whether
a new run resumes it or archives it first, and the history of the runs that measured it."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import sys
from pathlib import Path

from lib.core import stages
from lib.core.config import UsageError
from lib.core.params import Params
from lib.core.paths import ROOT
from lib.results import store
from lib.run import run_log


def reports_root(reports: str | None) -> Path:
    return Path(reports).resolve() if reports else ROOT / "reports"


def check_writable(root: Path) -> None:
    """Refuse a reports folder that cannot be written, without creating anything (a refused run
    leaves no folder behind): the folder itself or, if it does not exist yet, its nearest parent."""
    existing = next(p for p in [root, *root.parents] if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write reports to {root}: {existing} is not a writable folder")


def create(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write reports to {root}: {e.strerror}") from None


def archive_previous(report_dir: Path) -> Path | None:
    """A new run never overwrites an earlier report: it moves to reports/archive/<name>-<time>/."""
    if not report_dir.exists() or not any(report_dir.iterdir()):
        return None
    stamp = dt.datetime.fromtimestamp(report_dir.stat().st_mtime).strftime("%Y%m%d-%H%M%S")
    dest = report_dir.parent / "archive" / f"{report_dir.name}-{stamp}"
    n = 1
    while dest.exists():
        dest = dest.with_name(f"{report_dir.name}-{stamp}-{n}")
        n += 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(report_dir), str(dest))
    return dest


def keep_long_test(archived: Path | None, report_dir: Path) -> None:
    """The long quality test is a command of its own, not a sitting's (lib/run/long_test.py --folder <report>/long):
    a new sitting reads it (lib/results/long_choice.py) and so keeps a copy of the archived folder's; the archive keeps
    its own, so it stays readable as it was."""
    src = archived / store.LONG_FOLDER if archived else None
    if src and src.is_dir() and not (report_dir / store.LONG_FOLDER).exists():
        report_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, report_dir / store.LONG_FOLDER)


def take_lock(root: Path, profile: str):
    """One `make report` per profile at a time. flock is released by the kernel when the
    process dies, so a killed run never leaves a stale lock behind."""
    import fcntl

    path = root / f".{profile}.lock"
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        raise UsageError(f"a report for {profile!r} is already running ({holder}); wait for it or stop it") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}, started {dt.datetime.now().isoformat(timespec='seconds')}")
    f.flush()
    return f


def same_setup(report_dir: Path, params: Params, env: dict) -> bool:
    """Whether an existing report was measured with this workload on this machine (then a
    re-run resumes it instead of starting a new one)."""
    try:
        old_params = Params.read(report_dir / "params.json")
        old_env = json.loads((report_dir / "environment.json").read_text())
    except (OSError, ValueError):
        return False
    # The stage list may grow or shrink (STAGES=): each configuration's result is matched by its
    # own fingerprint, so the ones measured before stay valid.
    return (
        store.setup_key(old_params, old_env) == store.setup_key(params, env)
        and old_params.run.batch_sizes == params.run.batch_sizes
    )


def union_of_stages(report_dir: Path, requested: list[str]) -> tuple[list[str], list[str]]:
    """A resumed report keeps the stages measured before (measuring in pieces on a busy host
    adds chapters; it does not drop them). Returns the union in the cumulative order and the
    stages that only the earlier runs asked for."""
    before = Params.read(report_dir / "params.json").stages
    kept = [k for k in before if k not in requested and k in stages.STAGES]
    return [k for k in stages.ORDER if k in requested or k in kept], kept


def union_of_chapters(report_dir: Path, requested: list[str]) -> list[str]:
    """A resumed report keeps the chapters beyond the stages that an earlier run measured (the size sweep)."""
    before = Params.read(report_dir / "params.json").chapters or []
    return [k for k in stages.BEYOND_STAGES if k in requested or k in before]


def earlier_runs(report_dir: Path) -> list[dict]:
    """The measuring runs before this one, oldest first, so run.json accounts for every call
    that measured the report (their re-renders are dropped: the next render replaces them). A run
    left 'running' by a process that is gone (this one holds the lock) is settled as interrupted."""
    try:
        last = json.loads((report_dir / "run.json").read_text())
    except (OSError, ValueError):
        return []
    history = last.pop("earlier_runs", [])
    last.pop("renders", None)
    return [run_log.settle(r) for r in history + [last]]


def exit_code(report_dir: Path, failures: list[str]) -> int:
    """0, or 1 when a chapter failed or a configuration is an error row (the report shows both)."""
    if failures:
        print(f"{len(failures)} failure(s); the report shows them:", *failures, sep="\n  ", file=sys.stderr)
        return 1
    bad = [r for r in store.load_records(report_dir / "results") if r["status"] == "error"]
    if bad:
        print(f"{len(bad)} configuration(s) failed; see the report", file=sys.stderr)
        return 1
    return 0


# The options of `make report` that change what a run measures, in the order `make help` lists them.
REPORT_OPTIONS = (
    "GPU",
    "MODEL",
    "BATCHES",
    "STAGES",
    "CHAPTERS",
    "DEPTH",
    "MEASURE_ONLY",
    "FORCE",
    "OVERRIDE",
    "REPORTS",
    "NNODES",
    "NODE_RANK",
    "RDZV",
)


def command() -> str:
    """The `make report` line that reproduces this run (the options set in its environment)."""
    given = [(k, os.environ[k]) for k in REPORT_OPTIONS if os.environ.get(k)]
    return " ".join(["make report"] + [f"{k}={shlex.quote(v)}" for k, v in given])
