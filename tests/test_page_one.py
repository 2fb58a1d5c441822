"""Page 1 (lib/report/page_one.py), the MFU restated against the bf16 peak, the title's provenance,
the recommendation's energy and cost: each read from the records, and flipping with them."""

from __future__ import annotations

import json

import pytest
from conftest import make_record, tiny_params, write_report_dir

from lib.core import cli_args, config, prices
from lib.report import ablation_view, batch_sweep_view, loader, page_one, tables
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


def test_mfu_is_restated_against_the_bf16_peak_for_every_stage(tmp_path):
    rep = _report(tmp_path, tf32_ms=80.0)
    fp32 = rep.df[rep.df["stage"] == "fp32"].iloc[0]
    assert fp32["peak_precision"] == "fp32"
    assert fp32["mfu_bf16"] == pytest.approx(fp32["mfu"] * 10.0 / 100.0)
    html = tables.matrix_html(rep)
    assert f"{fp32['mfu_bf16'] * 100:.1f} %" in html and f"{fp32['mfu'] * 100:.1f} % of fp32" in html
    bf16 = rep.df[rep.df["stage"] == "bf16"].iloc[0]
    assert bf16["mfu_bf16"] == pytest.approx(bf16["mfu"])  # its own precision: nothing to restate


def test_energy_and_cost_of_the_recommendation(tmp_path, monkeypatch):
    """The cost is the recipe's decided one: the list price of params/prices.yaml with its source by default, the
    team's own where PRICE_PER_GPU_HOUR= states one, and none for a device the list does not price."""
    monkeypatch.delenv("PRICE_PER_GPU_HOUR", raising=False)
    rep = _report(tmp_path / "listed", tf32_ms=80.0)
    best = loader.recommended(rep)
    best["energy"] = {"joules_per_token": 0.002, "method": "NVML total-energy counter", "avg_power_w": 700.0}
    listed = prices.listed(rep.params.name)
    recipe = rep.decided["recipe"]
    per_million = listed["usd"] * 1e6 / recipe["tokens_per_s"] / 3600
    text = batch_sweep_view.energy_and_cost(rep, best)
    assert "2.00 mJ per token" in text and f"Cost: ${per_million:.3f} per million tokens" in text
    assert listed["source"] in text and recipe["price_source"] == listed["source"]
    assert recipe["cost"] == pytest.approx(recipe["gpu_hours"] * listed["usd"])
    assert recipe["canonical_time"] is None  # no canonical trainer timed in this folder: no cost for it either
    monkeypatch.setenv("PRICE_PER_GPU_HOUR", "3.6")
    own = _report(tmp_path / "own", tf32_ms=80.0)
    assert (
        own.decided["recipe"]["price_per_gpu_hour"] == 3.6
        and "PRICE_PER_GPU_HOUR" in own.decided["recipe"]["price_source"]
    )
    monkeypatch.delenv("PRICE_PER_GPU_HOUR")
    unpriced = _report(tmp_path / "unpriced", tf32_ms=80.0)
    unpriced.params.name = "mi300x"  # params/prices.yaml lists no price for it
    assert "no price per GPU-hour known" in batch_sweep_view.energy_and_cost(unpriced, best)
    best["energy"] = {"reason": "NVML is not available"}
    assert "Energy: not measured (NVML is not available)" in batch_sweep_view.energy_and_cost(rep, best)


def test_a_host_variant_pays_its_gpus_list_price_and_every_listed_price_names_its_source():
    assert prices.listed("h200-x4") == prices.listed("h200") and prices.listed("h200")["usd"] > 0
    assert prices.listed("mi300x") is None
    for profile in ("h100", "h200", "cpu"):
        assert prices.listed(profile)["source"]


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
    """The sweep, the recipe and the leave-one-out tables are drawn once, in the summary's section 2 (the PDF
    keeps it; the chapters are the HTML's), and the recommended configuration's block in the batch-size chapter."""
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

    assert not views("recipe") and not views("ablation") and not views("batch_sweep")
    assert all(len(calls(f)) == 1 for f in ("frontier_view.recipe_html", "ablation_view.ablation_html"))
    assert len(calls("batch_sweep_view.sweep_html")) == 1 and not calls("batch_sweep_view.recommended_md")


