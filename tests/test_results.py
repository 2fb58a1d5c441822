"""lib/results/: statistics of a record, atomic writes and the comparison table."""

from __future__ import annotations

import copy
import json
import math
import statistics

import numpy as np
import pytest
from conftest import make_record

from lib.core import record, stages
from lib.core.params import Params
from lib.results import decide, stats, store

ORDER = ["fp32", "tf32", "bf16"]


def test_fill_timing_statistics_of_a_known_list():
    rec = {}
    times = [10.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0]  # 1..10, shuffled
    stats.fill_timing(rec, times, tokens_per_step=128)
    assert rec["step_ms"] == times
    assert rec["median_ms"] == pytest.approx(5.5)
    assert rec["p10_ms"] == pytest.approx(1.9)  # linear interpolation, as numpy.percentile
    assert rec["p90_ms"] == pytest.approx(9.1)
    assert rec["mean_ms"] == pytest.approx(5.5)
    assert rec["cv"] == pytest.approx(statistics.stdev(times) / statistics.mean(times))  # sample std
    assert rec["tokens_per_step"] == 128
    assert rec["tokens_per_s"] == pytest.approx(128 / 5.5e-3)


def test_fill_timing_of_one_step_has_zero_cv():
    rec = {}
    stats.fill_timing(rec, [4.0], 10)
    assert rec["cv"] == 0.0 and rec["median_ms"] == rec["p10_ms"] == rec["p90_ms"] == 4.0


def test_fill_timing_values_are_plain_floats():
    rec = {}
    stats.fill_timing(rec, np.array([1.0, 2.0, 3.0], dtype=np.float32), 8)
    json.dumps(rec)  # no numpy scalars left
    assert all(type(v) is float for v in rec["step_ms"])


def test_fill_loss_is_the_mean_of_the_last_window():
    rec = {"status": "ok", "reason": None, "losses": [9.0, 8.0, 3.0, 2.0, 1.0]}
    stats.fill_loss(rec, 3)
    assert rec["final_loss"] == pytest.approx(2.0)
    assert rec["status"] == "ok" and rec["reason"] is None


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_fill_loss_marks_a_non_finite_loss_as_diverged(bad):
    rec = {"status": "ok", "reason": None, "losses": [3.0, bad, 2.0, 2.0]}
    stats.fill_loss(rec, 2)
    assert rec["status"] == "diverged"
    assert "NaN" in rec["reason"]


def test_fill_loss_without_losses_changes_nothing():
    rec = {"status": "oom", "losses": []}
    stats.fill_loss(rec, 3)
    assert rec == {"status": "oom", "losses": []}


def test_fill_mfu_with_and_without_a_peak():
    rec = {"tokens_per_s": 1e6}
    stats.fill_mfu(rec, 2_000_000, {"bf16": 4.0}, "bf16")
    assert rec["achieved_tflops"] == pytest.approx(2.0) and rec["mfu"] == pytest.approx(0.5)
    stats.fill_mfu(rec, 2_000_000, None, "bf16")
    assert rec["peak_tflops"] is None and rec["mfu"] is None


def test_write_atomic_leaves_only_the_parsable_file(tmp_path):
    path = tmp_path / "sub" / "fp32__b2.json"
    rec = {"a": 1, "n": np.int64(3), "x": np.float32(0.5)}
    store.write_atomic(path, rec)
    store.write_atomic(path, {**rec, "a": 2})  # replacing an existing record
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert json.loads(path.read_text()) == {"a": 2, "n": 3, "x": 0.5}


def test_write_atomic_that_fails_keeps_the_old_record(tmp_path):
    path = tmp_path / "r.json"
    store.write_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        store.write_atomic(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}


def test_record_path_names_stage_and_batch(tmp_path):
    assert store.record_path(tmp_path, "vocab", 16) == tmp_path / "vocab__b16.json"


def test_base_record_describes_the_configuration(cpu_params):
    rec = store.base_record(cpu_params, stages.get("bf16"), 4)
    assert rec["schema_version"] == record.SCHEMA_VERSION
    assert (rec["profile"], rec["stage"], rec["batch_size"], rec["status"]) == ("cpu", "bf16", 4, "ok")
    assert rec["peak_precision"] == "bf16"
    assert rec["timed_steps"] == cpu_params.run.timed_steps


def test_load_records_reads_every_record(tmp_path, cpu_params):
    for b in (2, 4):
        store.write_atomic(tmp_path / f"fp32__b{b}.json", store.base_record(cpu_params, stages.get("fp32"), b))
    assert [r["batch_size"] for r in store.load_records(tmp_path)] == [2, 4]


