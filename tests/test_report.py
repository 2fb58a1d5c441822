"""lib/report/loader.py: findings and recommendations follow the data. Each test builds a small report
folder from synthetic records (no measurement), then flips the data and checks the text flips."""

from __future__ import annotations

import re
from html import escape

import pytest
from conftest import make_record, tiny_params, write_report_dir

from lib.core import kernel_categories, stages
from lib.core import paths
from lib.report import batch_sweep_view, charts, loader, method_text, stage_facts, tables

BATCHES = (2, 4)
LOSSES = [6.0, 5.0, 4.0, 3.5, 3.0, 3.0]
BASE_MS = 10.0


def build(tmp_path, tf32_ms=BASE_MS, tf32_loss_shift=0.0, extra=(), stage_keys=("fp32", "tf32"), tf32_status="ok"):
    """A report of the FP32 baseline and TF32 at every batch size; TF32's step time and loss offset
    are chosen by the test. Records in `extra` replace those of the same (stage, batch)."""
    params = tiny_params(stage_keys=stage_keys, batch_sizes=BATCHES)
    recs = {}
    for b in BATCHES:  # a larger batch is more efficient: B=4 has the higher throughput
        scale = 1 + b / 4
        recs["fp32", b] = make_record(params, "fp32", b, [BASE_MS * scale] * 5, LOSSES, mem_bytes=2**30)
        if tf32_status == "ok":
            recs["tf32", b] = make_record(
                params, "tf32", b, [tf32_ms * scale] * 5, [x + tf32_loss_shift for x in LOSSES], mem_bytes=2**30
            )
        else:
            recs["tf32", b] = make_record(params, "tf32", b, status=tf32_status, reason="because")
    for rec in extra(params) if callable(extra) else extra:
        recs[rec["stage"], rec["batch_size"]] = rec
    write_report_dir(tmp_path / "cpu", params, list(recs.values()))
    return loader.load(tmp_path / "cpu")


# ---------------------------------------------------------------- recommendations


# ---------------------------------------------------------------- findings


def _ddp_row(params):
    rec = make_record(params, "ddp", 4, [BASE_MS] * 5, [v - 0.1 for v in LOSSES])
    rec["tokens_per_s"] *= 2
    rec.update(
        world_size=2,
        base_stage="tf32",
        single_gpu_tokens_per_s=rec["tokens_per_s"] / 1.9,
        scaling_efficiency=0.95,
        allreduce_share=0.03,
        init_checksum="same",
    )
    return rec


def test_the_ddp_loss_chart_plots_rank_0_next_to_the_configuration_it_replicates(tmp_path, agg_backend):
    rep = build(tmp_path, tf32_ms=BASE_MS / 2, stage_keys=("fp32", "tf32", "ddp"), extra=lambda p: [_ddp_row(p)])
    fig = charts.plot_losses(rep, "ddp")
    lines = {
        ln.get_label(): list(ln.get_ydata()) for ax in fig.axes for ln in ax.get_lines() if ln.get_label()[0] != "_"
    }
    assert set(lines) == {"rank 0 of 2 GPUs, B=4 each", "TF32 on one GPU, B=4"}
    assert lines["rank 0 of 2 GPUs, B=4 each"] == pytest.approx([v - 0.1 for v in LOSSES])


def test_ddp_rows_take_part_in_the_initial_weight_check(tmp_path):
    def rows(params):
        out = [_ddp_row(params)]
        for b in BATCHES:
            for key in ("fp32", "tf32"):
                rec = make_record(params, key, b, [BASE_MS] * 5, LOSSES)
                rec["init_checksum"] = "same"
                out.append(rec)
        return out

    rep = build(tmp_path, stage_keys=("fp32", "tf32", "ddp"), extra=rows)
    assert "identical for every stage" in method_text.method_md(rep)


# ---------------------------------------------------------------- what the chapters show


def test_load_keeps_only_the_stages_and_batches_of_params(tmp_path):
    def stray(params):
        return [make_record(params, "fp32", 8, [1.0] * 5, LOSSES), make_record(params, "bf16", 2, [1.0] * 5, LOSSES)]

    rep = build(tmp_path, extra=stray)
    assert sorted({(r["stage"], r["batch_size"]) for r in rep.records}) == [
        ("fp32", 2),
        ("fp32", 4),
        ("tf32", 2),
        ("tf32", 4),
    ]
    assert len(rep.df) == 4


