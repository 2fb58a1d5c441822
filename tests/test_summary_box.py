"""The executive summary's box, the MFU restated against the bf16 peak, the title's provenance,
the recommendation's energy and cost: each read from the records, and flipping with them."""

from __future__ import annotations

import json

import pytest
from conftest import make_record, tiny_params, write_parity_test, write_report_dir

from lib.core import cli_args, config, record
from lib.report import ablation_view, batch_sweep_view, loader, summary_box, tables
from lib.results import decide, store

LOSSES = [6.0, 5.9, 5.8, 5.7, 5.6, 5.5]


def _report(tmp_path, tf32_ms: float, bf16_ms: float = 50.0, run: dict | None = None):
    params = tiny_params(["fp32", "tf32", "bf16"])
    params.peak_tflops = {"fp32": 10.0, "tf32": 50.0, "bf16": 100.0}
    recs = [
        make_record(params, "fp32", 2, [100.0] * 6, LOSSES),
        make_record(params, "tf32", 2, [tf32_ms] * 6, LOSSES),
        make_record(params, "bf16", 2, [bf16_ms] * 6, LOSSES),
    ]
    d = write_report_dir(tmp_path / "r", params, recs)
    if run:
        store.write_atomic(d / "run.json", run)
    return loader.load(d)


def test_the_box_has_at_most_five_lines_and_names_the_recommendation(tmp_path):
    rep = _report(tmp_path, tf32_ms=80.0)
    lines = summary_box.lines(rep)
    assert 1 <= len(lines) <= summary_box.MAX_LINES
    assert any(line.startswith("**Recommended:** BF16 autocast at B=2") for line in lines)
    assert "summary-box" in summary_box.box_html(rep) and "<strong>Recommended:</strong>" in summary_box.box_html(rep)


def test_a_lever_slower_than_the_stage_before_it_is_in_skip_and_leaves_when_it_is_faster(tmp_path):
    slow = summary_box.lines(_report(tmp_path / "a", tf32_ms=130.0, bf16_ms=90.0))
    assert any(line.startswith("**Skip here:**") and "TF32" in line and "0.77×" in line for line in slow), slow
    fast = summary_box.lines(_report(tmp_path / "b", tf32_ms=80.0))
    assert not any(line.startswith("**Skip here:**") for line in fast), fast


def test_a_lever_the_leave_one_out_finds_paying_is_turned_on_not_skipped(tmp_path, monkeypatch):
    """Slower in the matrix's small batches, paying beyond noise at the recommendation: page 1 says turn it on (with
    its matrix figure), never both turn it on and skip it."""
    rep = _report(tmp_path, tf32_ms=130.0, bf16_ms=90.0)
    row = {"lever": "TF32", "worth": 0.05, "within_noise": False, "record": {"status": "ok"}}
    full = {"batch_size": 2, "stage": "bf16"}
    monkeypatch.setattr(summary_box.ablation_view, "ablation_rows", lambda rep: (full, [row]))
    lines = summary_box.lines(rep)
    assert any(line.startswith("**Turn on:** TF32 +5.0 %") for line in lines), lines
    assert not any(line.startswith("**Skip here:**") and "TF32" in line for line in lines), lines


def test_a_stage_with_no_record_is_named_as_not_measured(tmp_path):
    rep = _report(tmp_path, tf32_ms=80.0)
    rep.params.stages = ["fp32", "tf32", "bf16", "flash"]
    assert any(line.startswith("**Not measured in this report:** Flash attention") for line in summary_box.lines(rep))


def test_mfu_is_restated_against_the_bf16_peak_for_every_stage(tmp_path):
    rep = _report(tmp_path, tf32_ms=80.0)
    fp32 = rep.df[rep.df["stage"] == "fp32"].iloc[0]
    assert fp32["peak_precision"] == "fp32"
    assert fp32["mfu_bf16"] == pytest.approx(fp32["mfu"] * 10.0 / 100.0)
    html = tables.matrix_html(rep)
    assert f"{fp32['mfu_bf16'] * 100:.1f} %" in html and f"{fp32['mfu'] * 100:.1f} % of fp32" in html
    bf16 = rep.df[rep.df["stage"] == "bf16"].iloc[0]
    assert bf16["mfu_bf16"] == pytest.approx(bf16["mfu"])  # its own precision: nothing to restate


