"""`make compare`: one report across GPUs from existing report folders, with version skew
flagged, and a clear refusal when a named report is missing or of another schema."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from conftest import describe_proc, make_record, read_json, run_cli, write_report_dir

from lib.core import config, record, stages
from lib.core.params import Params
from lib.report import compare, compare_summary, compare_view, ddp_charts, loader, recipe_row, rules
from lib.report import formats as fmt
from lib.results import claim_params
from lib.results import decide, decisions, stats, store

PEAKS = {"fp32": 10.0, "tf32": 40.0, "bf16": 80.0, "fp8": 160.0}  # a synthetic datasheet, TFLOP/s


def _fake_report(
    root: Path, name: str, torch: str, speed: float, schema=record.SCHEMA_VERSION, batches=(2, 4), gain: float = 1.0
):
    """A synthetic report folder: the cpu workload's params, a CUDA-like environment, and one
    record per stage at each batch size, each stage `speed` times faster than the one before, the
    whole GPU `gain` times faster, and a larger batch faster by the square root of its size (so a
    ratio taken across two batch sizes shows)."""
    params = config.load("cpu", list(batches), depth="full")  # every stage: the FP8 claims read the fp8 records
    params.name, params.backend, params.peak_tflops = name, "cuda", PEAKS
    params.stages = [s for s in params.stages if s != "ddp"]  # single-GPU stages only
    params.evidence.check_stage = None  # a GPU's report: its fastest verified stage is recommended, not the CPU's check
    recs = []
    for i, key in enumerate(params.stages):
        for b in batches:
            rec = make_record(params, key, b, [100.0 / speed**i / gain * b**0.5] * 5, [3.0] * 5)
            rec.update(mem_tensors_bytes=1e9, mem_allocator_bytes=2e9, mem_device_bytes=3e9, schema_version=schema)
            rec["fingerprint"] = f"{name}-{key}-b{b}"  # the same configuration in every sitting of this GPU
            recs.append(rec)
    d = write_report_dir(root / name, params, recs)
    env = {
        "device": {"backend": "cuda", "name": f"GPU {name}"},
        "torch": torch,
        "cuda": "13.0",
        "cublas": "13.1.0",
        "cudnn": 91900,
        "driver": "580",
        "python": "3.12",
    }
    (d / "environment.json").write_text(json.dumps(env))
    return d


def test_compare_two_reports_writes_html_and_pdf_and_flags_version_skew(tmp_path):
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5)
    _fake_report(tmp_path, "gpub", "2.9.1", 2.0)
    proc = run_cli("compare", GPUS="gpua gpub", REPORTS=tmp_path, timeout=300)
    assert proc.returncode == 0, describe_proc(proc)
    out = tmp_path / "compare-gpua-gpub"
    html = (out / "report.html").read_text()
    assert (out / "report.pdf").read_bytes().startswith(b"%PDF")
    assert "Version skew" in html and "PyTorch" in html
    assert "GPU gpua" in html and "GPU gpub" in html
    assert '<script src="http' not in html
    # The depth (claims, rule tables, each stage at its best batch) is the HTML's: the PDF leaves it out, saying so.
    assert html.count("celltag_html-only") >= 10 and "celltag_pdf-only" in html
    # make compare left three committed files modified when nothing had changed (their render's timestamps)
    kept = {p: p.read_bytes() for p in (out / "notebooks" / "compare.ipynb", out / "report.ipynb", out / "report.pdf")}
    assert (
        b'"start_time"' not in kept[out / "report.ipynb"] and b'"iopub.execute_input"' not in kept[out / "report.ipynb"]
    )
    proc = run_cli("compare", GPUS="gpua gpub", REPORTS=tmp_path, timeout=300)
    assert proc.returncode == 0, describe_proc(proc)
    assert [p.name for p, data in kept.items() if p.read_bytes() != data] == []


def test_the_stage_table_puts_each_gpu_against_its_own_fp32(tmp_path):
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5)
    _fake_report(tmp_path, "gpub", "2.11.0", 2.0)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    t = compare.stage_table(reps)
    last, n = t.iloc[-1], len(reps["gpua"].stage_order) - 1  # n levers after the baseline
    assert last["gpua × own FP32"] == pytest.approx(1.5**n)
    assert last["gpub × own FP32"] == pytest.approx(2.0**n)
    assert not compare.skew(reps)["differs"].any()
    effects = compare.lever_effects(reps)
    # Each lever against the stage it is added to: the fake speeds grow per registry position.
    order = reps["gpub"].stage_order
    expected = [2.0 ** (order.index(k) - order.index(decide.previous_stage(k))) for k in order[1:]]
    assert effects["gpub"].dropna().tolist() == pytest.approx(expected)


def _add_ddp(d: Path, worlds: tuple[int, ...] = ()):
    """DDP rows: not applicable (one GPU) without `worlds`, else one record per GPU count (ddp__b4__g<N>.json),
    each GPU of N running at 0.9 of the tokens/s of one GPU's fastest stage at B=4."""
    params = Params.read(d / "params.json")
    params.stages.append("ddp")
    store.write_atomic(d / "params.json", params)
    if not worlds:
        rec = store.base_record(params, stages.get("ddp"), 4)
        rec.update(status="not_applicable", reason="one GPU")
        store.write_atomic(store.record_path(d / "results", "ddp", 4), rec)
    last = read_json(store.record_path(d / "results", params.stages[-2], 4))
    for world in worlds:
        rec = store.base_record(params, stages.get("ddp"), 4)
        stats.fill_timing(rec, [last["median_ms"] / 0.9] * 5, 4 * 64 * world)
        rec.update(
            world_size=world,
            base_stage=last["stage"],
            per_gpu_tokens_per_s=rec["tokens_per_s"] / world,
            losses=[3.0] * 5,
            mem_allocator_bytes=2e9,
        )
        store.write_atomic(store.record_path(d / "results", "ddp", 4, gpus=world), rec)


