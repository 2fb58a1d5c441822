"""Executing the notebooks with papermill: a report's chapters and its summary, each in its own
kernel, talking over private Unix sockets. The chapters only draw here: `make report` has
measured everything before (pipeline.measure_chapters)."""

from __future__ import annotations

import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lib.core import chapters
from lib.core.paths import ROOT
from lib.core.params import Params

_IPC_DIR = None


def session() -> None:
    """Quiet papermill, and let every kernel import lib/ whatever its working folder."""
    logging.basicConfig(level=logging.INFO, format="    %(message)s")
    logging.getLogger("papermill").setLevel(logging.WARNING)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def _kernel_manager():
    """Kernels talk over Unix sockets in a private temporary folder: nothing listens on the
    network while a report runs (and ipykernel has no plain-TCP warning to print)."""
    import tempfile
    import uuid

    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    global _IPC_DIR
    if _IPC_DIR is None:  # one private folder per run, removed when the run ends
        import atexit

        _IPC_DIR = Path(tempfile.mkdtemp(prefix="gpt2-levers-"))
        atexit.register(shutil.rmtree, _IPC_DIR, ignore_errors=True)

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self):
            return "ipc"

        @default("ip")
        def _ip_default(self):
            return str(_IPC_DIR / f"kernel-{uuid.uuid4().hex[:8]}")

    return IPCKernelManager


def run_notebook(src: Path, dest: Path, parameters: dict) -> str | None:
    """Execute one notebook; returns None or a one-line description of the failure."""
    import papermill as pm

    try:
        pm.execute_notebook(
            str(src),
            str(dest),
            parameters=parameters,
            cwd=str(ROOT),
            kernel_name="python3",
            log_output=True,
            progress_bar=False,
            report_mode=False,
            kernel_manager_class=_kernel_manager(),
        )
        return None
    except pm.PapermillExecutionError as e:
        return f"{dest.name}: cell {e.exec_count}: {e.ename}: {e.evalue}"
    except Exception as e:  # a dead kernel, a missing notebook: recorded, the rest still runs
        return f"{dest.name}: {type(e).__name__}: {e}"


def draw(report_dir: Path, params: Params, failed_before: list[str] = ()) -> tuple[list[str], list[Path], dict]:
    """Execute every chapter of the report's stage list (drawing from its results, measuring
    nothing) and then the summary, which shows `failed_before` (the measurement's failures) and
    the chapters' own. Returns (the chapters' failures, executed chapters, seconds per chapter)."""
    session()
    nb_params = {
        "gpu": params.name,
        "model": params.model_preset,
        "report_dir": str(report_dir),
        "measure": False,
    }
    failures, done, timings = [], [], {}
    # A measure-only folder from a GPU host has no notebooks/ when it comes from git (which keeps no empty folder).
    (report_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    order = chapters.order(params.stages, params.chapters)
    # A notebook drawn before, of a chapter this report no longer has (or named the old way), would
    # show stale figures to whoever opens the folder: the drawing is redone in full, so it goes.
    drawn = {c.notebook for c in order} | {"summary.ipynb"}
    for old in (report_dir / "notebooks").glob("*.ipynb"):
        if old.name not in drawn:
            old.unlink()

    def one(i: int, chapter) -> str | None:
        t0 = time.perf_counter()
        print(f"[{i}/{len(order)}] {chapter.title}", flush=True)
        err = run_notebook(
            chapters.TEMPLATE, report_dir / "notebooks" / chapter.notebook, {**nb_params, "chapter": chapter.key}
        )
        timings[chapter.key] = time.perf_counter() - t0
        if err:
            print(f"    FAILED: {err}", flush=True)
        return err

    # The chapters are independent (each draws its own stage from the records; the summary, after them, draws what
    # spans them), and a chapter's time is mostly its kernel starting and importing: two at a time on two cores.
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        errors = list(pool.map(one, range(1, len(order) + 1), order))
    failures += [e for e in errors if e]
    done += [d for c in order if (d := report_dir / "notebooks" / c.notebook).exists()]
    t0 = time.perf_counter()
    print("[summary] tables, charts, verdicts", flush=True)
    err = run_notebook(
        chapters.SUMMARY,
        report_dir / "notebooks" / "summary.ipynb",
        {"gpu": params.name, "report_dir": str(report_dir), "failures": list(failed_before) + failures},
    )
    if err:
        failures.append(err)
        print(f"    FAILED: {err}", flush=True)
    timings["summary"] = time.perf_counter() - t0
    return failures, done, timings
