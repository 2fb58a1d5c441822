"""The whole CPU pipeline, end to end: `python -m lib.cli report` with REPORTS pointing at a
temporary folder. It runs once (session fixture `pipeline`); these tests read what it left."""

from __future__ import annotations

import json
import math
import re
import shutil

import pytest
from conftest import ROOT, describe_proc, pdf_page_count, read_json, run_cli

from lib.core import record, stages
from lib.report import export
from lib.results import decide, noise, store

SECTION_HEADINGS = [
    "The recipe and what each of its levers is worth",
    "Quality tests",
    "Experimental matrix",
    "Verdicts on the prevailing claims",
    "Environment and method",
    "Analysis per lever",
    "Appendix",
    "Words on page 1",  # the glossary: page 1 keeps its words plain, the HTML says what each means
]


# The default depth: the hand-written FP8 layers and max-autotune run with DEPTH=full (params' full_depth)
SINGLE_DEVICE = [
    "fp32",
    "tf32",
    "bf16",
    "flash",
    "vocab",
    "fused",
    "compile",
    "fp8_torchao",
    "fused_ce",
    "bf16_residual",
    "loss_only",
    "fp8_head",
    "fp8_classifier",
]
NOT_ON_CPU = {
    "compile": "not measured by the cpu profile",
    "fp8": "compute capability 8.9",
    "fp8_torchao": "cpu backend",
    "fused_ce": "cpu backend",
    "autotune": "cpu backend",
    "bf16_residual": "not measured by the cpu profile",
    "fp8_head": "cpu backend",
    "fp8_classifier": "cpu backend",
    "loss_only": "not measured by the cpu profile",
}


def expected_records(params):
    """Every stage at every batch size of the matrix, except that a compiled stage runs at the largest alone
    (compiled_small_batches is depth): the CPU default takes the GPU report's path."""
    largest = max(params.run.batch_sizes)
    return {
        (s, b)
        for s in params.stages
        if s != "ddp"
        for b in params.run.batch_sizes
        if b == largest or not stages.get(s).compile
    }


def all_records(run, measured_only=False):
    """The single-device records (the multi-GPU stage is a single 'not applicable' row on a CPU);
    with measured_only, without the stages the CPU cannot or does not run."""
    recs = [r for r in (read_json(p) for p in sorted(run.results_dir.glob("*.json"))) if r["stage"] != "ddp"]
    return [r for r in recs if r["stage"] not in NOT_ON_CPU] if measured_only else recs


def test_the_multi_gpu_stage_is_one_not_applicable_row_on_a_cpu(pipeline_ok):
    rows = [read_json(p) for p in pipeline_ok.results_dir.glob("ddp__b*.json")]
    assert len(rows) == 1
    assert rows[0]["status"] == "not_applicable" and "two or more GPUs" in rows[0]["reason"]
    # At the best configuration's batch size, which the batch sweep may have raised.
    p = pipeline_ok.params
    assert rows[0]["batch_size"] in p.run.batch_sizes + p.evidence.sweep_batch_sizes


def test_pipeline_exits_zero(pipeline):
    assert pipeline.proc.returncode == 0, describe_proc(pipeline.proc)


def test_pipeline_measures_every_stage_of_params(pipeline_ok):
    assert pipeline_ok.params.stages == SINGLE_DEVICE + ["ddp"]
    names = {p.name for p in pipeline_ok.results_dir.glob("*.json") if not p.name.startswith("ddp__")}
    expected = {store.record_path(".", s, b).name for s, b in expected_records(pipeline_ok.params)}
    assert names == expected


def test_result_records_match_their_file_names(pipeline_ok):
    for path in pipeline_ok.results_dir.glob("*.json"):
        rec = read_json(path)
        # A multi-GPU record also names its GPU count (one record per count: the scaling curve's points).
        suffix = r"__g\d+" if stages.is_multi_gpu(rec["stage"]) else ""
        assert re.fullmatch(rf"{rec['stage']}__b{rec['batch_size']}{suffix}\.json", path.name), path.name
        assert rec["profile"] == "cpu"