def test_two_hosts_scaling_curves_are_drawn_on_one_chart_and_one_host_s_alone_is_not(tmp_path):
    """A four-GPU host's curve beside an eight-GPU host's (issue 55): one line per report, each point its
    efficiency against its own report's one GPU; a comparison with one multi-GPU report draws none."""
    _add_ddp(_fake_report(tmp_path, "gpua", "2.11.0", 1.5), (2, 4))
    _add_ddp(_fake_report(tmp_path, "gpub", "2.11.0", 2.0), (2, 4, 8))
    _add_ddp(_fake_report(tmp_path, "gpuc", "2.11.0", 2.0))
    fig = ddp_charts.plot_scaling_compare(compare.load_all(["gpua", "gpub"], tmp_path), tmp_path / "out")
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert list(lines["gpub"].get_xdata()) == [1, 2, 4, 8] and list(lines["gpua"].get_xdata()) == [1, 2, 4]
    assert list(lines["gpub"].get_ydata()) == pytest.approx([100, 90, 90, 90])
    assert (tmp_path / "out" / "ddp_scaling_compare.png").exists()
    assert ddp_charts.plot_scaling_compare(compare.load_all(["gpua", "gpuc"], tmp_path)) is None


def test_ddp_is_shown_per_gpu_count_against_the_same_gpus_best_single_gpu_configuration(tmp_path):
    _add_ddp(_fake_report(tmp_path, "gpua", "2.11.0", 1.5))
    b = _fake_report(tmp_path, "gpub", "2.11.0", 2.0)
    _add_ddp(b, (2, 4))
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    single = loader.best_single_gpu(reps["gpub"])
    t = compare.ddp_table(reps).set_index("gpus")
    # one row per GPU count, each against one GPU's best configuration: no median over counts, no FP32
    assert t.index.tolist() == [2, 4]
    for g in (2, 4):
        assert t.loc[g, "gpub speedup"] == pytest.approx(t.loc[g, "gpub tokens_per_s"] / single["tokens_per_s"])
        assert t.loc[g, "gpub speedup"] == pytest.approx(0.9 * g)
        assert t.loc[g, "gpub efficiency"] == pytest.approx(0.9)
    assert t.isna().loc[2, "gpua tokens_per_s"]
    html = compare_view.ddp_html(reps)
    assert "2 GPUs" in html and "4 GPUs" in html and "not applicable" in html and "2 × B=4" in html
    assert f"over one GPU's {stages.get(single['stage']).title} B={single['batch_size']}" in html
    assert "DDP" not in " ".join(compare.stage_table(reps)["stage"])  # no multi-GPU figure over one GPU's FP32
    assert not any("DDP" in s for s in compare.lever_effects(reps).index)
    # A slower FP32 moves every speed-up over FP32 and none of DDP's.
    fp32 = compare.stage_table(reps).iloc[-1]["gpub × own FP32"]
    params = Params.read(b / "params.json")
    for batch in (2, 4):
        rec = read_json(store.record_path(b / "results", "fp32", batch))
        rec.update(make_record(params, "fp32", batch, [v * 2 for v in rec["step_ms"]], rec["losses"]))
        store.write_atomic(store.record_path(b / "results", "fp32", batch), rec)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    assert compare.stage_table(reps).iloc[-1]["gpub × own FP32"] == pytest.approx(2 * fp32)
    assert compare.ddp_table(reps).set_index("gpus")["gpub speedup"].tolist() == pytest.approx([1.8, 3.6])


def test_same_batch_table_holds_the_batch_fixed(tmp_path):
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5)
    b = _fake_report(tmp_path, "gpub", "2.11.0", 2.0)
    for f in (b / "results").glob("tf32__b4.json"):  # gpub has no TF32 timing at B=4
        f.unlink()
    t = compare.same_batch_table(compare.load_all(["gpua", "gpub"], tmp_path)).set_index("stage")
    assert t.loc["FP32 baseline", "B"] == 4 and t.loc["TF32", "B"] == 2  # the largest batch both timed
    assert t.loc["TF32", "gpub / gpua"] == pytest.approx(2.0 / 1.5)
    assert t.loc["FP32 baseline", "gpub / gpua"] == pytest.approx(1.0)


