"""`make report` in Python: validate every input, detect the device, run each stage notebook
with papermill (each configuration in its own process), the summary, then HTML and PDF.

Every bad input is one line on stderr and exit code 2, before anything is measured."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from . import config, data, export, results, stages

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


class UsageError(Exception):
    pass


def detect_environment() -> dict:
    from .runner import capture_environment

    try:
        return capture_environment()
    except RuntimeError as e:
        raise UsageError(f"could not inspect the device: {e}") from None


def reports_root_of(args) -> Path:
    return Path(args.reports).resolve() if args.reports else ROOT / "reports"


def _notebook_session() -> None:
    """Quiet papermill, and let every kernel import lib/ whatever its working folder."""
    logging.basicConfig(level=logging.INFO, format="    %(message)s")
    logging.getLogger("papermill").setLevel(logging.WARNING)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def choose_profile(gpu: str | None, device: dict, allow_mismatch: bool) -> tuple[str, str | None]:
    """(profile, override note). Without GPU= the device decides; with it, the device must fit."""
    detected = config.match_profile(device["name"], device["backend"])
    if gpu is None:
        if detected is None:
            raise UsageError(f"no profile matches the detected {device['backend']} device "
                             f"{device['name']!r}; add params/<name>.yaml with a `match` entry, or pass "
                             f"GPU=<profile> OVERRIDE=1 (profiles: {', '.join(config.profiles())})")
        return detected, None
    config.check_name(gpu)
    if gpu not in config.profiles():
        raise UsageError(f"unknown GPU profile {gpu!r} (profiles: {', '.join(config.profiles())})")
    profile_backend = config._read(config.PARAMS_DIR / f"{gpu}.yaml").get("backend")
    if profile_backend != device["backend"]:
        raise UsageError(f"profile {gpu!r} is for {profile_backend} devices, but this machine has "
                         f"{device['backend']} ({device['name']}); run `make report` without GPU= "
                         f"to use the detected profile ({detected or 'none'})")
    if detected != gpu:
        if not allow_mismatch:
            raise UsageError(f"profile {gpu!r} does not match the detected device {device['name']!r} "
                             f"(detected profile: {detected or 'none'}); pass OVERRIDE=1 to run it anyway")
        return gpu, f"profile {gpu} run on {device['name']} by explicit override"
    return gpu, None


def stage_notebook(key: str) -> Path:
    found = sorted(NOTEBOOKS.glob(f"*_{key}.ipynb"))
    if not found:
        raise UsageError(f"no notebook for stage {key!r} in notebooks/")
    return found[0]


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


_IPC_DIR = None


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


def take_lock(reports_root: Path, profile: str):
    """One `make report` per profile at a time. flock is released by the kernel when the
    process dies, so a killed run never leaves a stale lock behind."""
    import fcntl

    path = reports_root / f".{profile}.lock"
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        raise UsageError(f"a report for {profile!r} is already running ({holder}); wait for it or stop it")
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}, started {dt.datetime.now().isoformat(timespec='seconds')}")
    f.flush()
    return f


def same_setup(report_dir: Path, params: dict, env: dict) -> bool:
    """Whether an existing report was measured with this workload on this machine (then a
    re-run resumes it instead of starting a new one)."""
    try:
        old_params = json.loads((report_dir / "params.json").read_text())
        old_env = json.loads((report_dir / "environment.json").read_text())
    except (OSError, ValueError):
        return False
    # The stage list may grow or shrink (STAGES=): each configuration's result is matched by its
    # own fingerprint, so the ones measured before stay valid.
    return (results.setup_key(old_params, old_env) == results.setup_key(params, env)
            and old_params["run"]["batch_sizes"] == params["run"]["batch_sizes"])


def _union_of_stages(report_dir: Path, requested: list[str]) -> tuple[list[str], list[str]]:
    """A resumed report keeps the stages measured before (measuring in pieces on a busy host
    adds chapters; it does not drop them). Returns the union in the cumulative order and the
    stages that only the earlier runs asked for."""
    before = json.loads((report_dir / "params.json").read_text())["stages"]
    kept = [k for k in before if k not in requested and k in stages.STAGES]
    return [k for k in stages.ORDER if k in requested or k in kept], kept


def _earlier_runs(report_dir: Path) -> list[dict]:
    """The measuring runs before this one, oldest first, so run.json accounts for every call
    that measured the report (their re-renders are dropped: the next render replaces them)."""
    try:
        last = json.loads((report_dir / "run.json").read_text())
    except (OSError, ValueError):
        return []
    history = last.pop("earlier_runs", [])
    last.pop("renders", None)
    return history + [last]


def measured_seconds(run: dict) -> float | None:
    """Device time spent measuring a report, over every run that contributed to it."""
    totals = [r.get("timings_s", {}).get("total_s") for r in run.get("earlier_runs", []) + [run]]
    totals = [t for t in totals if t]
    return sum(totals) if totals else None


def run_notebook(src: Path, dest: Path, parameters: dict) -> str | None:
    """Execute one notebook; returns None or a one-line description of the failure."""
    import papermill as pm

    try:
        pm.execute_notebook(str(src), str(dest), parameters=parameters, cwd=str(ROOT), kernel_name="python3",
                            log_output=True, progress_bar=False, report_mode=False,
                            kernel_manager_class=_kernel_manager())
        return None
    except pm.PapermillExecutionError as e:
        return f"{src.name}: cell {e.exec_count}: {e.ename}: {e.evalue}"
    except Exception as e:  # a dead kernel, a missing notebook: recorded, the rest still runs
        return f"{src.name}: {type(e).__name__}: {e}"


def report(args) -> int:
    t_start = time.perf_counter()
    batches = config.parse_batches(args.batches) if args.batches else None
    if args.gpu is not None:
        config.check_name(args.gpu)
        if args.gpu not in config.profiles():
            raise UsageError(f"unknown GPU profile {args.gpu!r} (profiles: {', '.join(config.profiles())})")
    env = detect_environment()
    profile, override = choose_profile(args.gpu, env["device"], args.override)
    params = config.load(profile, batches, override, config.parse_stages(args.stages) if args.stages else None)
    manifest = data.verify()
    reports_root = reports_root_of(args)
    report_dir = reports_root / profile
    try:
        reports_root.mkdir(parents=True, exist_ok=True)
        probe = reports_root / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"cannot write reports to {reports_root}: {e.strerror}")
    _lock = take_lock(reports_root, profile)  # noqa: F841 (held open until this process ends, however it ends)
    earlier_runs = []
    if same_setup(report_dir, params, env) and not args.force:
        print(f"resuming the {profile} report: configurations with valid results for this workload "
              f"and machine are kept (FORCE=1 re-measures everything)")
        params["stages"], kept = _union_of_stages(report_dir, params["stages"])
        if kept:
            print(f"the report keeps the stages measured before: {', '.join(kept)}")
        earlier_runs = _earlier_runs(report_dir)
    else:
        moved = archive_previous(report_dir)
        if moved:
            print(f"earlier {profile} report kept in {moved.relative_to(ROOT) if moved.is_relative_to(ROOT) else moved}")
    (report_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    results.write_atomic(report_dir / "environment.json", env)
    results.write_atomic(report_dir / "params.json", params)
    dev = env["device"]
    print(f"report {profile}: {dev['name']} ({dev['backend']}), stages {', '.join(params['stages'])}, "
          f"batch sizes {params['run']['batch_sizes']}, {manifest['tokens']:,} corpus tokens")
    if args.measure_only:
        return measure_only(report_dir, params, args.force, t_start, earlier_runs)
    failures, chapters, timings = run_notebooks(report_dir, params, measure=True, force=args.force)
    t_measure = time.perf_counter() - t_start
    print("[export] report.html, report.pdf", flush=True)
    timings.update(export.export(report_dir, chapters, report_dir / "notebooks" / "summary.ipynb",
                                 _title(params, profile), t_start))
    if timings.get("pdf_error"):
        failures.append(timings["pdf_error"])
    run = {"profile": profile, "started": dt.datetime.now().isoformat(timespec="seconds"),
           "stage_and_summary_s": t_measure, "timings_s": timings, "failures": failures,
           "earlier_runs": earlier_runs}
    results.write_atomic(report_dir / "run.json", run)
    rel = report_dir.relative_to(ROOT) if report_dir.is_relative_to(ROOT) else report_dir
    print(f"done in {timings['total_s']:.0f} s (measurement + notebooks {t_measure:.0f} s, HTML "
          f"{timings['html_s']:.1f} s, PDF {timings['pdf_s']:.1f} s): {rel}/report.html, {rel}/report.pdf")
    return _exit_code(report_dir, failures)


def measure_only(report_dir: Path, params: dict, force: bool, t_start: float, earlier_runs: list) -> int:
    """Every chapter's measurements and nothing else: for a GPU host with little time to spare
    or no PDF stack. `make render GPU=<profile>` turns the results into the report anywhere."""
    from . import evidence

    failures, timings = [], {}
    started = dt.datetime.now().isoformat(timespec="seconds")

    def record(completed: bool) -> None:  # after every chapter: a run stopped half-way still accounts for itself
        timings["total_s"] = time.perf_counter() - t_start
        results.write_atomic(report_dir / "run.json", {
            "profile": params["name"], "started": started, "measure_only": True, "completed": completed,
            "timings_s": timings, "failures": failures, "earlier_runs": earlier_runs})

    order = chapter_order(params["stages"])
    for i, key in enumerate(order, 1):
        t0 = time.perf_counter()
        print(f"[{i}/{len(order)}] {CHAPTER_TITLES.get(key) or stages.get(key).title}", flush=True)
        try:
            evidence.measure_chapter(key, params, report_dir, force=force)
        except Exception as e:  # recorded; the other chapters still measure
            failures.append(f"{key}: {type(e).__name__}: {e}")
            print(f"    FAILED: {failures[-1]}", flush=True)
        timings[key] = time.perf_counter() - t0
        record(completed=i == len(order))
    print(f"measured in {timings['total_s']:.0f} s; render the report with `make render GPU={params['name']}`"
          + (f" (REPORTS={report_dir.parent})" if report_dir.parent != ROOT / "reports" else ""))
    return _exit_code(report_dir, failures)


def _title(params, profile):
    return f"GPT-2 training optimisation report: {params.get('description', profile)}"


def _exit_code(report_dir, failures) -> int:
    if failures:
        print(f"{len(failures)} failure(s); the report shows them:", *failures, sep="\n  ", file=sys.stderr)
        return 1
    bad = [r for r in results.load_records(report_dir / "results") if r["status"] == "error"]
    if bad:
        print(f"{len(bad)} configuration(s) failed; see the report", file=sys.stderr)
        return 1
    return 0


CHAPTER_TITLES = {"batch_sweep": "Batch-size sweep and recommended configuration"}


def chapter_order(stage_keys: list[str]) -> list[str]:
    """The stages' chapters, with the batch sweep after the single-GPU levers: before the
    multi-GPU stage, which replicates the best configuration the sweep may have found."""
    return stages.single_gpu(stage_keys) + ["batch_sweep"] + [k for k in stage_keys if stages.is_multi_gpu(k)]


def run_notebooks(report_dir: Path, params: dict, measure: bool, force: bool = False):
    """Execute every stage notebook (measuring, or only redrawing) and then the summary."""
    _notebook_session()
    profile = params["name"]
    nb_params = {"gpu": profile, "report_dir": str(report_dir), "batch_sizes": params["run"]["batch_sizes"],
                 "override": params.get("override"), "measure": measure, "force": force}
    failures, chapters, timings = [], [], {}
    order = chapter_order(params["stages"])
    for i, key in enumerate(order, 1):
        t0 = time.perf_counter()
        print(f"[{i}/{len(order)}] {CHAPTER_TITLES.get(key) or stages.get(key).title}", flush=True)
        src = stage_notebook(key)
        dest = report_dir / "notebooks" / src.name
        err = run_notebook(src, dest, nb_params)
        if measure:  # the measurement cell's own lines: one per configuration, kept or measured
            for line in _stream_text(dest, "report-hide").splitlines():
                print("    " + line, flush=True)
        if err:
            failures.append(err)
            print(f"    FAILED: {err}", flush=True)
        if dest.exists():
            chapters.append(dest)
        timings[key] = time.perf_counter() - t0
    t0 = time.perf_counter()
    print("[summary] tables, charts, verdicts", flush=True)
    err = run_notebook(NOTEBOOKS / "summary.ipynb", report_dir / "notebooks" / "summary.ipynb",
                       {"gpu": profile, "report_dir": str(report_dir), "failures": failures})
    if err:
        failures.append(err)
        print(f"    FAILED: {err}", flush=True)
    timings["summary"] = time.perf_counter() - t0
    return failures, chapters, timings


def _stream_text(notebook: Path, tag: str) -> str:
    import nbformat

    try:
        nb = nbformat.read(notebook, as_version=4)
    except (OSError, ValueError):
        return ""
    return "".join(o.get("text", "") for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])
                   for o in c.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stdout")


def render(args) -> int:
    """Redraw an existing report (notebooks, HTML, PDF) from its results, measuring nothing:
    for a presentation change, or to render a GPU host's results on another machine."""
    profile = config.check_name(args.gpu or "cpu")
    reports_root = reports_root_of(args)
    report_dir = reports_root / profile
    if not (report_dir / "params.json").exists() or not (report_dir / "results").is_dir():
        raise UsageError(f"no measured report at {report_dir}: run `make report GPU={profile}` first")
    params = json.loads((report_dir / "params.json").read_text())
    run_path = report_dir / "run.json"
    measured = json.loads(run_path.read_text()) if run_path.exists() else {}
    t_start = time.perf_counter()
    failures, chapters, timings = run_notebooks(report_dir, params, measure=False)
    total = measured_seconds(measured)
    runs = len(measured.get("earlier_runs", [])) + 1
    note = (f"{total:.0f} s on the measuring device" + (
        f" over {runs} runs of the same method (run.json lists them; a ratio may join processes of different "
        "runs, and the process-to-process table spans them)" if runs > 1 else "")
            if total else "not recorded") + \
        f"; this copy was re-rendered from its results on {dt.date.today().isoformat()} by make render"
    timings.update(export.export(report_dir, chapters, report_dir / "notebooks" / "summary.ipynb",
                                 _title(params, profile), t_start, wall_note=note))
    if timings.get("pdf_error"):
        failures.append(timings["pdf_error"])
    measured.setdefault("renders", []).append({"date": dt.datetime.now().isoformat(timespec="seconds"),
                                               "timings_s": timings, "failures": failures})
    results.write_atomic(run_path, measured)
    print(f"re-rendered {report_dir}/report.html and report.pdf in {timings['total_s']:.0f} s")
    return _exit_code(report_dir, failures)