def test_result_records_have_schema_and_ok_status(pipeline_ok):
    for rec in all_records(pipeline_ok):
        assert rec["schema_version"] == record.SCHEMA_VERSION
        if rec["stage"] in NOT_ON_CPU:  # each says why, in the row the report shows
            assert rec["status"] == "not_applicable" and NOT_ON_CPU[rec["stage"]] in rec["reason"]
        else:
            assert rec["status"] == "ok", (rec["stage"], rec["batch_size"], rec.get("reason"))
            assert rec["kernel_profile"]["busy_ms"] > 0 and rec["first_step_s"] > 0
            assert "no power sensor" in rec["energy"]["unavailable"]


def test_a_completed_run_is_not_called_incomplete(pipeline_ok, report_html):
    """The report is drawn while its run is still open ('running', by the living process): page 1 must not read
    that as a run cut off (seen on a fresh clone's CPU report after the killed-run check was added)."""
    assert "Incomplete" not in report_html and read_json(pipeline_ok.report_dir / "run.json")["state"] == "completed"


def test_evidence_is_measured_and_shown(pipeline_ok, report_html):
    ev = pipeline_ok.results_dir
    gemm = read_json(ev / "gemm" / "lm_head.json")
    widths = {p["n"] for p in gemm["points"]}
    assert {1000, 1024, 896, 1152} <= widths and set(gemm["kernels"]["bf16"]) == {"1000", "1024"}
    # the sequence-length curve explains and decides nothing: at the default depth page 1 names the command instead
    assert not (ev / "seq").exists() and "sequence-length curve is measured at DEPTH=full only" in report_html
    assert "naive attention against SDPA across sequence lengths" in report_html  # page 1's list of what it left out
    sweep = [read_json(p) for p in (ev / "sweep").glob("*.json")]
    assert sweep and all(r["variant"] == "batch sweep" for r in sweep)
    assert len({r["stage"] for r in sweep}) == 1
    figures = {p.stem for p in (pipeline_ok.report_dir / "figures").glob("*.png")}
    assert {"gemm_sweep", "kernel_profile", "batch_sweep"} <= figures and "seq_sweep" not in figures
    for text in (
        "Recommended configuration",
        "Where the step time goes",
        "Energy was not measured on this device",
        "Naive against SDPA across sequence lengths",
        "The lm_head GEMM across vocabulary widths",
        "Memory, three layers, FP32 against TF32",
        "not measured by the cpu profile",
    ):
        assert text in report_html, text


def test_the_recommendation_rests_on_repeats_a_plain_loop_cross_check_and_a_parity_run(pipeline_ok, report_html):
    ev, p = pipeline_ok.results_dir, pipeline_ok.params
    best = decide.recommended(store.decision_records(ev), p)
    key = (best["stage"], best["batch_size"])
    repeats = [read_json(f) for f in (ev / "repeats").glob("*.json")]
    # the repeats rule: a second process always, a third only where the first two differ beyond the tolerance
    mine = sorted((r for r in repeats if (r["stage"], r["batch_size"]) == key), key=lambda r: r["repeat"])
    first = [
        r
        for r in store.decision_records(ev)
        if (r["stage"], r["batch_size"]) == key and r.get("variant") in (None, "batch sweep") and r["status"] == "ok"
    ]
    two = [first[0]["tokens_per_s"], mine[0]["tokens_per_s"]]
    wanted = 1 + (noise.spread(two)["spread"] > p.evidence.repeat_tolerance) * (p.evidence.repeats - 2)
    assert len(mine) == wanted
    assert best["processes"]["n"] == 1 + len(mine)  # the first process and its repeats, however many the rule asked
    plain = {(r["stage"], r["batch_size"]): r for r in map(read_json, (ev / "crosscheck").glob("*.json"))}
    b = p.evidence.crosscheck_batch
    assert {("flash", b), ("vocab", b), key} <= set(plain)
    assert all(r["status"] == "ok" and r["kind"] == "plain" and r["ms_per_step"] > 0 for r in plain.values())
    parity = {r["stage"]: r for r in map(read_json, (ev / "parity").glob("*.json"))}
    ref = stages.get(best["stage"]).reference
    if ref == best["stage"]:  # the baseline itself was fastest (it can be, on a CPU): nothing to hold it against
        assert parity == {} and "No parity test" in report_html
    else:  # each seed: the recommendation and its reference, paired on weights and data, to the look that decided
        runs = [read_json(f) for f in (ev / "parity").glob("*.json")]
        assert {r["stage"] for r in runs} == {best["stage"], ref} and "Quality test</strong>: " in report_html
        seeds = {r["seed_offset"] for r in runs}
        assert seeds == set(range(len(seeds))) and len(seeds) in p.evidence.parity_looks
        assert len(runs) == 2 * len(seeds) and not any(r["replicate"] for r in runs)  # no repeat pairs
        # one process a side per round (a look): each series as long as the round's seeds
        assert all(r["series"]["runs"] in p.evidence.parity_looks or r["series"]["runs"] == 1 for r in runs)
        assert "share a process and its one compilation" in report_html
        tokens = p.evidence.parity_horizon_tokens
        assert all(
            len(r["losses"]) == r["steps"] == tokens // (r["batch_size"] * r["seq_len"]) and r["held_out_loss"] > 0
            for r in runs
        )
    for text in ("Harness against a plain training loop", "Process-to-process spread", "Noise floor of this report"):
        assert text in report_html, text