def test_a_report_of_a_several_gpu_host_says_so_in_its_title(tmp_path):
    rep = _report(tmp_path, tf32_ms=80.0)
    assert "×" not in page_one.title_md(rep)
    rep.env["device"]["count"] = 2
    assert " on 2 × x: " in page_one.title_md(rep)


def test_a_leave_one_out_whose_rows_were_timed_on_another_day_says_so():

    full = {"finished_at": "2026-11-22T14:00:00"}
    rows = [{"record": {"finished_at": "2026-11-23T10:00:00"}}, {"record": {"status": "oom"}}]
    assert (
        "in another device call (2026-11-22) than the runs without a lever (2026-11-23)"
        in ablation_view.ablation_calls_apart(full, rows)
    )
    rows[0]["record"]["finished_at"] = "2026-11-22T15:00:00"
    assert ablation_view.ablation_calls_apart(full, rows) is None


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


def test_page_one_has_a_row_per_lever_with_its_decision_and_the_recipe_row(tmp_path):
    """Page 1 lays out the decisions: one row per lever in the decisions' order, labelled by formats.DECISIONS, and
    the recipe's name with its micro-batch and accumulation."""
    from lib.report import formats

    rep = _report(tmp_path, tf32_ms=130.0, bf16_ms=90.0)
    page = page_one.page_html(rep)
    rows = page.split('<table class="levers">')[1].split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    assert len(rows) == len(rep.decided["levers"])
    for row, lever in zip(rows, rep.decided["levers"]):
        assert lever["title"] in row and formats.DECISIONS[lever["decision"]][0] in row
    recipe = rep.decided["recipe"]
    assert "micro-batch × accumulation steps × CPUs" in page  # the CPU default's: a GPU's is tests/test_small_defects
    assert f"Recipe: {recipe['micro_batch']} × {recipe['accumulation']} × 1 CPU" in page
    # the recipe spelled out: every lever it has on, by name, in one line (a reader rebuilt it from the table before)
    on = page.split("<p class='levers-on'>")[1].split("</p>")[0]
    titles = {r["stage"]: r["title"] for r in rep.decided["levers"]}
    assert recipe["levers_on"] and all(titles[k] in on for k in recipe["levers_on"])
    assert "GPU-hours" in page and f"{recipe['gpu_hours']:.1f}" in page and formats.money(recipe["cost"]) in page


def test_the_cpu_default_says_in_its_first_line_what_it_is(tmp_path):
    rep = _report(tmp_path, tf32_ms=80.0)
    assert page_one.page_html(rep).startswith(f"<p class='cpu-note'><strong>{page_one.NOT_A_GPU}")
    rep.params.backend = "cuda"
    assert page_one.NOT_A_GPU not in page_one.page_html(rep)


