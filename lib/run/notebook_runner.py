"""Executing the notebooks with papermill: a report's chapters and its summary, each in its own
kernel, talking over private Unix sockets. The chapters only draw here: `make report` has
measured everything before (pipeline.measure_chapters).

An executed notebook carries the digest of what it was drawn from (INPUTS_KEY in its metadata): its
parameters, the report folder's records and params (what the drawing writes left out, run.json as its
measuring account), and the code and params files that draw it. A notebook whose digest is unchanged is
kept as it is, so a resume that measured nothing new draws nothing again."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lib.core import chapters
from lib.core.params import Params
from lib.core.paths import ROOT
from lib.run import run_log

_IPC_DIR = None
INPUTS_KEY = "gpt2_levers_inputs"  # the executed notebook's metadata entry: the sha256 of what it was drawn from
# What draws a notebook besides its folder: the code its kernel imports (lib/core, lib/results, lib/report), the
# notebooks and their texts, the params files (the claims and rules tables), the pinned packages.
CODE = ("lib/__init__.py", "lib/core", "lib/results", "lib/report", "notebooks", "params", "requirements.txt")
# What the drawing and the export write into a report folder, and the files derived from its records after it
# (decisions.json, recommended.json): none is an input of a notebook. run.json is read as its measuring account.
DRAWN = (
    "notebooks",
    "figures",
    "report.html",
    "report.pdf",
    "report.ipynb",
    "decisions.json",
    "recommended.json",
    "render.json",
)
RENDER_ENV = ("PRICE_PER_GPU_HOUR",)  # read by the report while it draws (loader.price_per_gpu_hour)


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
        async def _async_interrupt_kernel(self) -> None:
            # jupyter_client interrupts a kernel (SIGINT) before it asks it to shut down; a kernel that papermill
            # shuts down has finished its cells, and ipykernel logs the signal as "ERROR | KeyboardInterrupt caught
            # in kernel." on the run's console when it lands in a message handler. The shutdown request alone stops
            # it (a kernel that ignores it is terminated after shutdown_wait_time, as before).
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

        @default("transport")
        def _transport_default(self):
            return "ipc"

        @default("ip")
        def _ip_default(self):
            return str(_IPC_DIR / f"kernel-{uuid.uuid4().hex[:8]}")

    return IPCKernelManager


def _files(path: Path, skip: tuple = ()):
    """(relative name, path) of every file under `path` (or `path` itself), sorted, but those under `skip`."""
    if path.is_file():
        yield path.name, path
        return
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if p.is_file() and rel.parts[0] not in skip and "__pycache__" not in rel.parts and p.suffix != ".pyc":
            yield str(rel), p


def folder_digest(report_dir: Path) -> str:
    """The sha256 of what every notebook of `report_dir` is drawn from but its parameters: the folder's files but
    what drawing writes (DRAWN), run.json as its measuring account (run_log.measuring_account: what the drawing
    and later re-renders add is left out), the code and params files (CODE) and the environment the report reads
    (RENDER_ENV)."""
    h = hashlib.sha256()
    for rel, p in _files(Path(report_dir), skip=DRAWN):
        if rel == "run.json":
            try:
                body = json.dumps(run_log.measuring_account(json.loads(p.read_text())), sort_keys=True).encode()
            except ValueError:
                body = p.read_bytes()
        else:
            body = p.read_bytes()
        h.update(f"report/{rel}\0{len(body)}\0".encode() + body)
    for top in CODE:
        for rel, p in _files(ROOT / top):
            body = p.read_bytes()
            h.update(f"{top}/{rel}\0{len(body)}\0".encode() + body)
    h.update(json.dumps({k: os.environ.get(k) for k in RENDER_ENV}, sort_keys=True).encode())
    return h.hexdigest()


def digest(folder: str, parameters: dict) -> str:
    """A notebook's inputs: its folder's digest and its own parameters."""
    return hashlib.sha256((folder + json.dumps(parameters, sort_keys=True, default=str)).encode()).hexdigest()


def drawn_from(path: Path) -> str | None:
    """The digest an executed notebook was drawn from (None: not drawn by this code, unreadable, or absent)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get(INPUTS_KEY)
    except (OSError, ValueError, AttributeError):
        return None


def portable(path) -> str:
    """A path as an executed notebook records it: relative to the checkout where it lies inside it (every kernel
    runs there), so a report drawn on another checkout or machine is the same byte for byte; absolute elsewhere."""
    p = Path(path).absolute()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


VOLATILE = ("start_time", "end_time", "duration")  # papermill's clock readings, in a notebook and in each cell