def test_result_records_have_consistent_timing_statistics(pipeline_ok):
    for rec in all_records(pipeline_ok, measured_only=True):
        where = (rec["stage"], rec["batch_size"])
        assert rec["median_ms"] > 0, where
        assert rec["p10_ms"] <= rec["median_ms"] <= rec["p90_ms"], where
        assert rec["cv"] >= 0, where
        assert rec["tokens_per_s"] > 0, where
        assert len(rec["step_ms"]) == rec["timed_steps"] == pipeline_ok.params.run.timed_steps, where
        assert all(t > 0 for t in rec["step_ms"]), where
        tokens_per_step = rec["batch_size"] * rec["seq_len"]
        assert rec["tokens_per_s"] == pytest.approx(tokens_per_step / (rec["median_ms"] / 1e3)), where
        if not rec.get("world_size"):  # where the process's time went, beside its timed steps
            phases = rec["phases_s"]
            assert {"build", "first_step", "warmup", "timed"} <= set(phases), where
            assert all(v >= 0 for v in phases.values()) and sum(phases.values()) <= rec["wall_s"] + 1e-3, where


def test_result_records_keep_every_loss_and_a_finite_final_loss(pipeline_ok):
    r = pipeline_ok.params.run
    for rec in all_records(pipeline_ok, measured_only=True):
        where = (rec["stage"], rec["batch_size"])
        assert len(rec["losses"]) == r.warmup_steps + r.timed_steps, where
        assert all(math.isfinite(v) for v in rec["losses"]), where
        assert math.isfinite(rec["final_loss"]), where


def test_sdpa_stages_record_their_backend_and_naive_stages_do_not(pipeline_ok):
    for rec in all_records(pipeline_ok, measured_only=True):
        if stages.get(rec["stage"]).attention == "sdpa":
            assert isinstance(rec.get("sdpa_backend"), str) and rec["sdpa_backend"], rec["stage"]
        else:
            assert rec.get("sdpa_backend") is None, rec["stage"]
    assert {rec["stage"] for rec in all_records(pipeline_ok, measured_only=True) if rec.get("sdpa_backend")} == {
        "flash",
        "vocab",
        "fused",
    }
    # Not where no view reads it: a repeat, a sweep point, the recipe, the ablation (an eager forward under the
    # profiler, 0.2-0.6 s a process on an H100, about 10 s of a report)
    for kind in ("repeats", "sweep", "recipe", "ablation"):
        for path in (pipeline_ok.results_dir / kind).glob("*.json"):
            rec = read_json(path)
            assert "sdpa_backend" not in rec and "sdpa_probe" not in (rec.get("phases_s") or {}), path