def test_every_worth_is_one_basis_the_tokens_per_s_a_lever_adds_and_names_a_batch_only_off_the_recipe_s():
    """A reader found three bases in one column (% lost when left out, × over its own stack, "needed to fit" with no
    number): every worth is now the percent a lever adds over the configuration without it; the batch is named only
    where it is not the recipe's, and a lever needed to fit still gives a number (the memory it saves where both fit,
    else its matrix figure)."""
    loo = {"worth": 0.0009, "batch": 128, "within_noise": True, "cannot_fit": False, "predicted": False}
    assert page_one.worth_text({"leave_one_out": loo, "matrix": None}, 128) == "+0.09 %"
    assert page_one.worth_text({"leave_one_out": loo, "matrix": None}, 64) == "+0.09 % at B=128"
    m = {"ratio": 1.035, "batch": 64, "against": "bf16_residual", "within_noise": False}
    fit = {**loo, "worth": 0.0, "cannot_fit": True}
    assert (
        page_one.worth_text({"leave_one_out": fit, "matrix": m}, 128)
        == "needed at B=128; +3.5 % over BF16 residual stream at B=64"
    )
    assert page_one.worth_text({"leave_one_out": None, "matrix": {**m, "ratio": 0.91}}, 64) == (
        "-9.0 % over BF16 residual stream"
    )
    # a lever the recipe needs to fit gives the memory it takes off its stack there (issue 61: "needed to fit" said
    # no number a team could weigh)
    assert (
        page_one.worth_text({"leave_one_out": fit, "matrix": {**m, "memory_saved_bytes": 12.5 * 2**30}}, 128)
        == "needed at B=128; saves 12.5 GiB over BF16 residual stream at B=64"
    )


def test_a_lever_s_matrix_worth_carries_the_allocator_peak_it_takes_off_its_stack():
    from lib.core.paths import ROOT

    rep = loader.load(ROOT / "reports" / "h100")
    row = next(r for r in rep.decided["levers"] if r["stage"] == "compile")
    m, df = row["matrix"], rep.df
    peak = {
        k: df[(df["stage"] == k) & (df["batch_size"] == m["batch"])]["mem_allocator_bytes"].iloc[0]
        for k in ("compile", m["against"])
    }
    assert (
        m["memory_saved_bytes"] == pytest.approx(peak[m["against"]] - peak["compile"]) and m["memory_saved_bytes"] > 0
    )


def test_the_legend_says_the_worth_in_the_recipe_was_timed_one_optimizer_step_a_micro_batch(tmp_path):
    """The recipe accumulates (B=128 × 4); the ablation steps the optimizer every micro-batch, where an optimizer-side
    lever is worth more than as trained: said once, under the table."""
    assert "both at one micro-batch a step" in page_one.lever_table(_report(tmp_path, tf32_ms=80.0))


def test_a_lever_the_whole_stack_s_test_covers_reads_that_verdict():
    q = {
        "test": "divergence check",
        "verdict": "passed",
        "steps": 30,
        "stack": {"verdict": "holds", "via": "loss_only"},
    }
    assert page_one.quality_text(q) == "<strong>holds</strong> with the whole recipe"


def test_the_ladder_chart_says_its_bars_are_not_the_worth_in_the_recipe(tmp_path):
    """A reader set reports/h100's vocabulary bar (×1.51 over flash attention, eager at B=16) against the table's
    +3.55 % (left out of the compiled recipe) as a contradiction: the axis says which is which."""
    from lib.report import waterfall_chart

    fig = waterfall_chart.plot_waterfall(_report(tmp_path, tf32_ms=80.0))
    label = fig.axes[0].get_xlabel()
    assert "as each lever is added in turn" in label and "its worth in the recipe is page 1's" in label


def test_the_recipe_holds_no_lever_its_own_table_says_to_skip():
    """The CPU default's page 1 marked BF16 autocast "skip -44.31 %" while the recipe, recommended.json and page 2's
    code kept it on. A lever in the recipe that it ran faster without is "not yet" (kept until measured as trained),
    never skip; one that pays is adopted."""
    from lib.results import decisions

    row = {"in_recipe": True, "quality": None, "matrix": None}
    slower = {"worth": -0.44, "within_noise": False, "cannot_fit": False}
    assert decisions._decide({**row, "leave_one_out": slower}, None)[0] == decisions.NOT_YET
    assert decisions._decide({**row, "leave_one_out": {**slower, "worth": 0.2}}, None)[0] == decisions.ADOPT
    assert decisions._decide({**row, "leave_one_out": {**slower, "within_noise": True}}, None)[0] == decisions.NEUTRAL