def pdf(args) -> int:
    """Render report.pdf from an existing report.html (for hosts that lack a PDF renderer)."""
    profile = config.check_name(args.gpu or "cpu")
    reports_root = reports_root_of(args)
    html_path = reports_root / profile / "report.html"
    if not html_path.exists():
        raise UsageError(f"no report at {html_path}: run `make report GPU={profile}` first")
    export.to_pdf(html_path.read_text(encoding="utf-8"), html_path.with_suffix(".pdf"), html_path.parent)
    print(f"wrote {html_path.with_suffix('.pdf')}")
    return 0


def compare(args) -> int:
    """One report across GPUs from existing reports/<gpu>/ folders (measures nothing)."""
    from . import compare as cmp

    names = [n for n in (args.gpus or "").replace(",", " ").split() if n]
    for n in names:
        config.check_name(n)
    reports_root = reports_root_of(args)
    try:
        cmp.load_all(names, reports_root)
    except cmp.CompareError as e:
        raise UsageError(str(e)) from None
    out_dir = reports_root / ("compare-" + "-".join(names))
    (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    _notebook_session()
    print(f"compare {' vs '.join(names)}", flush=True)
    nb = out_dir / "notebooks" / "compare.ipynb"
    err = run_notebook(NOTEBOOKS / "compare.ipynb", nb,
                       {"gpus": names, "reports_root": str(reports_root), "out_dir": str(out_dir)})
    failures = [err] if err else []
    timings = export.export(out_dir, [], nb, f"GPT-2 training step across GPUs: {' vs '.join(names)}", t_start)
    if timings.get("pdf_error"):
        failures.append(timings["pdf_error"])
    print(f"wrote {out_dir}/report.html and report.pdf in {timings['total_s']:.0f} s")
    if failures:
        print(*failures, sep="\n", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.cli")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report", help="measure every stage and render the report")
    # Defaults come from the environment so the Makefile never pastes user text into a shell line.
    env = os.environ
    r.add_argument("--gpu", default=env.get("GPU") or None, help="profile name (params/<name>.yaml); default: detect")
    r.add_argument("--batches", default=env.get("BATCHES") or None,
                   help="batch sizes, e.g. '16 32 64' (default: the profile's)")
    r.add_argument("--stages", default=env.get("STAGES") or None,
                   help="measure only these stages, e.g. 'fp32 vocab ddp' (the first is the baseline)")
    r.add_argument("--override", action="store_true", default=env.get("OVERRIDE", "") not in ("", "0"),
                   help="run a profile on a device it does not name")
    r.add_argument("--reports", default=env.get("REPORTS") or None, help="reports folder (default: reports/)")
    r.add_argument("--force", action="store_true", default=env.get("FORCE", "") not in ("", "0"),
                   help="re-measure everything (the earlier report is archived, not overwritten)")
    r.add_argument("--measure-only", action="store_true", default=env.get("MEASURE_ONLY", "") not in ("", "0"),
                   help="measure every chapter but render nothing (then `make render` here or elsewhere)")
    for name, text in (("pdf", "render report.pdf from an existing report.html"),
                       ("render", "redraw notebooks, HTML and PDF from existing results, measuring nothing")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--gpu", default=env.get("GPU") or None)
        p.add_argument("--reports", default=env.get("REPORTS") or None)
    c = sub.add_parser("compare", help="one report across GPUs from existing reports")
    c.add_argument("--gpus", default=env.get("GPUS") or None, help="e.g. 'h100 h200'")
    c.add_argument("--reports", default=env.get("REPORTS") or None)
    args = ap.parse_args(argv)
    try:
        return {"report": report, "pdf": pdf, "render": render, "compare": compare}[args.cmd](args)
    except (UsageError, config.ConfigError, data.DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