def test_the_title_names_the_code_and_the_command_from_run_json(tmp_path):
    run = {
        "code": {"commit": "0123456789abcdef0123", "modified": False, "source": "git"},
        "command": "make report GPU=cpu BATCHES=2",
        "earlier_runs": [{"started": "2026-11-01T10:00:00"}],
    }
    title = tables.title_md(_report(tmp_path, tf32_ms=80.0, run=run))
    assert "`make report GPU=cpu BATCHES=2`" in title and "1 earlier run," in title
    assert "code 0123456789ab (1 of its runs recorded none)" in title  # the earlier run has no commit
    run["earlier_runs"] = [{"code": {"commit": "fedcba9876543210"}}]
    both = tables.title_md(_report(tmp_path / "c", tf32_ms=80.0, run=run))
    assert "code fedcba987654, 0123456789ab" in both and "recorded none" not in both
    assert "code" not in tables.title_md(_report(tmp_path / "b", tf32_ms=80.0))  # no run.json: nothing to say


def test_energy_and_cost_of_the_recommendation(tmp_path, monkeypatch):
    rep = _report(tmp_path, tf32_ms=80.0)
    best = loader.recommended(rep)
    best["energy"] = {"joules_per_token": 0.002, "method": "NVML total-energy counter", "avg_power_w": 700.0}
    monkeypatch.delenv("PRICE_PER_GPU_HOUR", raising=False)
    text = batch_sweep_view.energy_and_cost(rep, best)
    assert (
        "2.00 mJ per token" in text
        and "Cost: no price per GPU-hour given; `make render PRICE_PER_GPU_HOUR=2.49` adds one." in text
    )
    monkeypatch.setenv("PRICE_PER_GPU_HOUR", "3.6")
    per_million = 3.6 * 1e6 / best["processes"]["median"] / 3600
    assert f"Cost: {per_million:.3f} per million tokens at 3.6 per GPU-hour" in batch_sweep_view.energy_and_cost(
        rep, best
    )
    best["energy"] = {"reason": "NVML is not available"}
    assert "Energy: not measured (NVML is not available)" in batch_sweep_view.energy_and_cost(rep, best)


@pytest.mark.parametrize("text", ["abc", "0", "-2", "inf", "nan"])
def test_a_bad_price_is_refused_in_one_line(text):
    with pytest.raises(config.UsageError, match="PRICE_PER_GPU_HOUR .* is not a positive number"):
        cli_args.parse_price(text)
    assert cli_args.parse_price("2.49") == 2.49 and cli_args.parse_price("") is None


def test_a_multi_gpu_row_gets_no_speed_up_over_one_gpus_fp32(tmp_path):
    params = tiny_params(["fp32", "ddp"])
    fp32 = make_record(params, "fp32", 2, [100.0] * 6, LOSSES)
    ddp = make_record(params, "ddp", 2, [100.0] * 6, LOSSES)
    ddp.update(world_size=2, tokens_per_s=2 * fp32["tokens_per_s"])
    df = decide.table([fp32, ddp], ["fp32", "ddp"])
    assert df[df["stage"] == "ddp"]["speedup_vs_baseline"].isna().all()
    assert json.loads(json.dumps(df[df["stage"] == "fp32"]["speedup_vs_baseline"].tolist())) == [1.0]