def test_compare_refuses_a_missing_report_in_one_line(tmp_path):
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5)
    proc = run_cli("compare", GPUS="gpua nosuch", REPORTS=tmp_path, timeout=120)
    assert proc.returncode == 2, describe_proc(proc)
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "no report for 'nosuch'" in proc.stderr and "gpua" in proc.stderr
    assert not (tmp_path / "compare-gpua-nosuch").exists()


def test_compare_refuses_results_of_another_schema_and_a_single_report(tmp_path):
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5)
    _fake_report(tmp_path, "old", "2.11.0", 1.5, schema=0)
    with pytest.raises(compare.CompareError, match="schema version"):
        compare.load_all(["gpua", "old"], tmp_path)
    with pytest.raises(compare.CompareError, match="at least two"):
        compare.load_all(["gpua"], tmp_path)


def test_gpus_measured_at_different_batch_sizes_are_compared_at_a_common_one_or_labelled(tmp_path):
    """gpua measured B=2, 4 and gpub B=4, 8: every cross-GPU ratio is taken at B=4, where the two are
    equal; a ratio of their best batches (B=4 against B=8) would credit gpub with the larger batch."""
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5, batches=(2, 4))
    _fake_report(tmp_path, "gpub", "2.11.0", 1.5, batches=(4, 8))
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    same = compare.same_batch_table(reps)
    assert set(same["B"]) == {4} and same["gpub / gpua"].tolist() == pytest.approx([1.0] * len(same))
    levers = compare.lever_effects(reps)
    assert set(levers["B"]) == {4} and levers["gpua"].tolist() == pytest.approx(levers["gpub"].tolist())
    stage = compare_view.stage_html(reps)  # each GPU's best over its own batches: the batch in every cell
    assert stage.count("<small>B=4</small>") == stage.count("<small>B=8</small>") == len(same)
    assert "× own FP32 at B=4" in stage and "× own FP32 at B=8" in stage
    # No batch in common: no same-batch row, and every lever cell names its own batch.
    _fake_report(tmp_path, "gpuc", "2.11.0", 1.5, batches=(8, 16))
    reps = compare.load_all(["gpua", "gpuc"], tmp_path)
    assert compare.same_batch_table(reps).empty and "No stage was timed" in compare_view.same_batch_html(reps)
    levers = compare.lever_effects(reps)
    assert levers["B"].isna().all() and set(levers["gpua B"]) == {4} and set(levers["gpuc B"]) == {16}
    html = compare_view.lever_html(reps)
    assert html.count("<small>B=4</small>") == html.count("<small>B=16</small>") == len(levers)


def test_mfu_is_against_the_bf16_peak_for_every_stage_and_against_the_stages_own_beside_it(tmp_path):
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5)
    _fake_report(tmp_path, "gpub", "2.11.0", 2.0)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    t, df = compare.stage_table(reps).set_index("stage"), reps["gpua"].df
    for title in ("FP32 baseline", "TF32", "BF16 autocast"):
        rec = df[(df["stage_title"] == title) & (df["batch_size"] == t.loc[title, "gpua B"])].iloc[0]
        assert t.loc[title, "gpua MFU bf16"] == pytest.approx(rec["achieved_tflops"] / PEAKS["bf16"])
        assert t.loc[title, "gpua MFU own"] == pytest.approx(rec["achieved_tflops"] / PEAKS[rec["peak_precision"]])
    assert t.loc["TF32", "gpua precision"] == "tf32"
    assert t.loc["FP32 baseline", "gpua MFU own"] == pytest.approx(8 * t.loc["FP32 baseline", "gpua MFU bf16"])


def _add_repeat(d: Path, spread: float):
    """A second process of the FP32 B=4 configuration, `spread` slower: the report's noise floor."""
    params = Params.read(d / "params.json")
    rec = read_json(store.record_path(d / "results", "fp32", 4))
    rep = make_record(params, "fp32", 4, [v * (1 + spread) for v in rec["step_ms"]], rec["losses"])
    rep.update(variant="repeat", repeat=1)
    store.write_atomic(d / "results" / "repeats" / "fp32__b4__r1.json", rep)


def _add_sitting(root: Path, name: str, scale: float, stamp: str = "20260101-000000") -> Path:
    """An earlier sitting of report `name` kept under archive/: the same configurations (fingerprints) on another
    machine, every one `scale` times as fast."""
    import shutil

    d = shutil.copytree(root / name, root / "archive" / f"{name}-{stamp}")
    for path in (d / "results").rglob("*.json"):
        rec = read_json(path)
        rec["tokens_per_s"] *= scale
        store.write_atomic(path, rec)
    return d