def test_matrix_shows_status_and_loss_flags(tmp_path):
    def oom(params):
        rec = make_record(params, "tf32", 4, status="oom", reason="out of memory: test")
        return [{**rec, "mem_allocator_bytes": 74 * 2**30, "mem_tensors_bytes": 73 * 2**30}]

    html = tables.matrix_html(build(tmp_path, tf32_loss_shift=1.0, extra=oom))
    assert "OOM" in html and "out of memory: test" in html
    # the OOM row's memory is the process's when its allocation failed, and says so; an OK row's does not
    assert "74.00<br><small>at failure</small>" in html and "73.00<br><small>at failure</small>" in html
    assert html.count("at failure") == 2  # not beside a figure the record does not have
    assert "beyond tol" in html
    assert "matrix" in html
    assert "beyond tol" not in tables.matrix_html(build(tmp_path / "clean"))
    # A gap past the tolerance but inside the measured drift (cut-cross-entropy's 0.061 on both GPUs) says so.
    rep = build(tmp_path / "drift", tf32_loss_shift=0.06)
    assert "within noise" not in tables.matrix_html(rep)
    rep.df.loc[rep.df["stage"] == "tf32", "loss_verdict"] = "within noise"
    assert "gate 0.060 within noise" in tables.matrix_html(rep)


def test_stage_summary_of_a_stage_without_timings_gives_the_reasons(tmp_path):
    text = stage_facts.stage_summary(build(tmp_path, tf32_status="oom"), "tf32")
    assert text.startswith("TF32 has no timing")
    assert "B=2: oom (because)" in text and "B=4: oom (because)" in text


def test_appendix_shows_every_stage_switch(tmp_path):
    rep = build(tmp_path, stage_keys=("fp32", "tf32"))
    text = tables.appendix_md(rep)
    assert 'set_float32_matmul_precision("highest")' in text and 'set_float32_matmul_precision("high")' in text


def test_appendix_names_a_base_only_where_it_is_not_the_stage_above(tmp_path):
    rep = build(tmp_path, stage_keys=("fp32", "compile", "fp8_torchao", "bf16_residual", "loss_only"))
    text = tables.appendix_md(rep)
    assert "**BF16 residual stream** — " in text and "(added to torch.compile, not to the stage above)" in text
    # Only the BF16 residual stream, which follows torchao's FP8 but is added to torch.compile; FP8 (torchao)
    # sits right below torch.compile and the loss-only forward right below the BF16 residual stream.
    assert text.count("not to the stage above") == 1


def test_failures_md_lists_notebook_failures_and_error_rows(tmp_path):
    def err(params):
        return [make_record(params, "tf32", 2, status="error", reason="segfault")]

    rep = build(tmp_path, extra=err)
    text = tables.failures_md(rep, ["01_fp32.ipynb: cell 3: boom"])
    assert "01_fp32.ipynb: cell 3: boom" in text and "TF32 B=2: **error**: segfault" in text
    assert tables.failures_md(build(tmp_path / "clean"), []) == ""


@pytest.fixture
def agg_backend():
    import matplotlib
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    yield
    plt.close("all")


def test_charts_are_drawn_with_an_oom_row(tmp_path, agg_backend):
    def oom(params):
        return [make_record(params, "tf32", 4, status="oom", reason="out of memory")]

    rep = build(tmp_path, extra=oom)
    charts.plot_throughput(rep)
    charts.plot_memory(rep)
    charts.plot_spread(rep)
    charts.plot_losses(rep, "tf32")
    names = {p.name for p in (rep.dir / "figures").glob("*.png")}
    assert names == {"throughput.png", "memory.png", "step_spread.png", "loss_tf32.png"}


def test_the_recommended_code_compiles_the_model_after_converting_it(tmp_path):
    """torchao converts the lm_head before torch.compile wraps the model (step.build's order), so the
    listing a reader copies does the same, whatever order the stages added the levers in."""

    def faster(params):  # the FP8 lm_head the fastest, its loss the fp32 baseline's
        return [
            make_record(params, k, b, [BASE_MS / (8 + i)] * 5, LOSSES, mem_bytes=2**30)
            for i, k in enumerate(("vocab", "compile", "loss_only", "fp8_head"))
            for b in BATCHES
        ]

    rep = build(tmp_path, stage_keys=("fp32", "tf32", "vocab", "compile", "loss_only", "fp8_head"), extra=faster)
    text = batch_sweep_view.recommended_md(rep)
    assert text.startswith("**FP8 lm_head (torchao) at B=")
    assert text.index("convert_to_float8_training") < text.index("torch.compile(model)")


# ---------------------------------------------------------------- charts and kernel profiles that follow the data


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_an_oom_configuration_is_labelled_oom_in_every_chart(tmp_path, agg_backend):
    def oom(params):
        return [make_record(params, "tf32", 4, status="oom", reason="out of memory")]

    rep = build(tmp_path / "oom", extra=oom)
    assert "B=4: OOM" in _texts(charts.plot_throughput(rep))
    assert "B=4: OOM" in _texts(charts.plot_spread(rep))
    memory = charts.plot_memory(rep)
    panel = next(ax for ax in memory.axes if ax.get_title() == "B=4")
    assert [t.get_text() for t in panel.texts] == ["OOM"]
    chapter = charts.plot_losses(rep, "tf32")
    panel = next(ax for ax in chapter.axes if ax.get_title() == "B=4")
    assert [t.get_text() for t in panel.texts] == ["TF32: OOM at B=4"]
    assert any("OOM: TF32" in t for t in _texts(charts.plot_losses(rep)))
    # the same data without the OOM: no such label anywhere
    clean = build(tmp_path / "clean")
    for fig in (
        charts.plot_throughput(clean),
        charts.plot_memory(clean),
        charts.plot_spread(clean),
        charts.plot_losses(clean, "tf32"),
        charts.plot_losses(clean),
    ):
        assert not any("OOM" in t for t in _texts(fig))