@pytest.mark.parametrize("gpu", ["h100", "h100-x4", "h200"])
def test_no_committed_recipe_holds_a_lever_its_table_says_to_skip(gpu):
    from lib.core.paths import ROOT

    d = json.loads((ROOT / "reports" / gpu / "decisions.json").read_text())
    by = {r["stage"]: r["decision"] for r in d["levers"]}
    assert d["recipe"]["levers_on"] and all(by[k] != "skip" for k in d["recipe"]["levers_on"])


def _long_records(folder, lever: str, reference: str, seeds: int, cost: float) -> None:
    """Paired long-test records (the shape lib/run/long_test.py writes) in a report's long/ folder, the lever's
    held-out curve `cost` nats above the reference's at every point, seed by seed a little apart."""
    from lib.core.record import SCHEMA_VERSION, Status
    from lib.results import long_quality

    out = folder / store.LONG_FOLDER / "results" / "long"
    for seed in range(seeds):
        for stage, extra in ((reference, 0.0), (lever, cost + 0.004 * (seed % 2))):
            curve = [[s, 6.0 - 0.002 * s + extra] for s in range(50, 550, 50)]
            rec = {
                "schema_version": SCHEMA_VERSION,
                "variant": long_quality.VARIANT,
                "stage": stage,
                "batch_size": 2,
                "status": Status.OK,
                "seed_offset": seed,
                "seq_len": 64,
                "passes": 3.6,
                "held_out_curve": curve,
                "held_out_loss": curve[-1][1],
            }
            store.write_atomic(out / f"{stage}__b2__s{seed}.json", rec)
    store.write_atomic(folder / store.LONG_FOLDER / f"long-{lever}-vs-{reference}.json", {"verdict": None})


def test_a_long_test_verdict_in_time_to_the_same_loss_decides_its_lever_and_page_one_says_its_horizon(tmp_path):
    """Where the long quality test ran a lever against its reference (<report>/long/), the decisions judge it in time
    to the same loss at the report's own speed-up, and page 1 prints that verdict, the tokens it speaks for, and once
    what it does not cover; without those records nothing changes."""
    from lib.results import long_quality

    rep = _report(tmp_path, tf32_ms=80.0, bf16_ms=120.0)  # bf16 slower: outside the recipe, judged by its speed
    row = next(r for r in rep.decided["levers"] if r["stage"] == "bf16")
    assert row["long"] is None and "long text" not in page_one.lever_table(rep)
    _long_records(rep.dir, "bf16", "tf32", seeds=4, cost=0.05)
    again = loader.load(rep.dir)
    row = next(r for r in again.decided["levers"] if r["stage"] == "bf16")
    v = long_quality.verdict(
        again.evidence["long"], "bf16", "tf32", 2, row["over_recipe"]["ratio"], again.decided["noise_floor"] or 0.0
    )
    assert row["long"]["n"] == 4 and row["long"]["net_worth"] == pytest.approx(v["net_worth"])
    # slower in the matrix, it is skipped for that first; the long test agrees and page 1 prints its word
    assert row["long"]["decision"] == "skip" and row["decision"] == "skip" and row["reason"] == "no gain beyond noise"
    table = page_one.lever_table(again)
    assert "<strong>later to the same loss</strong>" in table and "nats, 4 seeds" in table
    assert "tokens (seen" not in table  # its one plan is said once, in the legend (below), not in each row
    # the plan the test ran (its batch and horizon) is said once, with what it took
    v = row["long"]
    assert f"the long test (B={v['batch']}, " in table and "for those tokens only" in table
    # and a claim resting on the lever reads the long test's word, not the short test's (reports/h200's page 8 said
    # the FP8 lm_head's quality was "not tested at this depth" beside its long test on page 1)
    from conftest import claim_facts

    from lib.results import claim_figures

    facts = claim_facts(again)
    assert facts["not_held"]["bf16"] == claim_figures.LONG_NOT_HELD["skip"] and "bf16" not in facts["undecided"]