def test_load_records_skips_a_record_moved_aside_after_the_listing(tmp_path, cpu_params, monkeypatch):
    """Another node of a rehearsal may supersede a record between this node's listing and its read."""
    for b in (2, 4):
        store.write_atomic(tmp_path / f"fp32__b{b}.json", store.base_record(cpu_params, stages.get("fp32"), b))
    read = store._read

    def read_after_the_other_node_moved_one(path):
        if (tmp_path / "fp32__b4.json").exists():
            store.supersede(tmp_path / "fp32__b4.json")
        return read(path)

    monkeypatch.setattr(store, "_read", read_after_the_other_node_moved_one)
    assert [r["batch_size"] for r in store.load_records(tmp_path)] == [2]


@pytest.mark.parametrize("version", [0, record.SCHEMA_VERSION + 1, None])
def test_load_records_refuses_another_schema_version(tmp_path, cpu_params, version):
    rec = store.base_record(cpu_params, stages.get("fp32"), 2)
    rec["schema_version"] = version
    store.write_atomic(tmp_path / "fp32__b2.json", rec)
    with pytest.raises(ValueError, match="schema version"):
        store.load_records(tmp_path)


# ---------------------------------------------------------------- table()


def steps(ms):
    return [ms] * 5


LOSSES = [5.0, 4.0, 3.0, 2.0, 2.0]


@pytest.fixture
def records(cpu_params):
    p = cpu_params
    return [
        make_record(p, "bf16", 2, steps(2.0), [x + 0.5 for x in LOSSES]),
        make_record(p, "fp32", 4, steps(40.0), LOSSES),
        make_record(p, "tf32", 2, steps(5.0), [x + 0.05 for x in LOSSES]),
        make_record(p, "fp32", 2, steps(10.0), LOSSES),
        make_record(p, "tf32", 4, steps(10.0), LOSSES),
        make_record(p, "bf16", 4, status="oom", reason="out of memory: test"),
    ]