def test_the_all_stages_loss_chart_draws_each_stage_minus_its_reference(tmp_path, agg_backend):
    rep = build(
        tmp_path,
        tf32_loss_shift=0.02,
        stage_keys=("fp32", "tf32", "vocab"),
        extra=lambda p: [make_record(p, "vocab", b, [BASE_MS] * 5, [x - 0.01 for x in LOSSES]) for b in BATCHES],
    )
    fig = charts.plot_losses(rep)
    for ax in fig.axes:
        lines = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
        assert set(lines) == {"TF32 − FP32 baseline", "Vocab padded to 50304 − FP32 baseline"}  # not FP32 itself
        assert list(lines["TF32 − FP32 baseline"].get_ydata()) == pytest.approx([0.02] * len(LOSSES))
        assert list(lines["Vocab padded to 50304 − FP32 baseline"].get_ydata()) == pytest.approx([-0.01] * len(LOSSES))
        styles = {(ln.get_color(), ln.get_linestyle()) for ln in lines.values()}
        assert len(styles) == len(lines)  # each stage its own colour and line style


def _profiled_record(params, stage, batch, kernels):
    rec = make_record(params, stage, batch, [BASE_MS] * 5, LOSSES)
    stored = {"GEMM": sum(k["ms"] for k in kernels)}  # as rules of the past said: everything a GEMM
    rec["kernel_profile"] = {
        "source": "CUDA kernels (torch.profiler)",
        "steps": 1,
        "busy_ms": stored["GEMM"],
        "categories": {c: stored.get(c, 0.0) for c in kernel_categories.CATEGORIES},
        "kernels": [{**k, "category": "GEMM", "calls": 1.0, "share": 0.0} for k in kernels],
    }
    return rec