def test_executed_notebooks_one_per_chapter_plus_summary_each_its_chapter_drawn_from_the_template(pipeline_ok):
    names = sorted(p.name for p in (pipeline_ok.report_dir / "notebooks").glob("*.ipynb"))
    assert names == sorted(
        [f"{s}.ipynb" for s in pipeline_ok.params.stages] + ["batch_sweep.ipynb", "size_sweep.ipynb", "summary.ipynb"]
    )
    for s in pipeline_ok.params.stages:
        nb = read_json(pipeline_ok.report_dir / "notebooks" / f"{s}.ipynb")
        assert nb["metadata"]["papermill"]["parameters"]["chapter"] == s
        shown = "".join(
            "".join(o.get("data", {}).get("text/markdown", "")) for c in nb["cells"] for o in c.get("outputs", [])
        )
        outputs = [o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []) if o.get("data")]
        first = "".join(outputs[0].get("text/markdown") or outputs[0].get("text/html", ""))
        heading = (ROOT / "notebooks" / "chapters" / f"{s}.md").read_text().splitlines()[0]
        # its own text, heading first: as Markdown, or in the opening block a brief chapter keeps whole (HTML)
        assert first.startswith(heading) or f">{heading.lstrip('# ')}</h3>" in first.split("</h3>")[0] + "</h3>", s
        # the rest in Markdown, or in a block for the HTML alone (the switch always; all of a chapter that timed nothing)
        everything = shown + "".join(
            "".join(o.get("data", {}).get("text/html", "")) for c in nb["cells"] for o in c.get("outputs", [])
        )
        assert "Measured" in everything and "The switch" in everything, s
    ids = [c["id"] for c in read_json(pipeline_ok.report_dir / "report.ipynb")["cells"]]
    assert len(ids) == len(set(ids))  # the chapters share one template: export.assemble tells their cells apart


def test_executed_notebooks_have_no_errors_and_every_cell_ran(pipeline_ok):
    for path in (pipeline_ok.report_dir / "notebooks").glob("*.ipynb"):
        nb = read_json(path)
        assert not nb["metadata"].get("papermill", {}).get("exception"), path.name
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            assert cell.get("execution_count") is not None, (path.name, cell["source"])
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            assert not errors, (path.name, errors)


@pytest.fixture(scope="module")
def report_html(pipeline_ok):
    path = pipeline_ok.report_dir / "report.html"
    assert path.exists()
    return path.read_text(encoding="utf-8")


def test_report_html_names_every_stage(report_html, pipeline_ok):
    for key in pipeline_ok.params.stages:
        assert stages.get(key).title in report_html, key


@pytest.mark.parametrize("heading", SECTION_HEADINGS)
def test_report_html_has_section_heading(report_html, heading):
    assert re.search(r"<h[1-6][^>]*>[^<]*" + re.escape(heading), report_html), heading