def test_each_recommendation_table_has_one_home_among_the_notebooks():
    """The recipe and the leave-one-out tables are drawn in one chapter each (the batch-size chapter),
    and the recommended configuration's full block in the summary only."""
    from lib.core import chapters
    from lib.core.paths import NOTEBOOKS
    from lib.report import chapter_page

    def views(name):
        return [
            k
            for k in chapters.CHAPTERS
            if any(p[0] == "view" and p[1] == name for p in chapter_page.plan(chapter_page.text_of(k)))
        ]

    def calls(name):
        cells = json.loads((NOTEBOOKS / "summary.ipynb").read_text())["cells"]
        return [c for c in cells if c["cell_type"] == "code" and f"{name}(rep)" in "".join(c["source"])]

    assert views("recipe") == ["batch_sweep"] and views("ablation") == ["batch_sweep"]
    assert not calls("frontier_view.recipe_html") and not calls("ablation_view.ablation_html")
    assert len(calls("batch_sweep_view.recommended_md")) == 1


def test_a_report_of_a_several_gpu_host_says_so_in_its_title(tmp_path):
    rep = _report(tmp_path, tf32_ms=80.0)
    assert "a host of" not in tables.title_md(rep)
    rep.env["device"]["count"] = 2
    assert "device **a host of 2 × x**" in tables.title_md(rep)


def test_a_rejected_lever_in_skip_names_the_parity_check_it_failed(tmp_path):
    p = tiny_params(batch_sizes=(2,))
    p.stages = ["fp32", "vocab", "compile", "bf16_residual"]
    ms = {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "bf16_residual": 90.0}
    write_report_dir(tmp_path / "rep", p, [make_record(p, k, 2, [v] * 5, [5.0] * 6) for k, v in ms.items()])
    write_parity_test(tmp_path / "rep", p, "bf16_residual", lever_held=4.5, ref_held=4.0)
    skip = next(x for x in summary_box.lines(loader.load(tmp_path / "rep")) if x.startswith("**Skip here:**"))
    assert (
        "BF16 residual stream: parity test worse: held-out loss +0.5000 nats (+0.5000 to +0.5000), margin +0.02" in skip
    )


def test_a_leave_one_out_whose_rows_were_timed_on_another_day_says_so():

    full = {"finished_at": "2026-11-22T14:00:00"}
    rows = [{"record": {"finished_at": "2026-11-23T10:00:00"}}, {"record": {"status": "oom"}}]
    assert (
        "in another device call (2026-11-22) than the runs without a lever (2026-11-23)"
        in ablation_view.ablation_calls_apart(full, rows)
    )
    rows[0]["record"]["finished_at"] = "2026-11-22T15:00:00"
    assert ablation_view.ablation_calls_apart(full, rows) is None


def test_page_one_code_lists_the_levers_in_order_of_worth(tmp_path, monkeypatch):
    """A lever without which the batch does not fit first, then the worth beyond noise, then within noise, then the
    levers the leave-one-out did not take out; each under what leaving it out cost."""
    keys = ["fp32", "tf32", "bf16", "flash", "vocab", "fused", "compile", "bf16_residual", "loss_only"]
    p = tiny_params(batch_sizes=(2,))
    p.stages = keys
    write_report_dir(tmp_path / "rep", p, [make_record(p, k, 2, [100.0] * 5, [5.0] * 6) for k in keys])
    rep = loader.load(tmp_path / "rep")

    def row(lever, worth, noise=False, status="ok"):
        return {"lever": lever, "worth": worth, "within_noise": noise, "record": {"status": status}}

    rows = [
        row("TF32", -0.004, True),
        row("padded vocabulary (and FP8 lm_head (torchao), which needs it)", 0.040),
        row("BF16 residual stream", 0.048),
        row("torch.compile", None, None, "oom"),
        row("fused AdamW", 0.006, True),
    ]
    monkeypatch.setattr(summary_box, "recommended", lambda rep: {"stage": "loss_only", "batch_size": 2})
    monkeypatch.setattr(
        summary_box.ablation_view, "ablation_rows", lambda rep: ({"stage": "loss_only", "batch_size": 2}, rows)
    )
    comments = [c for c, _ in summary_box.code_lines(rep)]
    assert comments[:5] == [
        "# torch.compile: without it B=2 does not fit",
        "# BF16 residual stream: +4.8 % at B=2",
        "# Vocab padded to 50304: +4.0 % at B=2, with FP8 lm_head by torchao removed too, since that lever needs it",
        "# Fused AdamW: +0.6 % at B=2, within noise",
        "# TF32: -0.4 % at B=2, within noise",
    ]
    assert all(c.endswith("not in the leave-one-out") for c in comments[5:]) and len(comments) == 8
    html = summary_box.code_html(rep)
    assert html.startswith('<pre class="page-one-code">') and "model = torch.compile(model)" in html
    # The turn-on line names the levers within noise too, as the code under it keeps them (a reviewer found page 1
    # silent on TF32 while the recommendations adopted it and the code set it).
    assert (
        summary_box._turn_on(rep)
        .split(" Each figure")[0]
        .endswith(" Within noise, kept as the recommendation has them: TF32 -0.4 %; fused AdamW +0.6 %.")
    )
    # reports/h100's page 1 said "Without any one of these, B=96 does not fit: ..." after the paying levers, which
    # read as if those were the ones it could not do without
    turn_on = summary_box._turn_on(rep)
    assert "Needed as well, since B=2 does not fit without any one of them: torch.compile." in turn_on
    assert "any one of these" not in turn_on
    rows[0]["worth"] = -0.00007  # reports/h100's TF32: -0.007 %, printed "-0.0 %"
    assert "TF32 0.0 %" in summary_box._turn_on(rep) and "-0.0 %" not in summary_box._turn_on(rep)
    rows[0]["worth"] = -0.004
    rows[0]["within_noise"] = None  # timed on another machine (the H100's leave-one-out): named as unjudged
    assert " Not paying, and not judged against noise, kept as the recommendation has them: TF32 -0.4 %." in (
        summary_box._turn_on(rep)
    )