LONG = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
    "(at::native::ADAM_MODE)1, false>, float*, double, double>(at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, float*, double)"
)
KERNELS = [
    {"name": "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "op": "aten::mm", "ms": 4.0},
    {"name": "triton_poi_fused__scaled_mm__to_copy_clamp_7", "op": None, "ms": 3.0},
    {"name": "Memset (Device)", "op": "aten::_cudnn_attention_forward", "ms": 1.7},
    {"name": LONG, "op": "aten::_fused_adamw_", "ms": 1.3},
]


def test_a_stored_kernel_category_is_reclassified_by_todays_rules_when_the_report_loads(tmp_path, agg_backend):
    from lib.report import profile_view

    rep = build(tmp_path, extra=lambda p: [_profiled_record(p, k, 4, KERNELS) for k in ("fp32", "tf32")])
    p = rep.rec("tf32", 4)["kernel_profile"]
    assert {c: round(v, 6) for c, v in p["categories"].items() if v} == {
        "GEMM": 4.0,
        "norm/elementwise": 3.0,
        "attention": 1.7,
        "optimizer": 1.3,
    }
    assert [k["category"] for k in p["kernels"]] == ["GEMM", "norm/elementwise", "attention", "optimizer"]
    # shares of busy kernel time, whole percentages summing to 100 in every row of the table
    assert sum(kernel_categories.shares(p).values()) == pytest.approx(1.0)
    html = profile_view.profile_table_html(rep)
    assert "busy kernel time" in html
    head = re.findall(r"<th>(.*?)</th>", html)
    row = dict(zip(head, re.findall(r"<td>(.*?)</td>", re.findall(r"<tr>(.*?)</tr>", html, re.S)[1], re.S)))
    assert sum(int(row[c].rstrip(" %")) for c in kernel_categories.CATEGORIES) == 100
    assert row["GEMM"] == "40 %" and row["optimizer"] == "13 %"
    fig = profile_view.plot_profile(rep)
    assert any("share of busy kernel time" in ax.get_xlabel() for ax in fig.axes)


def test_kernel_names_are_shown_whole_or_cut_at_token_boundaries_with_their_op(tmp_path):
    from lib.report import profile_view

    rep = build(tmp_path, extra=lambda p: [_profiled_record(p, "tf32", 4, KERNELS)])
    html = profile_view.top_kernels_html(rep.rec("tf32", 4))
    assert "share of busy<br>kernel time" in html
    for k in KERNELS:
        assert f'title="{escape(k["name"])}"' in html  # the full name, always
        if k["op"]:
            assert f"← <code>{k['op']}</code>" in html
    label = profile_view.kernel_label(LONG)
    assert len(label) <= 140 < len(LONG) and "…" in label
    assert label.startswith("at::native::(anonymous namespace)::multi_tensor_apply_kernel<") and label.endswith(">(…)")
    for width in (140, 60, 20):  # however short it must get, every token whole: none cut in the middle
        assert set(re.findall(r"\w+", profile_view.kernel_label(LONG, width))) <= set(re.findall(r"\w+", LONG))
    short = KERNELS[0]["name"]
    assert profile_view.kernel_label(short) == short


def test_a_chapter_whose_stage_has_no_curve_draws_its_loss_panel_without_a_legend(tmp_path):
    """A stage 'not applicable' at every batch (compile on the CPU default): the panel says why,
    and the figure has no legend instead of failing to lay out an empty one."""
    params = tiny_params(["fp32", "tf32"])
    recs = [
        make_record(params, "fp32", 2, [10.0] * 6, [3.0] * 6),
        make_record(params, "tf32", 2, status="not_applicable", reason="skipped on this device"),
    ]
    rep = loader.load(write_report_dir(tmp_path / "r", params, recs))
    fig = charts.plot_losses(rep, "tf32")
    assert not fig.legends and (rep.dir / "figures" / "loss_tf32.png").exists()
    assert [t.get_text() for ax in fig.axes for t in ax.texts] == ["TF32: n/a at B=2"]


def test_a_table_row_without_some_cells_shows_them_blank_never_nan():
    from lib.report import evidence_view

    html = evidence_view.table([{"Stage": "a", "GEMM": "50 %"}, {"Stage": "b"}])
    assert "NaN" not in html and "nan" not in html and "50 %" in html


def test_the_pdf_leaves_each_chapters_loss_curve_and_kernel_tables_to_the_html(pipeline_ok, tmp_path):
    """The PDF is read through, the HTML searched: a chapter's per-step loss curve and kernel tables sit in blocks
    the PDF's print stylesheet leaves out, and the PDF says in one line per chapter what is in the HTML. Removing
    that rule from the stylesheet (the same HTML printed whole) gives more pages."""
    from conftest import pdf_page_count

    from lib.report import export

    html = (pipeline_ok.report_dir / "report.html").read_text()
    for heading in ("Where the step time goes", "Loss against the FP32 baseline"):
        at = [m.start() for m in re.finditer(f"<h4[^>]*>{heading}", html)]
        # inside the output that opens an html-only block (each block is one output of its own)
        assert at and all(
            html.rfind('<div class="html-only">', 0, i) > html.rfind('<div class="output_area">', 0, i) for i in at
        ), heading
    # one line per chapter says what the HTML holds: its sections, or all of a chapter that timed nothing
    lines = html.count('class="print-only note">In the HTML report') + html.count(
        'class="print-only note">Nothing measured here'
    )
    assert lines >= len(pipeline_ok.params.stages) - 2
    assert "@media print { .html-only { display: none !important; }" in html
    whole = tmp_path / "whole.pdf"
    export.to_pdf(html.replace(".html-only { display: none !important; }", ""), whole, pipeline_ok.report_dir)
    assert pdf_page_count(pipeline_ok.report_dir / "report.pdf") < pdf_page_count(whole)


# ---------------------------------------------------------------- what the PDF keeps of a chapter (issue: at most 20 pages)

PDF_STAGES = ["fp32", "tf32", "bf16", "flash", "vocab", "fused", "compile", "fp8_torchao", "ddp"]


def _pdf_report(tmp_path):
    """compile is the fastest verified stage (the recommendation); torchao's FP8 layers are slower, so outside it;
    DDP is not applicable on one device."""
    params = tiny_params(PDF_STAGES)
    ms = {"fp32": 100, "tf32": 80, "bf16": 60, "flash": 50, "vocab": 45, "fused": 44, "compile": 30, "fp8_torchao": 35}
    recs = [make_record(params, k, 2, [v] * 6, [5.0, 4.9, 4.8, 4.7, 4.6, 4.5]) for k, v in ms.items()]
    recs.append(make_record(params, "ddp", 2, status="not_applicable", reason="one GPU on this host"))
    return loader.load(write_report_dir(tmp_path / "r", params, recs))


def test_the_pdf_keeps_a_lever_outside_the_recommendation_to_its_heading_and_figures(tmp_path):
    from lib.report import chapter_page

    rep = _pdf_report(tmp_path)
    assert loader.recommended(rep)["stage"] == "compile"
    assert chapter_page.aside(rep, "fp8_torchao")
    assert not any(chapter_page.aside(rep, k) for k in ("fp32", "tf32", "compile", "ddp"))
    shown = chapter_page.parts(rep, "fp8_torchao", brief=True)
    in_print = [p for hidden, p in shown if not hidden]
    # the heading, and the stage's one line on what it changes: the PDF still says what the lever is
    lever = stages.get("fp8_torchao").lever
    assert in_print[0] == ("md", f"### FP8 linear layers (torchao)\n\nWhat it changes: {lever}.")
    assert all(p[0] != "md" or p[1].startswith("###") or "Measured" in p[1] for p in in_print)
    assert any(hidden for hidden, _ in shown)  # the evidence, the introduction and the switch: the HTML's
    full = chapter_page.parts(rep, "fp8_torchao")
    assert (
        len(shown) == len(full) + 1
    )  # the HTML loses nothing: the same parts, the heading split from its introduction


def test_a_brief_chapter_opens_with_its_heading_and_measured_table_in_one_block_the_pdf_keeps_whole(tmp_path):
    """reports/h100's and reports/h200's PDFs left the heading of the fused cross-entropy chapter and its one line
    alone at the foot of page 15, its measured table on page 16. The heading, that line, the measured text and its
    table are one block kept on one page; the introduction sits inside it for the HTML only, in reading order."""
    from lib.report import chapter_page

    rep = _pdf_report(tmp_path)
    shown = chapter_page.parts(rep, "fp8_torchao", brief=True)
    block = chapter_page.opening(shown)
    assert block.startswith('<div class="keep-together">') and block.count("<table") == 1
    heading, intro, table = (block.index(x) for x in ("FP8 linear layers (torchao)</h3>", "html-only", "<table"))
    assert '<h3 id="FP8-linear-layers-(torchao)">' in block  # linkable as nbconvert's headings are
    assert heading < intro < table and "What it changes" in block
    rest = shown[chapter_page.opening_length(shown) :]
    assert not any(not hidden and isinstance(p, tuple) and "Measured" in p[1] for hidden, p in rest)


def test_a_chapter_that_timed_nothing_is_its_heading_and_why_in_the_pdf(tmp_path):
    from lib.report import chapter_page

    rep = _pdf_report(tmp_path)
    assert chapter_page.nothing_measured(rep, "ddp") == "one GPU on this host"
    assert chapter_page.nothing_measured(rep, "compile") is None
    shown = chapter_page.print_heading_only(chapter_page.parts(rep, "ddp"), "one GPU on this host")
    in_print = [p for hidden, p in shown if not hidden]
    assert in_print[0][1].startswith("### ") and len(in_print) == 2
    assert "Nothing measured here: one GPU on this host." in in_print[1][1] and "print-only" in in_print[1][1]


def test_every_chapter_leaves_its_switch_to_the_html():
    """The code of each stage is on page 1 (the recommendation's) and in the HTML's chapters and appendix."""
    from lib.report import chapter_page

    for key in chapter_page.chapters.CHAPTERS:
        text = chapter_page.text_of(key)
        if "<!-- view: switch -->" in text:
            assert any(hidden and "<!-- view: switch -->" in t for hidden, t in chapter_page.regions(text)), key
            assert not any(not hidden and "<!-- view: switch -->" in t for hidden, t in chapter_page.regions(text))


def test_the_cpu_default_s_pdf_holds_the_argument_in_at_most_20_pages(pipeline_ok):
    """Issue: a PDF of at most 20 pages (the committed H100 report's ran to 45, then 28). The CPU default measures every
    stage and chapter of the default depth, so its PDF carries the same sections."""
    from conftest import pdf_page_count

    assert pdf_page_count(pipeline_ok.report_dir / "report.pdf") <= 20


def test_a_matrix_row_timed_in_several_processes_shows_their_median_and_says_so(tmp_path):
    """The matrix showed a row's first process while the summary quoted the median over its processes (a reader found
    compile's 473,893 beside a 475,424 median; another, one configuration at two values across a report): the row is
    the median, its processes' number and range beneath it."""
    from lib.results import store

    params = tiny_params(["fp32", "tf32"])
    recs = [make_record(params, "fp32", 2, [100.0] * 6, LOSSES), make_record(params, "tf32", 2, [50.0] * 6, LOSSES)]
    d = write_report_dir(tmp_path / "r", params, recs)
    again = make_record(params, "tf32", 2, [40.0] * 6, LOSSES)
    again.update(variant="repeat", repeat=1)
    store.write_atomic(d / "results" / "repeats" / "tf32__b2__r1.json", again)
    html = tables.matrix_html(loader.load(d))
    first, second = recs[1]["tokens_per_s"], again["tokens_per_s"]
    lo, hi = sorted((first, second))
    assert f"{(first + second) / 2:,.0f}<br><small>median of 2 processes,<br>{lo:,.0f}–{hi:,.0f}" in html
    assert html.count("median of 2") == 1  # fp32 ran in one process: nothing beneath it


H100 = paths.ROOT / "reports" / "h100"  # a real sitting's records


def _pdf_pages(body: str) -> list:
    """`body` laid out on the PDF's pages with report.css (WeasyPrint, here in the test's process): each page's box
    tree."""
    from weasyprint import HTML

    from lib.report import export

    doc = (
        f'<html><head><meta charset="utf-8"><style>{export.CSS.read_text()}</style></head>'
        f'<body><main class="report">{body}</main></body></html>'
    )
    return [page._page_box for page in HTML(string=doc).render().pages]


def test_the_stage_matrix_fits_the_pdf_page_s_width():
    """The stage matrix of reports/h100's PDF ran about 19 pt past the page's right margin, its loss column cut off:
    the processes' range beside 'median of 2 processes' under tok/s made that column the widest. Laid out with
    report.css on the PDF's page, no text of it passes the margin (an earlier H100 sitting's ran 22 px over before the
    range got a line of its own)."""
    from weasyprint.formatting_structure.boxes import TextBox

    page = _pdf_pages(tables.matrix_html(loader.load(H100)))[0]  # every page of it has the same columns
    texts = [b for b in page.descendants() if isinstance(b, TextBox)]
    assert texts and max(b.position_x + b.margin_width() for b in texts) <= page.content_box_x() + page.width + 0.01


def test_a_lever_s_speed_up_divides_the_medians_over_processes_where_several_timed_it(tmp_path):
    """The recommendations said 'torch.compile: adopt (median 1.28x)', the ratio of first processes, beside medians
    over processes that give 1.29x (a reader's recomputation on the H100): a configuration timed in several processes
    enters the speed-ups by their median."""
    from lib.results import store

    params = tiny_params(["fp32", "tf32"])
    recs = [make_record(params, "fp32", 2, [100.0] * 6, LOSSES), make_record(params, "tf32", 2, [50.0] * 6, LOSSES)]
    d = write_report_dir(tmp_path / "r", params, recs)
    assert loader.load(d).df.set_index("stage").at["tf32", "speedup_vs_previous"] == pytest.approx(2.0)
    again = make_record(params, "tf32", 2, [40.0] * 6, LOSSES)  # a second process, faster
    again.update(variant="repeat", repeat=1)
    store.write_atomic(d / "results" / "repeats" / "tf32__b2__r1.json", again)
    df = loader.load(d).df.set_index("stage")
    median = (recs[1]["tokens_per_s"] + again["tokens_per_s"]) / 2
    assert df.at["tf32", "speedup_vs_previous"] == pytest.approx(median / recs[0]["tokens_per_s"])
    assert df.at["tf32", "speedup_vs_baseline"] == pytest.approx(median / recs[0]["tokens_per_s"])
    # the row is the median too, its step time and MFU with it; the first process's figure stays beside it
    assert (
        df.at["tf32", "tokens_per_s"] == pytest.approx(median)
        and df.at["tf32", "first_tokens_per_s"] == recs[1]["tokens_per_s"]
    )
    assert df.at["tf32", "median_ms"] == pytest.approx(recs[1]["median_ms"] * recs[1]["tokens_per_s"] / median)


def test_the_pdf_keeps_the_method_s_rules_and_leaves_how_things_are_measured_to_the_html(tmp_path):
    from lib.report import long_view, method_text

    rep = _pdf_report(tmp_path)
    text = method_text.method_md(rep)
    rules, details = method_text.split(text)
    for key in method_text.BRIEF:
        if key == "Long test":  # stated where the folder holds a long test only (tests/test_long_choice.py)
            assert "* **Long test**" not in text and not long_view.verdicts(rep.decided)
            continue
        assert f"* **{key}**" in rules and f"* **{key}**" not in details, key
    for key in ("Stages", "Isolation", "Cross-check", "Energy"):
        assert f"* **{key}**" in details and f"* **{key}**" not in rules, key
    assert sorted(rules.split("\n") + details.split("\n")) == sorted(text.strip().split("\n"))  # nothing lost


def test_the_throughput_chart_says_a_several_gpu_bar_is_all_its_gpus_together(tmp_path, agg_backend):
    """A reviewer read the DDP bar (1.1 M tokens/s on two H200s) against the single-GPU bars on one axis with nothing
    to say it was two GPUs' sum; the bar now says so."""
    rep = build(tmp_path, tf32_ms=BASE_MS / 2, stage_keys=("fp32", "tf32", "ddp"), extra=lambda p: [_ddp_row(p)])
    fig = charts.plot_throughput(rep)
    assert [t.get_text() for t in fig.axes[0].texts if "GPUs" in t.get_text()] == [" 2 GPUs together"]


def test_the_environment_says_what_the_clocks_did_during_the_timed_steps(tmp_path):
    """Every record samples the SM clock, power and throttle reasons over its timed steps; no page said so, though
    a power cap (sw_power_cap at about 690 W on both Hoppers) sat under every compiled stage's spread."""

    def clocked(params):
        rec = make_record(params, "tf32", 2, [BASE_MS] * 5, LOSSES)
        rec["clocks"] = {
            "sm_mhz": {"median": 1725.0},
            "throttle_reasons": ["sw_power_cap"],
            "temperature_c": {"max": 55},
        }
        return [rec]

    rep = build(tmp_path, extra=clocked)
    text = tables.timed_clocks(rep.records)
    assert "1,725–1,725 MHz over the stage matrix's 1 configurations" in text
    assert "throttled by sw_power_cap in 1" in text and "at most 55 °C" in text
    assert tables.timed_clocks([{"clocks": {}}]) is None


def test_the_padding_under_compile_table_shows_the_matrix_median_over_processes(tmp_path):
    """A reader of the H100 report found 137.3 ms for torch.compile at 50304 in the padding table (its first process)
    beside 136.9 ms in the matrix (the median of its two): one figure per configuration, the matrix's."""
    from lib.report import evidence_view
    from lib.results import store

    keys = ["flash", "vocab", "compile"]
    params = tiny_params(keys)
    recs = [make_record(params, k, 2, [ms] * 6, LOSSES) for k, ms in zip(keys, (100.0, 80.0, 50.0))]
    d = write_report_dir(tmp_path / "r", params, recs)
    again = make_record(params, "compile", 2, [40.0] * 6, LOSSES)
    again.update(variant="repeat", repeat=1)
    store.write_atomic(d / "results" / "repeats" / "compile__b2__r1.json", again)
    unpadded = make_record(params, "compile", 2, [54.0] * 6, LOSSES)
    unpadded.update(variant="unpadded vocab")
    store.write_atomic(d / "results" / "variants" / "compile-unpadded__b2.json", unpadded)
    html = evidence_view.compile_vocab_html(loader.load(d))
    assert "<td>44.4</td>" in html and "1.22×" in html and "<td>50.0</td>" not in html  # tokens/s median of 2


def test_a_long_table_repeats_its_header_on_every_pdf_page(pipeline_ok):
    """A reviewer found the claims table running from page 3 onto page 4 with no header there: the PDF (WeasyPrint)
    repeats a table's <thead> on every page it spans, so the claims table has one, its rows in a <tbody>."""
    from lib.report import claims_view

    text = claims_view.html(loader.load(pipeline_ok.report_dir))
    assert text.startswith('<table class="claims with-check"><thead><tr><th>Claim</th>')
    assert "</tr></thead><tbody><tr>" in text and "</tbody></table>" in text


def test_the_pdf_shows_the_check_under_each_claim_s_verdict(pipeline_ok):
    """The H100 reviewer of reports/h100 (77b616d): 'padding gives 1.56x to 1.63x' read confirmed at 1.53x, and no
    PDF page gave the range it was tested against (1.53x to 1.66x): the check column is the HTML's alone. Under each
    verdict the PDF now prints the check it applied."""
    from lib.report import claims_view

    rep = loader.load(pipeline_ok.report_dir)
    text = claims_view.html(rep)
    checked = [r["check"] for r in rep.decided["claims"]["verdicts"] if r["check"]]
    assert checked and all(f'<small class="print-only">{claims_view.breakable(c)}</small>' in text for c in checked)
    assert "Under each verdict, the check it applied" in text


def test_the_batch_sweep_s_throughput_axis_starts_at_zero(pipeline_ok, monkeypatch):
    """A reviewer of the H100 report: the sweep chart's tokens/s axis began at 544,000, so a 1.5 % rise from B=64 to
    B=128 looked like a steep climb. The axis starts at zero."""
    from lib.report import batch_sweep_view

    seen = {}
    monkeypatch.setattr(batch_sweep_view, "save", lambda fig, rep, name: seen.setdefault("fig", fig))
    batch_sweep_view.plot_sweep(loader.load(pipeline_ok.report_dir))
    assert seen["fig"].axes[0].get_ylim()[0] == 0


def test_the_batch_sweep_table_is_kept_on_one_page_when_it_fits_one():
    """reports/h100's PDF split the batch-sweep table, two rows at the foot of page 18 and two on page 19. Laid out
    with report.css (WeasyPrint, here in the test's process) where only its first rows fit the page, the table moves
    whole to the next."""
    from weasyprint.formatting_structure.boxes import TableBox

    # an A4 page holds 267 mm: under 240 mm, room for the table's header and two rows
    pages = _pdf_pages('<div style="height: 240mm"></div>' + batch_sweep_view.sweep_html(loader.load(H100)))
    assert [i for i, page in enumerate(pages) if any(isinstance(b, TableBox) for b in page.descendants())] == [1]


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["h100", "h100-x4", "h200"])
def test_page_one_of_a_committed_report_holds_its_next_experiment(tmp_path, gpu):
    """reports/h100-x4's page 1 (its DDP row and the note of what the sitting lacks) lost its Next to page 2 when a
    worth cell grew a line (2026-11-27), and reports/h200's (its long tests' legend) the last two lines of it. Each
    committed report re-rendered from its records by this code: page 1 of the PDF ends with page 1's last action;
    WeasyPrint lays out report.html as the export does."""
    import shutil

    from conftest import ROOT, describe_proc, run_cli
    from weasyprint import HTML

    from lib.report.page_one import PAGE_ONE_END

    shutil.copytree(ROOT / "reports" / gpu, tmp_path / gpu)
    proc = run_cli("render", GPU=gpu, REPORTS=tmp_path, timeout=600)
    assert proc.returncode == 0, describe_proc(proc)
    folder = tmp_path / gpu
    html = (folder / "report.html").read_text(encoding="utf-8")
    # the mark ends the Next action: page 1 must hold the whole of it (its tail had wrapped onto page 2 unseen)
    assert re.search(rf"<strong>Next</strong>.*<span id='{PAGE_ONE_END}'></span></li>\s*</ul>", html.replace('"', "'"))
    pages = HTML(filename=str(folder / "report.html"), base_url=str(folder)).render().pages
    assert PAGE_ONE_END in pages[0].anchors, [p for p, page in enumerate(pages) if PAGE_ONE_END in page.anchors]


