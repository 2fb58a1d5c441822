"""What `make report`, `make render`, `make pdf` and `make compare` do, step by step: validate
the inputs, detect the device, measure every chapter (each configuration in its own process),
then draw the chapters and the summary and export HTML and PDF.

Every bad input raises config.UsageError (or ConfigError, DataError) before anything is measured."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from lib.core import chapters, cli_args, config, data, stages
from lib.core.config import UsageError
from lib.core.params import Params
from lib.core.paths import ROOT
from lib.report import export
from lib.report import loader as report_view
from lib.results import recommendation, store
from lib.run import ddp_launch, notebook_runner, report_folder, run_log


def detect_environment() -> dict:
    from lib.run.runner import (
        capture_environment,  # imported here: the launcher is only needed to measure
    )

    try:
        return capture_environment()
    except RuntimeError as e:
        raise UsageError(f"could not inspect the device: {e}") from None


def choose_profile(gpu: str | None, device: dict, allow_mismatch: bool) -> tuple[str, str | None]:
    """(profile, override note). Without GPU= the device decides; with it, the device must fit."""
    count = device.get("count") or 1
    detected = config.match_profile(device["name"], device["backend"], count)
    if gpu is None:
        if detected is None:
            raise UsageError(
                f"no profile matches the detected {device['backend']} device "
                f"{device['name']!r}; add params/<name>.yaml with a `match` entry, or pass "
                f"GPU=<profile> OVERRIDE=1 (profiles: {', '.join(config.profiles())})"
            )
        return detected, None
    config.check_profile(gpu)
    profile_backend = config.profile_backend(gpu)
    if profile_backend != device["backend"]:
        raise UsageError(
            f"profile {gpu!r} is for {profile_backend} devices, but this machine has "
            f"{device['backend']} ({device['name']}); run `make report` without GPU= "
            f"to use the detected profile ({detected or 'none'})"
        )
    if detected != gpu and not config.profile_fits(gpu, device["name"], device["backend"], count):
        if not allow_mismatch:
            raise UsageError(
                f"profile {gpu!r} does not match the detected device {device['name']!r} "
                f"(detected profile: {detected or 'none'}); pass OVERRIDE=1 to run it anyway"
            )
        return gpu, f"profile {gpu} run on {device['name']} by explicit override"
    return gpu, None


def check_device(gpu: str | None) -> None:
    """The early check's part that needs the device (`make report GPU=...`): a profile of another backend than this
    machine's is refused here, in one line before anything else is printed (OVERRIDE=1 cannot run it either). A
    device of the profile's backend that the profile does not name is the run's to refuse, which knows OVERRIDE."""
    if gpu is None:
        return
    from lib.measure.environment import detect  # torch, imported only where GPU= names a profile

    try:
        device = detect()
    except Exception:  # a device that cannot be inspected: the run says why (detect_environment)
        return
    choose_profile(gpu, device, allow_mismatch=True)


def _title(params: Params, report_dir: Path) -> str:
    """The document's title: the model preset and the device; a host of several GPUs says so (its
    DDP stage used them all)."""
    env = (
        json.loads((report_dir / "environment.json").read_text()) if (report_dir / "environment.json").exists() else {}
    )
    count = (env.get("device") or {}).get("count") or 1
    host = f", a host of {count} GPUs" if count > 1 else ""
    return f"{config.preset_of(params)} training optimisation report: {params.description or params.name}{host}"


def _folder(root: Path, gpu: str | None, model: str | None) -> Path:
    """reports/<profile>[-<preset>] of `make render` and `make pdf` (MODEL= checked like `make report`'s)."""
    profile = config.check_name(gpu or "cpu")
    if not model:
        return root / profile
    config.check_model(model)
    return root / config.report_name(profile, model)


def _rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def check_inputs(
    gpu: str | None,
    batches: str | None,
    stage_list: str | None,
    reports: str | None,
    nnodes: str | None = None,
    node_rank: str | None = None,
    rdzv: str | None = None,
    chapter_list: str | None = None,
    price: str | None = None,
    model: str | None = None,
    depth: str | None = None,
):
    """The inputs of a report that can be checked without the device: profile, model preset, batch sizes,
    stages, reports folder, the DDP stage's nodes (cli_args.check_launch), the chapters to measure.
    Returns (batch sizes or None, stage keys or None)."""
    parsed = (
        cli_args.parse_batches(batches) if batches else None,
        cli_args.parse_stages(stage_list) if stage_list else None,
    )
    if chapter_list:
        chapters.parse(chapter_list)
    cli_args.parse_price(price)
    config.check_depth(depth)
    if model:
        config.check_model(model)
    cli_args.check_launch(nnodes, node_rank, rdzv)
    if gpu is not None:
        config.check_profile(gpu)
    report_folder.check_writable(report_folder.reports_root(reports))
    return parsed


def report(args) -> int:
    """Measure (resuming a report of the same workload and machine) and, unless measure_only,
    draw and export. The one params object of the run is written to params.json before anything
    else; every chapter reads that copy. run.json is the program's own account of the run, kept
    true as it goes (lib/run/run_log.py)."""
    t_start = time.perf_counter()
    model, depth = getattr(args, "model", None), getattr(args, "depth", None)
    batches, stage_keys = check_inputs(args.gpu, args.batches, args.stages, args.reports, model=model, depth=depth)
    only = chapters.parse(args.chapters) if getattr(args, "chapters", None) else None
    launch = cli_args.check_launch(
        getattr(args, "nnodes", None), getattr(args, "node_rank", None), getattr(args, "rdzv", None)
    )
    env = detect_environment()
    profile, override = choose_profile(args.gpu, env["device"], args.override)
    params = config.load(profile, batches, override, stage_keys, model=model, depth=depth)
    manifest = data.verify()
    root = report_folder.reports_root(args.reports)
    report_folder.create(root)
    name = config.report_name(profile, params.model_preset)
    report_dir = root / name
    _lock = report_folder.take_lock(root, name)  # noqa: F841 (held open until this process ends, however it ends)
    earlier, resume = [], report_folder.same_setup(report_dir, params, env) and not args.force
    history = report_folder.earlier_runs(report_dir)  # also the progress estimates of a run that starts afresh
    kept = []
    if resume:
        params.stages, kept = report_folder.union_of_stages(report_dir, params.stages)
        params.chapters = report_folder.union_of_chapters(report_dir, params.chapters)
    if only:  # checked before anything in the folder moves; a chapter beyond the stages that is named joins
        chapters.check_part_of(only, params.stages)
        params.chapters = [k for k in stages.BEYOND_STAGES if k in params.chapters or k in only]
    params.not_run = config.not_run(params)
    if resume:
        print(
            f"resuming the {name} report: configurations with valid results for this workload "
            f"and machine are kept (FORCE=1 re-measures everything)"
        )
        if kept:
            print(f"the report keeps the stages measured before: {', '.join(kept)}")
        earlier = history
    else:
        moved = report_folder.archive_previous(report_dir)
        if moved:
            print(f"earlier {name} report kept in {_rel(moved)}")
        report_folder.keep_long_test(moved, report_dir)
    (report_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    store.write_atomic(report_dir / "environment.json", env)
    store.write_atomic(report_dir / "params.json", params)
    dev = env["device"]
    print(
        f"report {name}: {params.model_preset} on {dev['name']} ({dev['backend']}), stages {', '.join(params.stages)}, "
        f"batch sizes {params.run.batch_sizes}, {manifest['tokens']:,} corpus tokens, depth {params.depth}"
        + (
            f" (not measured: {', '.join(n['key'] for n in params.not_run)}; DEPTH=full adds them)"
            if params.not_run
            else ""
        )
    )
    log = run_log.RunLog(
        report_dir, params, env, earlier, report_folder.command(), run_log.estimates(params, history, env["device"])
    )
    try:
        failures, timings = measure_chapters(report_dir, params, args.force, log, launch=launch, only=only)
    except run_log.TimeBudgetSpent as spent:
        print(f"stopped: {spent}", flush=True)
        return 3
    every = chapters.order(params.stages, params.chapters)
    complete = not only or len(only) == len(every)
    if args.measure_only:
        log.finish(completed=complete, measure_only=True)
        again = f"GPU={profile}" + (f" MODEL={params.model_preset}" if name != profile else "")
        print(
            f"measured in {timings['total_s']:.0f} s; render the report with `make render {again}`"
            + (f" (REPORTS={report_dir.parent})" if report_dir.parent != ROOT / "reports" else "")
        )
        return report_folder.exit_code(report_dir, failures)
    t_measure = time.perf_counter() - t_start
    log.measured(completed=complete)  # a resume that measured nothing new keeps the earlier run's account
    # the decisions first, once: every notebook reads decisions.json (loader.load's read_decisions)
    recommendation.write(report_view.load(report_dir))
    drawn_failures, drawn, draw_s, all_kept = notebook_runner.draw(report_dir, params, failures)
    t_draw = time.perf_counter() - t_start - t_measure  # wall time: the chapters are drawn two at a time
    summary = report_dir / "notebooks" / "summary.ipynb"
    if all_kept and notebook_runner.exported_from(report_dir, [*drawn, summary]):
        print("[export] report.html and report.pdf kept: exported from these notebooks before", flush=True)
        timings.update(html_s=0.0, pdf_s=0.0, pdf_error=None, total_s=time.perf_counter() - t_start)
    else:
        print("[export] report.html, report.pdf", flush=True)
        timings.update(export.export(report_dir, drawn, summary, _title(params, report_dir), t_start))
    if timings.get("pdf_error"):
        drawn_failures.append(timings["pdf_error"])
    log.rendered(timings, draw_s, drawn_failures)
    failures += drawn_failures
    print(
        f"done in {timings['total_s']:.0f} s (measurement {t_measure:.0f} s, notebooks {t_draw:.0f} s, "
        f"HTML {timings['html_s']:.1f} s, PDF {timings['pdf_s']:.1f} s): "
        f"{_rel(report_dir)}/report.html, {_rel(report_dir)}/report.pdf"
    )
    return report_folder.exit_code(report_dir, failures)


def measure_chapters(
    report_dir: Path, params: Params, force: bool, log, launch: dict | None = None, only: list[str] | None = None
) -> tuple[list[str], dict]:
    """Every chapter's measurements, in chapter order, in this process (one measurement launcher
    for the whole run); with `only` (CHAPTERS=), just those chapters, in the order given, so a host
    with little time measures what matters first. `log` (run_log.RunLog) rewrites run.json after
    every configuration and prints the progress. `launch` (cli_args.check_launch) makes the DDP stage
    one node of several. Returns (failures, seconds per chapter)."""
    from lib.run import evidence, runner  # imported here: rendering never needs the launcher

    failures, timings = [], {}
    order = [chapters.CHAPTERS[k] for k in only] if only else chapters.order(params.stages, params.chapters)
    runner.OBSERVERS[:] = [log]
    for i, chapter in enumerate(order, 1):
        t0 = time.perf_counter()
        log.chapter(i, order)  # printed with the chapter's first measured record (a resume keeps the rest quiet)
        failure = None
        try:
            if chapter.key == "ddp" and launch and launch["nnodes"] > 1:  # this node's part of a multi-node job
                ddp_launch.run_ddp(params, report_dir, force=force, launch=launch)
            else:
                evidence.measure_chapter(chapter.key, params, report_dir, force=force)
        except run_log.TimeBudgetSpent:
            log.chapter_cut(chapter.key, time.perf_counter() - t0)
            raise
        except Exception as e:  # recorded; the other chapters still measure
            failure = f"{chapter.key}: {type(e).__name__}: {e}"
            failures.append(failure)
            log.announce()
            print(f"    FAILED: {failure}", flush=True)
        timings[chapter.key] = time.perf_counter() - t0
        log.chapter_done(chapter.key, timings[chapter.key], failure)
    if kept := log.kept_line():
        print(kept, flush=True)
    timings["total_s"] = log.elapsed()
    return failures, timings


def render(args) -> int:
    """Redraw an existing report (notebooks, HTML, PDF) from its results, measuring nothing:
    for a presentation change, or to render a GPU host's results on another machine."""
    report_dir = _folder(report_folder.reports_root(args.reports), args.gpu, getattr(args, "model", None))
    if not (report_dir / "params.json").exists() or not (report_dir / "results").is_dir():
        raise UsageError(
            f"no measured report at {report_dir}: run `make report GPU={args.gpu or 'cpu'}"
            + (f" MODEL={args.model}" if getattr(args, "model", None) else "")
            + "` first"
        )
    params = Params.read(report_dir / "params.json")
    report_view.refuse_earlier_rule(report_dir, params)  # before any notebook runs: one line, no traceback
    run_path = report_dir / "run.json"
    measured = json.loads(run_path.read_text()) if run_path.exists() else {}
    t_start = time.perf_counter()
    recommendation.write(report_view.load(report_dir))  # the decisions first, once: every notebook reads them
    failures, drawn, timings, _ = notebook_runner.draw(report_dir, params, keep=False)  # asked for: drawn afresh
    total = store.measured_seconds(measured)
    runs = len(measured.get("earlier_runs", [])) + 1
    note = (
        f"{total:.0f} s on the measuring device"
        + (
            f" over {runs} runs of the same method (run.json lists them; the process-to-process table spans them)"
            if runs > 1
            else ""
        )
        if total
        else "not recorded"
    ) + f"; this copy was re-rendered from its results on {dt.date.today().isoformat()} by make render"
    timings.update(
        export.export(
            report_dir,
            drawn,
            report_dir / "notebooks" / "summary.ipynb",
            _title(params, report_dir),
            t_start,
            wall_note=note,
        )
    )
    if timings.get("pdf_error"):
        failures.append(timings["pdf_error"])
    # A render measures nothing: its account goes to render.json (not committed), and run.json stays the measuring
    # runs' own, so two renders of the same records leave the same bytes.
    store.write_atomic(
        report_dir / "render.json",
        {"date": dt.datetime.now().isoformat(timespec="seconds"), "timings_s": timings, "failures": failures},
    )
    print(f"re-rendered {report_dir}/report.html and report.pdf in {timings['total_s']:.0f} s")
    return report_folder.exit_code(report_dir, failures)


def pdf(args) -> int:
    """Render report.pdf from an existing report.html (for hosts that lack a PDF renderer)."""
    html_path = (
        _folder(report_folder.reports_root(args.reports), args.gpu, getattr(args, "model", None)) / "report.html"
    )
    if not html_path.exists():
        raise UsageError(f"no report at {html_path}: run `make report GPU={args.gpu or 'cpu'}` first")
    export.to_pdf(html_path.read_text(encoding="utf-8"), html_path.with_suffix(".pdf"), html_path.parent)
    print(f"wrote {html_path.with_suffix('.pdf')}")
    return 0


def compare(args) -> int:
    """One report across GPUs from existing reports/<gpu>/ folders (measures nothing)."""
    from lib.report import compare as cmp

    names = [n for n in (args.gpus or "").replace(",", " ").split() if n]
    for n in names:
        config.check_name(n)
    root = report_folder.reports_root(args.reports)
    out_dir = root / ("compare-" + "-".join(names))
    try:
        reps = cmp.load_all(names, root, out_dir)
    except cmp.CompareError as e:
        raise UsageError(str(e)) from None
    (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    reps.write()  # decided once, before the notebook draws them
    t_start = time.perf_counter()
    notebook_runner.session()
    print(f"compare {' vs '.join(names)}", flush=True)
    nb = out_dir / "notebooks" / "compare.ipynb"
    err = notebook_runner.run_notebook(
        chapters.COMPARE,
        nb,
        {"gpus": names, "reports_root": notebook_runner.portable(root), "out_dir": notebook_runner.portable(out_dir)},
    )
    notebook_runner.without_clock(nb)  # committed: a render of unchanged reports must leave git clean
    os.environ.setdefault("SOURCE_DATE_EPOCH", "0")  # so do the PDF's embedded fonts (fontTools stamps them)
    failures = [err] if err else []
    timings = export.export(out_dir, [], nb, f"GPT-2 training step across GPUs: {' vs '.join(names)}", t_start)
    if timings.get("pdf_error"):
        failures.append(timings["pdf_error"])
    print(f"wrote {out_dir}/report.html and report.pdf in {timings['total_s']:.0f} s")
    if failures:
        print(*failures, sep="\n", file=sys.stderr)
        return 1
    return 0