@pytest.mark.parametrize(
    "machines, torch_b, hardware",
    [(0.01, "2.11.0", True), (0.2, "2.11.0", False), (None, "2.11.0", False), (0.01, "2.9.1", False)],
)
def test_a_difference_is_the_hardwares_only_beyond_the_spread_between_machines_and_without_skew(
    tmp_path, machines, torch_b, hardware
):
    """compare-h100-h200 said 'none is within noise' against a 0.8-1.0 % spread between processes, while two H200
    sittings of one software differed by 1.5-2.0 %. gpub is 1.1× gpua at every stage: the hardware's where a
    repeat sitting of each GPU puts the spread between machines at 1 %, within spread at 20 %, not shown to be the
    hardware's where no repeat sitting measured it, and the software's too with skew."""
    a, b = _fake_report(tmp_path, "gpua", "2.11.0", 1.5), _fake_report(tmp_path, "gpub", torch_b, 1.5, gain=1.1)
    _add_repeat(a, 0.02)
    _add_repeat(b, 0.01)
    if machines is not None:
        _add_sitting(tmp_path, "gpua", 1 + machines)
        _add_sitting(tmp_path, "gpub", 1 - machines / 2)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    text = compare_view.attribution_html(reps)
    rows = len(compare.same_batch_table(reps))
    assert ("differences are the hardware's" in text) is hardware
    table = compare_view.same_batch_html(reps)
    if machines is None:
        assert "GPU gpua: one sitting" in text and "none is shown to be the hardware's" in text
        assert f"{rows} of {rows} stages lie beyond the 2.0 %" in text  # the process spread: nothing stronger
    elif machines == 0.2:
        assert f"0 of {rows} stages" in text and table.count("within spread</small>") == rows
        assert f"GPU gpua {0.2 / 1.1:.1%}".replace("%", " %") + ", the widest over 2 sittings" in text
    else:
        assert f"{rows} of {rows} stages lie beyond the 2.0 %" in text and "within spread" not in table
        assert "GPU gpub 0.5 %, the widest over 2 sittings" in text
    assert ("Version skew" in text) is (torch_b != "2.11.0")


def test_the_first_lines_judge_each_ratio_against_the_spread_between_machines(tmp_path):
    """The headline said 1.037× with no spread to hold it against; with a repeat sitting of each GPU it says whether
    the ratio lies within the spread between machines, and which sittings measured it."""
    for name, scale in (("gpua", 1.0), ("gpub", 1.03)):
        _add_recipe(d := _fake_report(tmp_path, name, "2.11.0", 1.5), scale)
        _add_repeat(d, 0.01)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    title = compare_summary.title_md(reps)
    assert "1.030× by its own recipe" in title and "(GPU gpua: one sitting; GPU gpub: one sitting)" in title
    assert "both beyond the 1.0 % measured, the spread between machines of GPU gpua and GPU gpub not measured" in title
    _add_sitting(tmp_path, "gpua", 1.08)  # 7.7 % apart: 1.03× is within it
    _add_sitting(tmp_path, "gpub", 1.0)
    title = compare_summary.title_md(compare.load_all(["gpua", "gpub"], tmp_path))
    assert "both within the 7.7 % spread between machines of both kinds combined" in title
    assert "GPU gpua 7.7 %, the widest over 2 sittings and" in title and "GPU gpub 0.0 %" in title


# ---------------------------------------------------------------- seed 002's rule table, and claims elsewhere

GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"  # a Hopper cuBLAS kernel: its tile in its name


def _hopper_pair(tmp_path: Path, fp8_over_compile: float) -> dict:
    """Synthetic reports named h100 and h200 (Hopper profiles), each FP8 form `fp8_over_compile` times
    the step time of the stage it is added to at every batch, and a kernel profile of torch.compile at B=4."""
    for name in ("h100", "h200"):
        d = _fake_report(tmp_path, name, "2.11.0", 1.5)
        params = Params.read(d / "params.json")
        for b in (2, 4):
            for form in ("fp8", "fp8_torchao", "fp8_head", "fp8_classifier"):
                base = read_json(store.record_path(d / "results", decide.previous_stage(form), b))
                rec = make_record(params, form, b, [v * fp8_over_compile for v in base["step_ms"]], base["losses"])
                store.write_atomic(store.record_path(d / "results", form, b), rec)
            comp = read_json(store.record_path(d / "results", "compile", b))
        comp["kernel_profile"] = {
            "source": "CUDA kernels (torch.profiler)",
            "steps": 1,
            "kernels": [{"name": "flash_fwd_kernel", "ms": 9.0, "calls": 12}, {"name": GEMM, "ms": 5.0, "calls": 48}],
        }
        store.write_atomic(store.record_path(d / "results", "compile", 4), comp)
    return compare.load_all(["h100", "h200"], tmp_path)