def test_the_lever_that_turns_sdpa_on_names_the_kernel_it_dispatched_to(tmp_path):
    """A reviewer found "Flash attention (SDPA)" ran cuDNN's kernel on the H100 and H200, said only on page 7: page 1
    names it beside the lever, from its records, and nowhere a record names none."""
    params = tiny_params(["fp32", "bf16", "flash"])
    recs = [make_record(params, "fp32", 2, [100.0] * 6, LOSSES), make_record(params, "bf16", 2, [60.0] * 6, LOSSES)]
    flash = make_record(params, "flash", 2, [40.0] * 6, LOSSES)
    flash["sdpa_backend"] = "cuDNN"
    rep = loader.load(write_report_dir(tmp_path / "r", params, [*recs, flash]))
    table = page_one.lever_table(rep)
    row = table.split("Flash attention (SDPA)")[1].split("</tr>")[0]
    assert "ran cuDNN's kernel" in row and table.count("'s kernel") == 1


def test_the_lever_table_puts_what_the_recipe_adds_to_the_canonical_trainer_apart_from_what_it_shares(tmp_path):
    """A reader shown page 1 alone multiplied the worths (+216 %, +37 %, +33 %, ...) and could not make them 1.059×:
    the recipe's lead over the canonical trainer comes only from the levers that trainer lacks. The decisions say which
    levers the canonical trainer has, list the others first, and page 1 heads each group."""
    params = tiny_params(["fp32", "tf32", "bf16", "fused", "compile"])  # the CPU default's canonical trainer: fused
    recs = [make_record(params, k, 2, [ms] * 6, LOSSES) for k, ms in (("fp32", 100), ("tf32", 90), ("bf16", 60))]
    recs += [make_record(params, k, 2, [ms] * 6, LOSSES) for k, ms in (("fused", 55), ("compile", 40))]
    rep = loader.load(write_report_dir(tmp_path / "r", params, recs))
    rows = rep.decided["levers"]
    assert [r["stage"] for r in rows if not r["in_canonical"]] == ["compile"]
    assert [r["in_canonical"] for r in rows] == sorted(r["in_canonical"] for r in rows)  # the lever it adds first
    table = page_one.lever_table(rep)
    beyond, shared = table.index("Beyond the canonical trainer"), table.index("In the canonical trainer too")
    assert beyond < table.index("torch.compile") < shared < table.index("TF32")


def test_page_one_says_when_the_leave_one_out_ran_around_another_stage_than_the_recipe(tmp_path):
    """reports/h200 of 25022d9: the worths of the recipe's levers were measured around the loss-only forward while the
    recipe was the FP8 classifier; the legend says so wherever the records show it, and nowhere else."""
    rep = _report(tmp_path, tf32_ms=80.0)
    assert rep.decided["recipe"]["stage"] == "bf16"
    rep.decided["leave_one_out_stage"] = "bf16"
    assert "in the recipe over the recipe without it" in page_one.lever_table(rep)
    rep.decided["leave_one_out_stage"] = "tf32"
    table = page_one.lever_table(rep)
    assert "in the recipe over TF32 without it" in table


def test_page_one_says_there_is_no_next_experiment_where_no_lever_is_left_not_yet(tmp_path):
    """reports/h200 re-measured by 25022d9 left no lever not yet, and page 1 lost its Next line without a word."""
    rep = _report(tmp_path, tf32_ms=80.0)
    rep.decided["next"] = None
    assert page_one.actions(rep) == [f"<strong>Next</strong> {page_one.NOTHING_NEXT}"]