def _stamp(path: Path, inputs: str | None) -> None:
    """Write the digest into the executed notebook's metadata, and papermill's record of where it read and wrote the
    notebook as portable paths (atomically: a notebook is never half written)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    meta = nb.setdefault("metadata", {})
    if inputs:
        meta[INPUTS_KEY] = inputs
    for key in ("input_path", "output_path"):
        if key in meta.get("papermill", {}):
            meta["papermill"][key] = portable(meta["papermill"][key])
    # when each cell ran and for how long: the render's, not the report's; left in, no two renders were the same bytes
    for cell in nb.get("cells", []):  # papermill's injected cell gets a random id each run: a fixed one
        if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            cell["id"] = "injected-parameters"
    for m in [meta, *(c.get("metadata", {}) for c in nb.get("cells", []))]:
        m.pop("execution", None)
        for key in VOLATILE:
            m.get("papermill", {}).pop(key, None)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )  # nbformat's form
    os.replace(tmp, path)


def exported_from(report_dir: Path, notebooks: list[Path]) -> bool:
    """Whether report.html and report.pdf were exported after every one of `notebooks` was drawn: when each of them
    was kept (its inputs, the export's code among them, unchanged), exporting again would give the same report."""
    out = [Path(report_dir) / "report.html", Path(report_dir) / "report.pdf"]
    if not all(p.is_file() for p in [*out, *notebooks]):
        return False
    return min(p.stat().st_mtime for p in out) >= max(p.stat().st_mtime for p in notebooks)


def run_notebook(src: Path, dest: Path, parameters: dict, inputs: str | None = None) -> str | None:
    """Execute one notebook; returns None or a one-line description of the failure. `inputs` (digest): stamped
    into the executed notebook once it ran through, so the next drawing may keep it."""
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
        _stamp(dest, inputs)
        return None
    except pm.PapermillExecutionError as e:
        return f"{dest.name}: cell {e.exec_count}: {e.ename}: {e.evalue}"
    except Exception as e:  # a dead kernel, a missing notebook: recorded, the rest still runs
        return f"{dest.name}: {type(e).__name__}: {e}"


def draw(
    report_dir: Path, params: Params, failed_before: list[str] = (), keep: bool = True
) -> tuple[list[str], list[Path], dict, bool]:
    """Execute every chapter of the report's stage list (drawing from its results, measuring
    nothing) and then the summary, which shows `failed_before` (the measurement's failures) and
    the chapters' own. With `keep`, a notebook drawn before from the same inputs (digest) is kept as it
    is. Returns (the chapters' failures, executed chapters, seconds per notebook drawn, whether every
    notebook was kept)."""
    session()
    nb_params = {
        "gpu": params.name,
        "model": params.model_preset,
        "report_dir": portable(report_dir),
        "measure": False,
    }
    failures, done, timings = [], [], {}
    # A measure-only folder from a GPU host has no notebooks/ when it comes from git (which keeps no empty folder).
    folder = report_dir / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    order = chapters.order(params.stages, params.chapters)
    # A notebook drawn before, of a chapter this report no longer has (or named the old way), would
    # show stale figures to whoever opens the folder: it goes.
    wanted = {c.notebook for c in order} | {"summary.ipynb"}
    for old in folder.glob("*.ipynb"):
        if old.name not in wanted:
            old.unlink()
    inputs = folder_digest(report_dir)
    kept = []

    def one(i: int, src: Path, dest: Path, parameters: dict, title: str) -> str | None:
        own = digest(inputs, parameters)
        if keep and drawn_from(dest) == own:
            kept.append(dest.name)
            return None
        t0 = time.perf_counter()
        print(
            f"[{i}/{len(order)}] {title}\n" if i else f"[summary] {title}\n", end="", flush=True
        )  # one write: two threads print
        err = run_notebook(src, dest, parameters, own)
        timings[parameters.get("chapter", "summary")] = time.perf_counter() - t0
        if err:
            print(f"    FAILED: {err}", flush=True)
        return err

    # The chapters are independent (each draws its own stage from the records; the summary, after them, draws what
    # spans them), and a chapter's time is mostly its kernel starting and importing: two at a time on two cores.
    jobs = [
        (i, chapters.TEMPLATE, folder / c.notebook, {**nb_params, "chapter": c.key}, c.title)
        for i, c in enumerate(order, 1)
    ]
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        errors = list(pool.map(lambda job: one(*job), jobs))
    failures += [e for e in errors if e]
    done += [d for c in order if (d := folder / c.notebook).exists()]
    summary = {"gpu": params.name, "report_dir": portable(report_dir), "failures": list(failed_before) + failures}
    err = one(0, chapters.SUMMARY, folder / "summary.ipynb", summary, "tables, charts, verdicts")
    if err:
        failures.append(err)
    if kept:
        print(
            f"[notebooks] {len(kept)} of {len(order) + 1} kept as drawn before: their records, params and code "
            "are unchanged",
            flush=True,
        )
    return failures, done, timings, len(kept) == len(order) + 1


CLOCK_KEYS = ("start_time", "end_time", "duration")  # papermill's, per cell and per notebook


def without_clock(path) -> None:
    """Drop from an executed notebook what only says when it ran (papermill's and nbclient's timestamps, and the
    random id papermill gives the cell it injects), so the comparison's committed notebooks change only where what
    they show does."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell.id = "injected-parameters"
    for meta in [nb.metadata, *(c.metadata for c in nb.cells)]:
        meta.pop("execution", None)
        for key in CLOCK_KEYS:
            meta.get("papermill", {}).pop(key, None)
    nbformat.write(nb, path)