def test_a_folder_of_an_earlier_quality_rule_is_refused_in_one_line(tmp_path, capsys):
    """Folders measured under a retired quality rule (the fixed number of seeds, or one long run a stage: their params
    name no sequential looks) keep their own report.html and report.pdf under reports/archive/; today's views judge
    the sequential test alone. Redrawing or comparing one says so in one line, before any notebook runs."""
    from lib import cli
    from lib.report import compare

    params = tiny_params(["fp32", "tf32"])
    params.evidence.parity_looks = None  # as the params.json of reports/archive/h200-20261126-100121
    recs = [make_record(params, s, 2, [ms] * 6, LOSSES) for s, ms in (("fp32", 100.0), ("tf32", 50.0))]
    d = write_report_dir(tmp_path / "cpu", params, recs)
    write_report_dir(tmp_path / "today", tiny_params(["fp32", "tf32"]), recs)
    with pytest.raises(loader.EarlierRule, match="archived: open its own report.html"):
        loader.load(d)
    with pytest.raises(compare.CompareError, match="open its own report.html"):
        compare.load_all(["today", "cpu"], tmp_path)
    assert cli.main(["render", "--gpu", "cpu", "--reports", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "open its own report.html" in err
    assert not (d / "notebooks").exists()  # refused before drawing anything


@pytest.mark.parametrize("gpu", ["h100", "h100-x4", "h200"])
def test_a_committed_report_s_pdf_holds_at_most_ten_pages(gpu):
    """The PDF a reviewer hands on is short: the depth (the ladder chart, loss curves, kernel tables, the glossary)
    stays in the HTML. Moving the ladder chart off page 1 had pushed reports/h200's PDF to 11 pages."""
    from conftest import ROOT, pdf_page_count

    assert pdf_page_count(ROOT / "reports" / gpu / "report.pdf") <= 10


def test_a_render_of_the_summary_judges_the_recipe_and_the_quality_tests_once(monkeypatch, tmp_path):
    """Rendering reports/h100 called decide.recommended 31 times and parity.checks 57: the summary's cells now read
    the report's decisions, judged once a Report (loader.Report.quality_checks, .choice, .decided); the recipe is
    chosen once (long_choice.choose, which asks decide.recommended again only with the levers a long test admits);
    and where the render wrote decisions.json from the folder's records, not at all (lib/results/decided_file.py)."""
    import collections
    import functools
    import json

    import matplotlib

    matplotlib.use("Agg")
    from conftest import ROOT
    from IPython import display as ipd

    from lib.results import long_choice, parity

    calls = collections.Counter()
    for mod, name in ((long_choice, "choose"), (parity, "checks")):
        fn = getattr(mod, name)
        monkeypatch.setattr(
            mod, name, functools.partial(lambda fn, key, *a, **k: calls.update([key]) or fn(*a, **k), fn, name)
        )
    monkeypatch.setattr(ipd, "display", lambda *a, **k: None)
    import shutil

    folder = tmp_path / "h200"  # its charts are drawn here, not over the committed ones
    shutil.copytree(ROOT / "reports" / "h200", folder, ignore=shutil.ignore_patterns("*.pdf", "*.html", "notebooks"))
    monkeypatch.chdir(ROOT)
    scope = {"gpu": "h200", "model": None, "report_dir": str(folder), "failures": []}
    nb = json.loads((ROOT / "notebooks" / "summary.ipynb").read_text())

    def summary():
        calls.clear()
        cells = dict(scope)  # a kernel of its own: what one cell defines, the next reads
        for cell in nb["cells"][1:]:
            if cell["cell_type"] == "code":
                exec("".join(cell["source"]), cells)
        return dict(calls)

    # a render writes decisions.json from these records first (as the pipeline does, so the test holds whichever code
    # drew the committed folder): the summary reads it and judges nothing
    from lib.results import recommendation

    recommendation.write(loader.load(folder))
    assert (folder / "decisions.json").exists() and summary() == {}
    # records changed since (the digest no longer matches): judged afresh, once
    (folder / "results" / "fp32__b64.json").write_text((folder / "results" / "fp32__b64.json").read_text() + "\n")
    assert summary() == {"choose": 1, "checks": 1}


def test_the_method_states_the_steps_the_recipe_and_the_canonical_trainer_were_timed_over():
    """A reader recomputing reports/h100-x4: its headline figures rest on 3 + 8 steps of the whole batch, where the
    method section said 5 + 25 for every row."""
    from conftest import ROOT

    from lib.report import method_text

    rep = loader.load(ROOT / "reports" / "h100-x4", read_decisions=True)
    steps = rep.decided["recipe"]["recipe_steps"]
    text = method_text.method_md(rep)
    assert f"at the global batch: {steps['warmup']} + {steps['timed']} steps, each the whole batch" in text