@pytest.mark.parametrize("fp8_over_compile, verdict", [(0.8, "confirmed"), (1.25, "contradicted")])
def test_the_rule_table_judges_each_hopper_rule_and_flips_with_the_fp8_records(tmp_path, fp8_over_compile, verdict):
    t = rules.table(_hopper_pair(tmp_path, fp8_over_compile))
    assert t["gpu"].tolist() == ["h100"] * 3 + ["h200"] * 3 and set(t["architecture"]) == {"Hopper"}
    assert t["rule"].tolist() == ["use_fp8 = True", "tile_size = 256", "use_flash_attention_3 = True"] * 2
    by_rule = {rule: rows for rule, rows in t.groupby("rule")}
    fp8 = by_rule["use_fp8 = True"]
    assert fp8["verdict"].tolist() == [verdict] * 2
    for m in fp8["measured"]:  # the figure with its basis: the stages and every batch size
        assert m.startswith("FP8") and "against torch.compile, tokens/s B=2: " in m
        assert f"FP8 linear layers (hand-written) over torch.compile: {1 / fp8_over_compile:.2f}× at B=2, 4" in m
    tile = by_rule["tile_size = 256"]
    assert tile["verdict"].tolist() == ["not measured"] * 2
    assert all(
        "cuBLAS picks its own tiles" in m and f"{GEMM}, a 256×128 tile by its name" in m for m in tile["measured"]
    )
    fa3 = by_rule["use_flash_attention_3 = True"]
    assert fa3["verdict"].tolist() == ["not measured"] * 2 and all("no FlashAttention-3" in m for m in fa3["measured"])


def test_the_rule_table_names_the_rules_no_compared_gpu_runs_under(tmp_path):
    reps = _hopper_pair(tmp_path, 0.8)
    table, note = rules.html_table(reps).split('<p class="note">')
    assert "<code>use_flash_attention_3 = True</code>" in table  # breaks between tokens only
    source = claim_params.load_claims()["sources"][claim_params.load_rules()["source"]]  # the write-up, by what it is
    assert html.escape(source) in note and "Ampere" in note and "make report GPU=a100" in note and "Hopper" not in note
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5)  # a GPU of no chip family: no architecture covers it
    row = rules.table(compare.load_all(["h100", "gpua"], tmp_path)).iloc[-1]
    assert (row["gpu"], row["verdict"]) == ("gpua", "not applicable") and "no architecture" in row["measured"]


def test_a_claim_about_hardware_no_compared_gpu_is_not_applicable_with_its_command(tmp_path):
    """The comparison called the A100 claims 'not measured' where each Hopper report calls them 'not applicable'."""
    reps = _hopper_pair(tmp_path, 0.8)
    html = compare_view.claims_html(reps)
    rows = {r.split("<br>")[0]: r for r in html.split("<tr>")[2:]}
    a100 = next(r for c, r in rows.items() if "up to 3x" in c)
    assert 'colspan="2"' in a100 and "make report GPU=a100 measures it" in a100 and ">not applicable<" in a100
    assert "the claim speaks about Ampere GPUs" in a100  # a family is a name: it read "ampere GPUs"
    own = next(r for r in reps["h100"].decided["claims"]["verdicts"] if "up to 3x" in r["claim"])
    assert own["verdict"] == "not applicable"
    fp8 = next(r for c, r in rows.items() if "use FP8" in c)
    assert fp8.count(">confirmed<") == 2  # judged on each Hopper report
    assert "(get_optimal_config: use_fp8 True)" in fp8  # breaks between tokens (claims_view.breakable)


def test_a_rule_judged_by_a_claim_that_does_not_exist_is_a_config_error(tmp_path):
    text = (config.PARAMS_DIR / "rules.yaml").read_text()
    (tmp_path / "rules.yaml").write_text(text.replace("claim: fp8-hopper", "claim: fp8-hoper"))
    with pytest.raises(config.ConfigError, match="Hopper use_fp8: no claim 'fp8-hoper' in claims.yaml"):
        claim_params.load_rules(tmp_path / "rules.yaml")
    (tmp_path / "rules.yaml").write_text(text.replace('source: "002"', 'source: "007"'))
    with pytest.raises(config.ConfigError, match="source '007' is none of claims.yaml's sources"):
        claim_params.load_rules(tmp_path / "rules.yaml")


def test_the_pdf_hides_a_check_column_only_in_a_reports_own_claims_table(tmp_path):
    """A report's claims table keeps its check column in the HTML alone; the print stylesheet hid the second
    column of every claims-styled table, which in the comparison is the first GPU's (claims) and the GPU's name
    (rules), so the comparison's PDF showed one GPU's verdicts with no GPU named."""
    import re

    from lib.report import export

    hiding = re.findall(r"([^{}]*nth-child\(2\)[^{}]*)\{\s*display:\s*none", export.CSS.read_text())
    assert hiding, "the print rule that drops the check column is gone"
    reps = _hopper_pair(tmp_path, 0.8)
    for table_html in (compare_view.claims_html(reps), rules.html_table(reps)):
        classes = set(re.search(r'<table class="([^"]+)"', table_html).group(1).split())
        for selector in (s.strip() for rule in hiding for s in rule.split(",")):
            needed = set(re.findall(r"\.([\w-]+)", selector.split()[0]))
            assert not needed <= classes, f"{selector} hides a column of the comparison's {classes} table"