def test_a_leave_one_out_cut_off_part_way_names_the_levers_it_did_not_reach(tmp_path, monkeypatch):
    """A run cut off in the leave-one-out (seen on two H200s): the levers without a record are named on page 1
    as not measured, in the turn-on line and in the code's comments, never as 'left out'."""
    keys = ["fp32", "tf32", "bf16", "flash", "vocab", "fused", "compile"]
    p = tiny_params(batch_sizes=(2,))
    p.stages = keys
    write_report_dir(tmp_path / "rep", p, [make_record(p, k, 2, [100.0] * 5, [5.0] * 6) for k in keys])
    rep = loader.load(tmp_path / "rep")
    missing = {"status": summary_box.ablation_view.NOT_MEASURED, "reason": "not measured: no record of this run"}
    rows = [
        {"lever": "padded vocabulary", "worth": 0.10, "within_noise": False, "record": {"status": "ok"}},
        {"lever": "fused AdamW", "worth": None, "within_noise": None, "record": missing},
        {"lever": "torch.compile", "worth": None, "within_noise": None, "record": missing},
    ]
    monkeypatch.setattr(summary_box, "recommended", lambda rep: {"stage": "compile", "batch_size": 2})
    monkeypatch.setattr(
        summary_box.ablation_view, "ablation_rows", lambda rep: ({"stage": "compile", "batch_size": 2}, rows)
    )
    turn_on = summary_box._turn_on(rep)
    assert turn_on.endswith("Worth not measured, no leave-one-out record: fused AdamW, torch.compile.")
    comments = [c for c, _ in summary_box.code_lines(rep)]
    assert "# Fused AdamW: worth not measured (no leave-one-out record)" in comments
    assert "# torch.compile: worth not measured (no leave-one-out record)" in comments
    assert not any("left out" in c for c in comments)
    rows[0]["worth"] = None
    rows[0]["record"] = missing
    assert summary_box._turn_on(rep).startswith("**Turn on:** not decided: no leave-one-out record for padded")


