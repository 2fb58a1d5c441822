"""`make compare`: one report across GPUs from existing report folders, with version skew
flagged, and a clear refusal when a named report is missing or of another schema."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import describe_proc, run_cli
from lib import compare, config, results, stages


def _fake_report(root: Path, name: str, torch: str, speed: float, schema=results.SCHEMA_VERSION):
    """A synthetic report folder: the cpu workload's params, a CUDA-like environment, and one
    record per stage at two batch sizes, each stage `speed` times faster than the one before."""
    params = config.load("cpu", [2, 4])
    params["name"], params["backend"] = name, "cuda"
    params["stages"] = [s for s in params["stages"] if s != "ddp"]  # single-GPU stages only
    d = root / name
    (d / "results").mkdir(parents=True)
    (d / "params.json").write_text(json.dumps(params))
    env = {"device": {"backend": "cuda", "name": f"GPU {name}"}, "torch": torch, "cuda": "13.0",
           "cublas": "13.1.0", "cudnn": 91900, "driver": "580", "python": "3.12"}
    (d / "environment.json").write_text(json.dumps(env))
    for i, key in enumerate(params["stages"]):
        for b in (2, 4):
            rec = results.base_record(params, stages.get(key), b)
            results.fill_timing(rec, [100.0 / speed ** i * b] * 5, b * 64)
            rec.update(losses=[3.0] * 5, mem_tensors_bytes=1e9, mem_allocator_bytes=2e9, mem_device_bytes=3e9,
                       mfu=None, schema_version=schema)
            results.fill_loss(rec, 3)
            results.write_atomic(results.record_path(d / "results", key, b), rec)
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
    assert "<script src=\"http" not in html


def test_the_stage_table_puts_each_gpu_against_its_own_fp32(tmp_path):
    _fake_report(tmp_path, "gpua", "2.11.0", 1.5)
    _fake_report(tmp_path, "gpub", "2.11.0", 2.0)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    t = compare.stage_table(reps)
    last, n = t.iloc[-2], len(reps["gpua"].stage_order) - 1  # n levers after the baseline
    assert last["gpua × own FP32"] == pytest.approx(1.5 ** n)
    assert last["gpub × own FP32"] == pytest.approx(2.0 ** n)
    rec = t.iloc[-1]  # each report's recommended configuration: here its fastest, last stage
    assert rec["stage"] == compare.RECOMMENDED and rec["gpub stage"] == last["stage"]
    assert rec["gpub tok/s"] == pytest.approx(last["gpub tok/s"])
    assert not compare.skew(reps)["differs"].any()
    effects = compare.lever_effects(reps)
    # Each lever against the stage it is added to: the fake speeds grow per registry position.
    order = reps["gpub"].stage_order
    expected = [2.0 ** (order.index(k) - order.index(results.previous_stage(k))) for k in order[1:]]
    assert effects["gpub"].dropna().tolist() == pytest.approx(expected)


def _add_ddp(d: Path, world: int | None):
    """A DDP row: not applicable (one GPU) when `world` is None, else `world` GPUs at B=8."""
    params = json.loads((d / "params.json").read_text())
    params["stages"].append("ddp")
    (d / "params.json").write_text(json.dumps(params))
    rec = results.base_record(params, stages.get("ddp"), 8)
    if world is None:
        rec.update(status="not_applicable", reason="one GPU")
    else:
        results.fill_timing(rec, [50.0] * 5, 8 * 64 * world)
        rec.update(world_size=world, single_gpu_tokens_per_s=rec["tokens_per_s"] / 1.8, scaling_efficiency=0.9,
                   losses=[3.0] * 5,
                   mem_allocator_bytes=2e9)
    results.write_atomic(results.record_path(d / "results", "ddp", 8), rec)


def test_ddp_is_shown_per_gpu_count_and_against_one_gpu(tmp_path):
    _add_ddp(_fake_report(tmp_path, "gpua", "2.11.0", 1.5), None)
    _add_ddp(_fake_report(tmp_path, "gpub", "2.11.0", 2.0), 2)
    reps = compare.load_all(["gpua", "gpub"], tmp_path)
    html = compare.stage_html(reps)
    assert "not applicable" in html and "B=8 × 2 GPUs" in html and "B=2.0" not in html
    effects = compare.lever_effects(reps)
    ddp_row = effects.loc["DDP across the host's GPUs (over the same job on one GPU)"]
    assert ddp_row["gpub"] == pytest.approx(1.8) and ddp_row.isna()["gpua"]


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