def test_code_commits_that_differ_are_flagged_and_keep_the_hardware_out(tmp_path):
    """A comparison said 'no version skew ... same measurement method' and called every difference the hardware's
    between an H100 report of one commit and a two-H200 report of another. The skew table names the commits, and the
    attribution no longer claims the hardware where the code differs."""
    a, b = _fake_report(tmp_path, "gpua", "2.11.0", 1.5), _fake_report(tmp_path, "gpub", "2.11.0", 1.5, gain=1.1)
    _add_repeat(a, 0.02)
    _add_repeat(b, 0.01)
    _add_sitting(tmp_path, "gpua", 1.01)  # the spread between machines measured: 1 % (an earlier sitting of each)
    _add_sitting(tmp_path, "gpub", 0.99)
    for d, commit in ((a, "a" * 40), (b, "a" * 40)):
        (d / "run.json").write_text(json.dumps({"code": {"commit": commit}}))
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    assert "differences are the hardware's" in compare_view.attribution_html(reps)
    (b / "run.json").write_text(json.dumps({"code": {"commit": "b" * 40}}))
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    t = compare.skew(reps).set_index("component")
    assert t.loc[compare.CODE, "differs"] and t.loc[compare.CODE, "gpub"] == "bbbbbbb"
    text = compare_view.attribution_html(reps)
    assert "the hardware's" not in text and "Different code commits" in text
    assert "No version skew" not in compare_view.skew_html(reps)


def test_the_comparisons_word_for_each_lever_is_each_reports_own_decision(tmp_path):
    """compare-h100-h200 said every lever "is decided alike" and showed TF32, neutral on both GPUs, as "adopted": the
    comparison re-derived adoption with a rule of its own (compare.lever_decision). It now repeats each report's
    decisions (decisions.json, computed once by lib/results/decisions.py), and a lever decided differently is named."""
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5)
    _fake_report(tmp_path, "gpub", "2.11.0", 1.5)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    t = compare.decisions_table(reps)
    for n, rep in reps.items():
        own = {r["stage"]: (r["decision"], r["reason"] or "") for r in rep.decided["levers"]}
        for row in t.to_dict("records"):
            assert (row[f"{n} decision"], row[f"{n} why"]) == own.get(row["key"], (None, "not measured")), row
    assert not t["differs"].any() and "decided alike" in compare_view.decisions_html(reps)
    # gpub's report decides one lever otherwise: the comparison says so, in gpub's own words and label
    key = next(r["stage"] for r in reps["gpua"].decided["levers"] if r["decision"] != decisions.SKIP)
    flipped = [
        {**r, "decision": decisions.SKIP, "reason": "slower"} if r["stage"] == key else r
        for r in reps["gpub"].decided["levers"]
    ]
    reps["gpub"].__dict__["decided"] = {**reps["gpub"].decided, "levers": flipped}
    reps.__dict__.pop("decided")  # the comparison is judged once from its reports' decisions: judge it again
    t = compare.decisions_table(reps)
    row = t[t["key"] == key].iloc[0]
    assert row["differs"] and row["gpub decision"] == decisions.SKIP and row["gpub why"] == "slower"
    text = compare_view.decisions_html(reps)
    assert f"decide differently on {stages.get(key).title}" in text and ">skip</strong>" in text


def test_a_lever_the_gpus_decide_differently_sets_their_parity_tests_side_by_side():
    """Issue 30: where the GPUs still disagree, say why with numbers. The H100 adopted the FP8 lm_head (its test
    held) and the H200 kept it out (its test stopped undecided); the comparison named only that they differ."""
    held = {"ok": True, "verdict": "holds", "seeds": [0, 1, 2, 3], "looks": [4, 8], "batch_size": 128, "steps": 64}
    stopped = {**held, "ok": False, "verdict": "undecided", "futile": "trend", "batch_size": 192, "steps": 43}
    text = compare_view.parity_contrast("fp8_head", {"h100": held, "h200": stopped})
    assert "h100 at B=128, 64 steps: holds over 4 seeds" in text
    assert "h200 at B=192, 43 steps: undecided, stopped by its trend after 4 of 8 seeds" in text
    assert "not shown to be the hardware's" in text  # B=128 and 64 steps against B=192 and 43
    assert compare_view.parity_contrast("fp8_head", {"h100": held}) == ""  # the cell's 'adopted' says it all
    assert "h200 at B=192" in compare_view.parity_contrast("fp8_head", {"h200": stopped})