def test_a_lever_skipped_as_slower_than_the_recipe_says_how_much_slower_and_a_horizon_its_share_of_the_run():
    """A reader shown reports/h200's page 1 alone saw the FP8 lm_head "skip" beside "+3.6 % over Loss-only forward"
    and an undecided long test, with no reason; and could not tell how much of the 10B-token run 103M tokens is."""
    row = {"leave_one_out": None, "reason": "slower than the recipe", "over_recipe": {"ratio": 0.954, "batch": 64}}
    row["matrix"] = {"ratio": 1.036, "within_noise": False, "against": "loss_only", "batch": 64}
    assert page_one.worth_text(row, 64) == "+3.6 % over Loss-only forward; 0.95× the recipe"
    row["reason"] = "quality undecided"
    assert page_one.worth_text(row, 64) == "+3.6 % over Loss-only forward"
    assert page_one.budget_share(102.8e6, {"token_budget": 1e10}) == " (1.0 % of the 10B priced above)"
    assert page_one.budget_share(102.8e6, None) == ""


def test_a_long_test_against_a_stage_further_back_names_the_levers_it_judges_with_the_lever():
    """A reviewer recomputing reports/h200 read "Loss-only forward: sooner to the same loss, 1.059x as fast as
    torch.compile" as the loss-only forward's own, where its +1.55 % worth says otherwise: the test set the loss-only
    stack, BF16 residual stream included, against torch.compile."""
    v = {"decision": "adopt", "net_worth": 0.059, "net_worth_interval": [0.024, 0.094], "mean_diff": 0.0014, "n": 3}
    v |= {"seeds_to_decide": None, "horizon_tokens": 1.03e8, "lever": "loss_only", "reference": "compile"}
    assert "sooner to the same loss</strong> with BF16 residual stream: 1.059×" in page_one.long_text(v, said=True)
    v["reference"] = "bf16_residual"  # its own stack: the lever alone
    assert "sooner to the same loss</strong>: 1.059×" in page_one.long_text(v, said=True)


# Words of the harness a team lead does not decide in (issue 61): page 1 says what to train, not how we measured it
HARNESS_WORDS = ("sitting", "DEPTH=", "rehearsal", "harness", "micro-step", "params.json", "parity rule")


@pytest.mark.parametrize("gpu", ["h100", "h100-x4", "h200"])
def test_page_one_of_a_committed_report_speaks_no_harness_word(gpu):
    from lib.core.paths import ROOT

    rep = loader.load(ROOT / "reports" / gpu, read_decisions=True)
    text = page_one.page_html(rep)
    assert not [w for w in HARNESS_WORDS if w.lower() in text.lower()], gpu


def test_the_ddp_row_gives_its_range_over_processes_as_the_other_rows_do():
    """A reader of reports/h100-x4's page 1: every row gave a range over repeated runs but the DDP row, though its job
    was timed by two processes (2,013,516-2,013,574 tokens/s)."""
    from lib.core.paths import ROOT

    from lib.report import recipe_row

    rep = loader.load(ROOT / "reports" / "h100-x4", read_decisions=True)
    host = rep.decided["recipe"]["host"]
    row = recipe_row.recipe_table(rep).split("Recipe, DDP")[1].split("</tr>")[0]
    p = host["processes"]
    assert p["n"] == 2 and f"{loader.tok(p['lo'])}–{loader.tok(p['hi'])}" in row and "one run" not in row


def test_a_recipe_slower_than_the_canonical_trainer_costs_more_rather_than_saving_a_negative_figure():
    """The CPU default on a loaded machine printed 'saves -682.26' GPU-hours and 'saves $-55.67' under its recipe."""
    from lib.report import recipe_row

    cells = recipe_row.budget_cells({"hours": 2.0, "gpu_hours": 2.0, "cost": 10.0}, {"gpu_hours": -0.5, "cost": -3.0})
    assert "costs 0.50 more" in cells[1] and "costs $3.00 more" in cells[2] and "-" not in "".join(cells)
    cells = recipe_row.budget_cells({"hours": 2.0, "gpu_hours": 2.0, "cost": 10.0}, {"gpu_hours": 0.5, "cost": 3.0})
    assert "saves 0.50" in cells[1] and "saves $3.00" in cells[2]