def test_what_it_buys_gives_the_ratio_with_its_range_over_the_processes(tmp_path, monkeypatch):
    """Page 1's ratio against the canonical trainer comes with its uncertainty: its range over every pair of the two
    sides' processes (issue 33: 'tokens/s against the canonical trainer with its uncertainty')."""
    keys = ["fp32", "tf32"]
    p = tiny_params(batch_sizes=(2,))
    p.stages = keys
    write_report_dir(tmp_path / "rep", p, [make_record(p, k, 2, [100.0] * 5, [5.0] * 6) for k in keys])
    rep = loader.load(tmp_path / "rep")
    mine = {"role": "recommended", "batch": 2, "micro_steps": 4, "median": 110.0, "min": 108.0, "max": 112.0, "n": 2}
    plain = {"role": "baseline", "batch": 2, "micro_steps": 4, "median": 100.0, "min": 99.0, "max": 101.0, "n": 2}
    monkeypatch.setattr(summary_box.frontier_view, "recipe_rows", lambda rep: [mine, plain])
    text = summary_box._buys(rep, {"batch_size": 2})
    assert "1.100× the canonical trainer" in text and "1.069× to 1.131× over every pair of their processes" in text
    assert "the harness by its median step, the plain loop by its wall-clock mean" in text
    plain["n"] = 1  # one process a side: no range to give
    assert "over every pair" not in summary_box._buys(rep, {"batch_size": 2})


def test_page_one_s_turn_on_line_nests_no_parentheses():
    """Issue 33: page 1 nests no parentheses. The H100's turn-on line read 'padded vocabulary (and FP8 lm_head
    (torchao), which needs it) (+8.5 %)'; a lever's name loses its parentheses there, whatever the record calls it."""
    assert summary_box.plain_lever("FP8 lm_head (torchao)") == "FP8 lm_head by torchao"
    assert (
        summary_box.plain_lever("padded vocabulary (and FP8 lm_head (torchao), which needs it)")
        == "padded vocabulary, with FP8 lm_head by torchao removed too, since that lever needs it"
    )
    assert summary_box.plain_lever("BF16 autocast (and BF16 residual stream, which needs it)") == (
        "BF16 autocast, with BF16 residual stream removed too, since that lever needs it"
    )
    assert summary_box.plain_lever("torch.compile") == "torch.compile"


def test_a_stage_title_inside_a_sentence_is_not_capitalised_but_an_acronym_keeps_its_case():
    """Reports/h200's page 1 read 'Each figure is what Loss-only forward at B=64 gives'."""
    assert summary_box.in_sentence("Loss-only forward") == "loss-only forward"
    assert summary_box.in_sentence("FP8 lm_head by torchao") == "FP8 lm_head by torchao"
    assert summary_box.in_sentence("torch.compile") == "torch.compile"


def test_a_chart_names_a_stage_not_applicable_on_this_host_as_such(tmp_path):
    """The throughput chart drew one-GPU DDP as 'not measured at this batch' at B=16 (a reviewer): it is not
    applicable at any batch on this host."""
    from lib.report import charts

    p = tiny_params(batch_sizes=(2, 4))
    p.stages = ["fp32", "ddp"]
    ddp = {**make_record(p, "ddp", 4, [100.0] * 5, [5.0] * 6), "status": "not_applicable"}
    recs = [make_record(p, "fp32", b, [100.0] * 5, [5.0] * 6) for b in (2, 4)] + [ddp]
    write_report_dir(tmp_path / "rep", p, recs)
    rep = loader.load(tmp_path / "rep")
    assert charts._missing(rep, "ddp", 2, name_batch=False) == "not applicable on this host"
    # one label for the row, with no batch: reports/h200's chart read "B=16: not applicable on this host" and
    # "B=64: n/a", reports/h100's named B=16 and B=64 beside a matrix row at B=128
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    charts._grouped_rows(ax, rep, [(2, "B=2", None), (4, "B=4", None)], lambda r, _: r["tokens_per_s"])
    labels = [t.get_text() for t in ax.texts]
    plt.close(fig)
    assert labels == ["not applicable on this host"], labels