def test_a_lever_one_gpu_did_not_time_says_not_measured_in_the_lever_table(tmp_path):
    """The reviewer of compare-h100-h200 (3c6c130): the FP8 classifier's row had an empty H200 cell (reports/h200
    predated the stage), which reads like a rendering fault. Real records: the committed H100 folder, and the committed
    H200 folder as a report that never measured the FP8 classifier (its stage left out of its params)."""
    from lib.core import paths

    (tmp_path / "h100").symlink_to(paths.ROOT / "reports" / "h100")
    h200 = paths.ROOT / "reports" / "h200"
    (tmp_path / "h200").mkdir()
    for name in ("environment.json", "results", "run.json"):
        (tmp_path / "h200" / name).symlink_to(h200 / name)
    raw = read_json(h200 / "params.json")
    raw["stages"] = [k for k in raw["stages"] if k != "fp8_classifier"]
    (tmp_path / "h200" / "params.json").write_text(json.dumps(raw))
    reps = compare.load_all(["h100", "h200"], tmp_path)
    row = next(r for r in compare_view.lever_html(reps).split("<tr>") if r.startswith("<td>FP8 classifier (fused)"))
    assert row.count("<td>") == 4 and compare_view.NOT_MEASURED_CELL in row, row
    assert row.count("×") == 1 and "×" in row.split("</td><td>")[2], row


def _git_history(root: Path) -> list[str]:
    """A repository of four commits: the first, then one each changing a README, lib/report and lib/train."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()

    root.mkdir()
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    commits = []
    for i, path in enumerate(["README.md", "README.md", "lib/report/view.py", "lib/train/model.py"]):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(f"# {i}\n")
        git("add", "-A")
        git("commit", "-qm", f"c{i}")
        commits.append(git("rev-parse", "HEAD"))
    return commits


def test_different_commits_say_what_git_changed_in_the_measuring_code(tmp_path, monkeypatch):
    """reports/h100 (9337cdf) and reports/h200 (247293e) differ in commit, and the comparison said only that 'a lever
    or the harness may have changed'. It now says what git changed between them: nothing of the measuring code (the
    commits are then no second variable, and a difference beyond noise is the hardware's), files outside the step's
    own code, or files that build and time the step, named; where git cannot tell, it says so."""
    first, readme, report, train = _git_history(tmp_path / "repo")
    monkeypatch.setattr(compare, "ROOT", tmp_path / "repo")
    a, b = _fake_report(tmp_path, "gpua", "2.11.0", 1.5), _fake_report(tmp_path, "gpub", "2.11.0", 1.5, gain=1.1)
    _add_repeat(a, 0.02)
    _add_repeat(b, 0.01)
    _add_sitting(tmp_path, "gpua", 1.01)
    _add_sitting(tmp_path, "gpub", 0.99)
    (a / "run.json").write_text(json.dumps({"code": {"commit": first}}))

    def compared(commit):
        (b / "run.json").write_text(json.dumps({"code": {"commit": commit}}))
        reps = compare.load_all(["gpua", "gpub"], tmp_path)
        return compare_view.skew_html(reps), compare_view.attribution_html(reps)

    skew_text, attribution = compared(readme)
    assert "git changes no file of the measuring code" in skew_text and "differences are the hardware's" in attribution
    skew_text, attribution = compared(report)
    assert "git changes 1 file of the measuring code (lib, params), none in lib/train or lib/measure" in skew_text
    assert "the hardware's" not in attribution
    skew_text, attribution = compared(train)
    assert "git changes 2 files" in skew_text and "1 of them in lib/train or lib/measure" in skew_text
    assert "(lib/train/model.py)" in skew_text and "the hardware's" not in attribution
    skew_text, attribution = compared("f" * 40)
    assert "which git cannot compare here" in skew_text and "the hardware's" not in attribution


def _add_recipe(d: Path, scale: float) -> None:
    """The recipe at GPT-2's batch and the canonical trainer beside it, two processes each (0.2 % apart), `scale`
    times as fast as the first GPU's."""
    params = Params.read(d / "params.json")
    best = loader.load(d).decided["recipe"]["stage"]  # the report's own recipe: the comparison reads its decisions
    for role, stage, tps in (("recommended", best, 540.0), ("baseline", "fused", 480.0)):
        for k, spread in enumerate((0.0, 0.002)):
            rec = make_record(params, stage, 4, [1.0] * 5, [3.0] * 5)
            rec.update(variant=f"recipe: {role}", micro_steps=2, tokens_per_s=tps * scale * (1 + spread))
            rec["fingerprint"] = f"{d.name}-recipe-{role}-r{k}"
            store.write_atomic(d / "results" / "recipe" / f"{role}__{stage}__b4__r{k}.json", rec)