def test_report_html_loads_nothing_from_the_internet(report_html):
    remote = re.compile(r"""<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)
    assert not remote.search(report_html)
    assert not re.search(r"@import|url\(\s*['\"]?\s*(https?:)?//", report_html, re.I)


def test_report_html_embeds_its_charts(report_html):
    srcs = re.findall(r"""<img\b[^>]*\bsrc\s*=\s*["']\s*([^"']{0,20})""", report_html, re.I)
    assert srcs, "no charts in the report"
    assert all(s.startswith("data:image/") for s in srcs), srcs


def test_no_python_warning_reaches_the_report(report_html):
    # The embedded images' base64 is left out: "/lib/" is five characters of its alphabet, and a 1.4 MB
    # report holds them by chance about once in a thousand renders (seen on a fresh clone's make test).
    text = re.sub(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=]+", "", report_html)
    assert "Warning:" not in text and "/lib/" not in text


def test_report_html_has_the_wall_time_filled_in(report_html):
    assert export.WALL_TIME_TOKEN not in report_html
    assert re.search(
        r"Wall time</strong>: \d+ s for this whole run: measuring every configuration, then the "
        r"notebooks and HTML \(the PDF's own time is in run.json\)",
        report_html,
    )


def test_report_pdf_is_a_pdf_of_several_pages(pipeline_ok):
    path = pipeline_ok.report_dir / "report.pdf"
    assert path.read_bytes()[:5] == b"%PDF-"
    assert pdf_page_count(path) > 3


def test_figures_are_png_files(pipeline_ok):
    figures = pipeline_ok.report_dir / "figures"
    expected = {"throughput", "memory", "step_spread", "loss_all"} | {f"loss_{s}" for s in pipeline_ok.params.stages}
    assert expected <= {p.stem for p in figures.glob("*.png")}
    for p in figures.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p.name


def test_run_json_records_no_failures(pipeline_ok):
    run = read_json(pipeline_ok.report_dir / "run.json")
    assert run["profile"] == "cpu"
    assert run["failures"] == []
    assert run["timings_s"]["pdf_error"] is None
    assert set(pipeline_ok.params.stages) <= set(run["timings_s"])


def test_report_folder_keeps_params_and_environment(pipeline_ok):
    assert read_json(pipeline_ok.report_dir / "params.json")["name"] == "cpu"
    assert read_json(pipeline_ok.report_dir / "environment.json")["device"]["backend"] == "cpu"


def test_pipeline_writes_only_its_profile_folder_into_reports(pipeline_ok):
    visible = {p.name for p in pipeline_ok.reports.iterdir() if not p.name.startswith(".")}  # .cpu.lock
    assert visible == {"cpu"}


# ---------------------------------------------------------------- a second run keeps the first


@pytest.fixture(scope="module")
def second_run(pipeline_ok, tmp_path_factory):
    """A second report into a REPORTS folder that already holds the first one (a copy, so the
    other tests keep reading the original). BATCHES=2 keeps it short."""
    reports = tmp_path_factory.mktemp("reports_again")
    shutil.copytree(pipeline_ok.report_dir, reports / "cpu")
    proc = run_cli("report", REPORTS=reports, BATCHES="2")
    return proc, reports


@pytest.mark.rerun
def test_second_run_succeeds_with_the_batches_it_was_given(second_run):
    proc, reports = second_run
    assert proc.returncode == 0, describe_proc(proc)
    names = {p.name for p in (reports / "cpu" / "results").glob("*.json") if not p.name.startswith("ddp__")}
    assert names == {f"{s}__b2.json" for s in SINGLE_DEVICE}
    assert len(list((reports / "cpu" / "results").glob("ddp__b*.json"))) == 1
    assert (reports / "cpu" / "report.html").exists()


@pytest.mark.rerun
def test_second_run_moves_the_first_report_to_archive(second_run, pipeline_ok):
    proc, reports = second_run
    archived = list((reports / "archive").glob("cpu-*"))
    assert len(archived) == 1, describe_proc(proc)
    old = archived[0]
    assert (old / "report.html").read_bytes() == (pipeline_ok.report_dir / "report.html").read_bytes()
    assert {p.name for p in (old / "results").glob("*.json")} == {
        p.name for p in pipeline_ok.results_dir.glob("*.json")
    }
    assert "earlier cpu report kept in" in proc.stdout


def test_every_stage_started_from_the_same_weights(pipeline_ok):
    """The padded-vocabulary stage included: the report says so, from recorded checksums."""
    recs = [json.loads(p.read_text()) for p in pipeline_ok.results_dir.glob("*.json")]
    assert len({r["init_checksum"] for r in recs if r["status"] == "ok"}) == 1
    assert "identical for every stage" in (pipeline_ok.report_dir / "report.html").read_text()


def test_the_pdf_leaves_the_summary_s_html_only_sections_to_the_html_and_names_them(pipeline_ok, report_html):
    """Sections tagged html-only in the summary notebook are hidden in print (report.css) and a print-only line
    after the findings names each one, so a PDF reader knows what the HTML has."""
    import nbformat

    from lib.report import export

    titles = export.html_only_titles(nbformat.read(ROOT / "notebooks" / "summary.ipynb", as_version=4).cells)
    assert {"Step-time spread", "Every parity run"} <= set(titles)
    note = report_html[report_html.index('celltag_pdf-only" id=') :][:3000]
    assert all(t in note for t in titles)
    assert report_html.count("celltag_html-only") >= 2 * len(titles) - 1  # each title's cell and its output's
    assert "@media print { .celltag_html-only { display: none !important; } }" in report_html