def row(df, stage, batch):
    rows = df[(df["stage"] == stage) & (df["batch_size"] == batch)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_table_has_one_row_per_record_in_stage_then_batch_order(records):
    df = decide.table(records, ORDER)
    assert list(zip(df["stage"], df["batch_size"])) == [
        ("fp32", 2),
        ("fp32", 4),
        ("tf32", 2),
        ("tf32", 4),
        ("bf16", 2),
        ("bf16", 4),
    ]


def test_table_speedup_vs_baseline_per_batch(records):
    df = decide.table(records, ORDER)
    assert row(df, "fp32", 2)["speedup_vs_baseline"] == pytest.approx(1.0)
    assert row(df, "tf32", 2)["speedup_vs_baseline"] == pytest.approx(10.0 / 5.0)
    assert row(df, "tf32", 4)["speedup_vs_baseline"] == pytest.approx(40.0 / 10.0)
    assert row(df, "bf16", 2)["speedup_vs_baseline"] == pytest.approx(10.0 / 2.0)


def test_table_speedup_vs_previous_stage_per_batch(records):
    df = decide.table(records, ORDER)
    assert math.isnan(row(df, "fp32", 2)["speedup_vs_previous"])
    assert row(df, "tf32", 4)["speedup_vs_previous"] == pytest.approx(40.0 / 10.0)
    assert row(df, "bf16", 2)["speedup_vs_previous"] == pytest.approx(5.0 / 2.0)


def test_table_loss_delta_and_tolerance_per_batch(records):
    df = decide.table(records, ORDER, tolerance=0.1)
    assert math.isnan(row(df, "fp32", 2)["loss_delta"])  # the reference is not compared with itself
    assert row(df, "tf32", 2)["loss_delta"] == pytest.approx(0.05)
    assert row(df, "bf16", 2)["loss_delta"] == pytest.approx(0.5)
    assert row(df, "tf32", 2)["loss_within_tolerance"] is True
    assert row(df, "bf16", 2)["loss_within_tolerance"] is False
    assert "loss_within_tolerance" not in decide.table(records, ORDER).columns


def test_table_oom_row_has_no_speedups_and_keeps_its_reason(records):
    df = decide.table(records, ORDER, tolerance=0.1)
    oom = row(df, "bf16", 4)
    assert oom["status"] == "oom" and oom["reason"] == "out of memory: test"
    assert math.isnan(oom["speedup_vs_baseline"]) and math.isnan(oom["speedup_vs_previous"])
    assert math.isnan(oom["loss_delta"]) and oom["loss_within_tolerance"] is None


def test_a_lever_is_judged_only_against_the_stage_right_before_it(cpu_params):
    """If TF32 ran out of memory at B=2, BF16 has no 'previous stage' there: crediting it against
    FP32 would give it TF32's speed-up too."""
    p = cpu_params
    recs = [
        make_record(p, "fp32", 2, steps(10.0), LOSSES),
        make_record(p, "tf32", 2, status="oom", reason="out of memory"),
        make_record(p, "bf16", 2, steps(4.0), LOSSES),
    ]
    df = decide.table(recs, ORDER)
    assert np.isnan(row(df, "bf16", 2)["speedup_vs_previous"]) and row(df, "bf16", 2)["previous_stage"] == "tf32"
    assert row(df, "bf16", 2)["speedup_vs_baseline"] == pytest.approx(10.0 / 4.0)


def test_table_without_a_baseline_at_a_batch_has_nan_comparisons(cpu_params):
    p = cpu_params
    recs = [
        make_record(p, "fp32", 2, status="oom", reason="out of memory"),
        make_record(p, "tf32", 2, steps(5.0), LOSSES),
    ]
    df = decide.table(recs, ORDER, tolerance=0.1)
    tf32 = row(df, "tf32", 2)
    assert math.isnan(tf32["speedup_vs_baseline"]) and math.isnan(tf32["loss_delta"])


def test_write_atomic_that_fails_leaves_no_temporary_file(tmp_path):
    with pytest.raises(TypeError):
        store.write_atomic(tmp_path / "r.json", {"a": object()})
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- fingerprint of a configuration

ENV = {"device": {"backend": "cpu", "name": "x"}, "torch": "2.0", "python": "3.12"}


def fp(params, env=ENV, stage="fp32", batch=2):
    return store.fingerprint(params, env, stages.get(stage), batch)


def test_fingerprint_is_stable(cpu_params):
    assert fp(cpu_params) == fp(Params.from_dict(json.loads(json.dumps(cpu_params, default=store.jsonable))))


def test_fingerprint_changes_with_what_the_measurement_depends_on(cpu_params):
    changed_seed = copy.deepcopy(cpu_params)
    changed_seed.run.seed += 1
    changed_model = copy.deepcopy(cpu_params)
    changed_model.model.n_layer += 1
    base = fp(cpu_params)
    assert fp(changed_seed) != base
    assert fp(changed_model) != base
    assert fp(cpu_params, stage="tf32") != base
    assert fp(cpu_params, batch=4) != base
    assert fp(cpu_params, env={**ENV, "torch": "2.1"}) != base
    assert fp(cpu_params, env={**ENV, "device": {"backend": "cpu", "name": "y"}}) != base


def test_fingerprint_ignores_report_settings(cpu_params):
    other = copy.deepcopy(cpu_params)
    other.run.loss_tolerance = 1.0
    other.run.batch_sizes = [2, 64]
    assert fp(other) == fp(cpu_params)


def test_fingerprint_covers_a_stages_switches_not_its_prose(cpu_params):
    """Fixing a stage's title or its code text must not re-measure it; a switch must."""
    import dataclasses

    stage = stages.get("vocab")
    base = store.fingerprint(cpu_params, ENV, stage, 2)
    reworded = dataclasses.replace(stage, title="Another title", lever="other words", switch="# other code")
    assert store.fingerprint(cpu_params, ENV, reworded, 2) == base
    for switch, value in (("padded_vocab", False), ("attention", "naive"), ("compile", True), ("devices", "all")):
        assert store.fingerprint(cpu_params, ENV, dataclasses.replace(stage, **{switch: value}), 2) != base, switch


def test_a_stage_identity_holds_only_the_switches_it_sets():
    """A new kind of switch (a field with a default) must not change any existing fingerprint."""
    assert stages.get("fp32").identity() == {"key": "fp32", "peak": "fp32"}
    assert stages.get("vocab").identity() == {
        "key": "vocab",
        "peak": "bf16",
        "tf32": True,
        "autocast": "bfloat16",
        "attention": "sdpa",
        "padded_vocab": True,
    }


def test_a_median_of_processes_is_printed_beside_the_spread_of_those_processes():
    """reports/h100-x4's matrix printed TF32's median over two processes (186.7 ms) beside the first process's own
    p10-p90 (186.8-186.9): the second process ran faster. The p10-p90 of a configuration timed in several processes is
    now of all their steps, so the median printed lies within it."""
    from conftest import tiny_params

    params = tiny_params(["fp32", "tf32"])
    first = make_record(params, "tf32", 2, [186.8, 186.85, 186.9, 186.85, 186.8], [3.0] * 6)
    second = {**make_record(params, "tf32", 2, [185.9, 186.0, 186.1, 186.0, 186.05], [3.0] * 6), "variant": "repeat"}
    base = make_record(params, "fp32", 2, [400.0] * 5, [3.0] * 6)
    recs = [base, first, second]
    df = decide.table([base, first], params.stages, 0.05, 0.0, decide.throughputs(recs), decide.step_times(recs))
    row = df[df["stage"] == "tf32"].iloc[0]
    assert row["p10_ms"] <= row["median_ms"] <= row["p90_ms"] and row["p10_ms"] < 186.8
    # the CV beside them is of the same pooled steps, not the first process's alone (a reviewer of reports/h200)
    pooled = np.array(first["step_ms"] + second["step_ms"])
    assert row["cv"] == pytest.approx(pooled.std(ddof=1) / pooled.mean()) and row["cv"] > first["cv"]
    alone = decide.table([base, first], params.stages, 0.05, 0.0, decide.throughputs([base, first]))
    assert alone[alone["stage"] == "tf32"].iloc[0]["p10_ms"] == first["p10_ms"]  # one process: its own spread