def test_the_recipe_at_gpt2s_batch_is_compared_with_the_canonical_trainer_on_each_gpu(tmp_path):
    """The reviewer of compare-h100-h200: the comparison never set the configurations a team would train with side
    by side (H200 over H100 is 1.037× by the recipes, 1.084× by the canonical trainer). Each GPU's recipe and the
    canonical trainer, both against the first GPU's; a GPU without a recipe says not measured."""
    for name, scale in (("gpua", 1.0), ("gpub", 1.1)):
        _add_recipe(d := _fake_report(tmp_path, name, "2.11.0", 1.5), scale)
        _add_repeat(d, 0.02)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    t = compare_summary.recipe_table(reps).set_index("gpu")
    assert t.loc["gpub", "ratio"] == pytest.approx(540 / 480)
    assert t.loc["gpub", "recipe vs first"] == pytest.approx(1.1) and t.loc["gpub", "plain vs first"] == pytest.approx(
        1.1
    )
    html = compare_summary.recipe_html(reps)
    assert "4 × 2 × 1 GPU" in html and "1.125×" in html and "1.100×" in html and "GPU-hours" in html
    # the price ratio at which the faster GPU stops paying: its tokens per GPU-hour over the first's
    assert "gpub costs less per token while its price per GPU-hour is under 1.100× gpua's" in html
    # and the comparison's first lines say it, with whether the GPUs decide alike
    title = compare_summary.title_md(reps)
    assert (
        "**gpub against gpua**, each trained as GPT-2 is: 1.100× by its own recipe, 4 × 2 × 1 GPU against 4 × 2 × 1 GPU"
        in title
    )
    assert "recommended recipe" not in title  # the H100's recipe (B=128 × 4) is not its recommendation (B=96)
    assert (
        "both beyond the 2.0 % measured, the spread between machines of GPU gpua and GPU gpub not measured, so not "
        "shown to be the hardware's (GPU gpua: one sitting; GPU gpub: one sitting)"
    ) in title
    assert "1.100× by the canonical trainer" in title and "**Decisions:**" in title
    for f in (tmp_path / "gpub" / "results" / "recipe").iterdir():
        f.unlink()
    html = compare_summary.recipe_html(compare.load_all(["gpua", "gpub"], tmp_path))
    assert compare_view.NOT_MEASURED_CELL in html


def test_the_environment_table_says_what_its_measurement_method_is():
    """The comparison's environment table printed 'measurement method 2' and never said what 2 is."""
    assert set(record.METHODS) >= {1, record.METHOD}


def test_the_comparison_lays_out_each_gpus_lead_in_parts_from_its_decisions(tmp_path):
    """Each GPU's lead over its canonical trainer, in the parts its decisions.json gives, side by side."""
    for name in ("gpua", "gpub"):
        _fake_report(tmp_path, name, "2.11.0", 1.5)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    for rep in reps.values():
        rep.__dict__["decided"] = {
            **rep.decided,
            "recipe": {**(rep.decided["recipe"] or {}), "ratio": 1.1},
            "beyond_canonical": {
                "canonical_stage": "compile",
                "levers": [{"stage": "loss_only", "title": "Loss-only forward", "ratio": 1.0732, "batch": 4}],
                "rest": 1.1 / 1.0732,
            },
        }
    text = compare_summary.lead_html(reps)
    assert text.count("1.073×") == 2 and text.count("1.100×") == 2 and "Loss-only forward" in text


def test_the_price_break_even_is_the_ratio_of_tokens_a_gpu_hour_and_names_the_cheaper_at_stated_prices():
    from lib.results.recipe_decision import price_break_even

    h100 = {"tokens_per_s": 536_591, "price_per_gpu_hour": 1.49, "cost": 7.71}
    h200 = {"tokens_per_s": 556_889, "price_per_gpu_hour": 3.50, "cost": 17.46}
    be = price_break_even(h100, h200)
    assert be["ratio"] == pytest.approx(556_889 / 536_591) and be["prices"] == pytest.approx(3.50 / 1.49)
    assert be["cheaper"] == "first"
    assert price_break_even(h100, {**h200, "price_per_gpu_hour": None, "cost": None})["prices"] is None
    assert price_break_even(h100, {"tokens_per_s": None}) is None


def test_a_host_of_several_gpus_is_compared_as_it_trains_on_all_of_them_too():
    """compare-h100-h100-x4 showed the four-GPU host by its one-GPU recipe alone (128 × 4 × 1 GPU) where its
    recommended.json trains on all four: the host's row follows, with its hours, GPU-hours and cost."""
    from lib.core.paths import ROOT

    reps = compare.load_all(["h100", "h100-x4"], ROOT / "reports")
    host = reps["h100-x4"].decided["recipe"]["host"]
    html = compare_summary.recipe_html(reps)
    row = html.split("<td>h100-x4, all GPUs</td>")[1].split("</tr>")[0]
    assert recipe_row.recipe_name(host) in row and "128 × 1 × 4 GPUs" in row
    assert fmt.tok(host["tokens_per_s"]) in row and fmt.money(host["cost"]) in row
    # its memory as page 1 gives it: a GPU's sampled peak, else n/a (the row had read "n/a a GPU")
    assert f"<td>{recipe_row.host_memory_cell(host)}</td>" in row and "n/a a GPU" not in row
    assert "h100, all GPUs" not in html  # a one-GPU report has no such row