def test_a_lever_predicted_to_be_needed_for_the_batch_to_fit_is_named_so_and_its_code_comes_first(
    tmp_path, monkeypatch
):
    """The ablation leaves out a run the matrix predicts would run out of memory (lib/run/recipe.py removal_cannot_fit):
    page 1 names the lever as one without which the batch would not fit, says it was not run, and puts its line of
    code first, as it does for one that ran out of memory."""
    rep = _report(tmp_path, tf32_ms=80.0)
    reason = f"{record.PREDICTED_OOM}: in the matrix this lever made B=2 fit"
    rows = [
        {"lever": "TF32", "worth": 0.05, "within_noise": False, "record": {"status": "ok"}},
        {"lever": "BF16 autocast", "worth": None, "record": {"status": "not_applicable", "reason": reason}},
    ]
    monkeypatch.setattr(
        summary_box.ablation_view, "ablation_rows", lambda rep: ({"batch_size": 2, "stage": "bf16"}, rows)
    )
    turn_on = next(line for line in summary_box.lines(rep) if line.startswith("**Turn on:**"))
    assert "BF16 autocast is needed as well: the matrix predicts B=2 would not fit without it, so it was not run." in (
        turn_on
    ), turn_on
    comments = [c for c, _ in summary_box.code_lines(rep)]
    assert comments[0] == "# BF16 autocast: without it B=2 would not fit, predicted", comments


def test_a_loss_gate_passed_by_noise_names_whose_drift_that_was(tmp_path):
    """Issue 33: the fused linear cross-entropy's loss gate passed only by the run-to-run drift of another stage, the
    FP8 lm_head's (the widest repeated configuration in reports/h100), and its line said 'run-to-run noise 0.049' as if
    it were its own. The line now names the configuration the allowance comes from."""
    from lib.report import prose

    params = tiny_params(["fp32", "tf32"])
    tol = params.run.loss_tolerance
    shifted = [x + tol * 1.2 for x in LOSSES]  # beyond the tolerance, within it plus the drift below
    drifted = [x + tol * 0.5 for x in LOSSES]
    repeat = make_record(params, "fp32", 2, [100.0] * 6, drifted)
    repeat["variant"] = "repeat"
    recs = [make_record(params, "fp32", 2, [100.0] * 6, LOSSES), make_record(params, "tf32", 2, [80.0] * 6, shifted)]
    d = write_report_dir(tmp_path / "r", params, recs)
    store.write_atomic(d / "results" / "repeats" / "fp32__b2__r1.json", repeat)
    rep = loader.load(d)
    text = prose._loss_gate_text(rep, "tf32")
    assert "within noise" in text
    assert "the widest drift here, FP32 baseline at B=2's" in text


def test_a_faster_lever_whose_parity_test_is_undecided_is_not_yet_not_skip_with_its_speed(tmp_path):
    """Page 1 of reports/h200 put the FP8 lm_head and the FP8 classifier, both faster than the stage before them
    but undecided by their parity tests, under Skip here beside levers that were slower, and never said they were
    faster. They are now under Not yet, each with its speed in the matrix; a lever whose test found it worse stays
    under Skip here."""
    p = tiny_params(batch_sizes=(2,))
    p.stages = ["fp32", "vocab", "compile", "bf16_residual"]
    ms = {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "bf16_residual": 90.0}
    write_report_dir(tmp_path / "rep", p, [make_record(p, k, 2, [v] * 5, [5.0] * 6) for k, v in ms.items()])
    write_parity_test(tmp_path / "rep", p, "bf16_residual", lever_held=4.0, ref_held=4.0)
    for f in (tmp_path / "rep" / "results" / "parity").glob("bf16_residual__*.json"):
        rec = json.loads(f.read_text())  # seeds that disagree: a spread too wide to decide either way
        rec["held_out_loss"] = 4.0 + [0.06, -0.04, 0.02][rec["seed_offset"]] + 0.001 * rec["replicate"]
        store.write_atomic(f, rec)
    lines = summary_box.lines(loader.load(tmp_path / "rep"))
    line = next(x for x in lines if "BF16 residual stream" in x and "parity test" in x)
    assert line.startswith("**Not yet:** BF16 residual stream: 1.11× of torch.compile in the matrix, but its parity")
    assert "**Skip here:**" not in line
