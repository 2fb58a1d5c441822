"""The parity test (lib/parity.py): paired seeds, the test's own noise from reference-against-reference
pairs, an interval of the mean paired difference, and one rule that adopts, rejects or leaves undecided."""
from __future__ import annotations

import pandas as pd
import pytest
from conftest import make_record, tiny_params, write_report_dir

from lib import evidence, measure, parity, parity_view, report, results

EV = {"parity_seeds": 3, "parity_margin": 0.02, "parity_confidence": 0.9, "parity_power": 0.8}


def _run(params, stage, seed, replicate, held, final, batch=8):
    rec = make_record(params, stage, batch, [1.0] * 5, [final] * 10)
    rec.update(kind="parity", variant="parity", steps=10, held_out_loss=held, seed_offset=seed, replicate=replicate)
    return rec


def _test(params, lever_deltas, noise=0.001, stage="tf32"):
    """Three seeds: the reference twice (its second run `noise` apart), the lever `delta` from it per seed."""
    recs = []
    for seed, delta in enumerate(lever_deltas):
        base = 4.0 + 0.1 * seed  # seeds differ far more than the lever: pairing takes that out
        recs += [_run(params, "fp32", seed, 0, base, base), _run(params, "fp32", seed, 1, base + noise, base - noise),
                 _run(params, stage, seed, 0, base + delta, base + delta)]
    return recs


@pytest.mark.parametrize("deltas, verdict", [
    ((0.001, 0.002, 0.0), parity.HOLDS),       # a tight interval inside +-0.02
    ((0.10, 0.11, 0.09), parity.DIFFERS),      # wholly beyond the margin
    ((0.0, 0.04, 0.02), parity.UNDECIDED),     # the interval reaches past the margin
])
def test_the_verdict_flips_with_the_paired_differences(deltas, verdict):
    params = tiny_params(["fp32", "tf32"])
    check = parity.checks(_test(params, deltas), EV)["tf32"]
    assert check["verdict"] == verdict and check["ok"] is (verdict == parity.HOLDS)
    assert check["seeds"] == [0, 1, 2] and check["reference"] == "fp32"
    assert check["intervals"]["held_out"]["mean"] == pytest.approx(sum(deltas) / 3)


def test_a_test_too_noisy_to_detect_the_margin_is_undecided_even_when_its_mean_is_zero():
    """Reference runs 0.03 nats apart: the test could not see a 0.02 difference, so it cannot adopt."""
    params = tiny_params(["fp32", "tf32"])
    quiet, noisy = (parity.checks(_test(params, (0.0, 0.0, 0.0), noise=n), EV)["tf32"] for n in (0.001, 0.03))
    assert quiet["verdict"] == parity.HOLDS and quiet["detectable"] < 0.02
    assert noisy["verdict"] == parity.UNDECIDED and noisy["detectable"] > 0.02
    assert parity.seeds_needed(noisy) > 3 and parity_view.why_undecided(noisy).startswith("the test detects")


def test_one_seed_or_no_second_reference_run_cannot_decide():
    params = tiny_params(["fp32", "tf32"])
    one_seed = parity.checks(_test(params, (0.0,)), EV)["tf32"]
    assert one_seed["verdict"] == parity.UNDECIDED and "paired seed" in parity_view.why_undecided(one_seed)
    no_noise = [r for r in _test(params, (0.0, 0.0, 0.0)) if r["replicate"] == 0]
    check = parity.checks(no_noise, EV)["tf32"]
    assert check["verdict"] == parity.UNDECIDED and check["detectable"] is None


def test_interval_uses_students_t_and_never_less_spread_than_the_measured_noise():
    i = parity.interval([0.01, 0.02, 0.03], 0.9)
    assert i["sd"] == pytest.approx(0.01) and i["hi"] - i["mean"] == pytest.approx(2.919986 * 0.01 / 3 ** 0.5, rel=1e-5)
    assert parity.interval([0.01, 0.01, 0.01], 0.9, noise_sd=0.005)["sd"] == 0.005
    assert parity.detectable(0.005, 3, 0.9, 0.8) > parity.detectable(0.005, 10, 0.9, 0.8)


def test_only_a_stage_whose_parity_test_holds_is_recommended():
    params = tiny_params(["fp32", "tf32"])
    losses = [5.0 - 0.01 * i for i in range(6)]
    matrix = [make_record(params, "fp32", 8, [10.0] * 5, losses), make_record(params, "tf32", 8, [5.0] * 5, losses)]
    assert results.best_config(matrix, params)["stage"] == "tf32"  # no parity test yet: the 30-step gate alone
    for deltas, stage in (((0.001, 0.002, 0.0), "tf32"), ((0.0, 0.04, 0.02), "fp32"), ((0.1, 0.1, 0.1), "fp32")):
        assert results.best_config(matrix + _test(params, deltas), params)["stage"] == stage


def test_the_plan_pairs_each_seed_and_stays_within_the_passes(tmp_path):
    params = tiny_params(["fp32", "tf32"], batch_sizes=(4,))
    params["evidence"].update(parity_steps=10**6, parity_passes=2)
    losses = [5.0 - 0.01 * i for i in range(6)]
    recs = [make_record(params, "fp32", 4, [10.0] * 5, losses), make_record(params, "tf32", 4, [5.0] * 5, losses)]
    jobs = evidence.parity_jobs(params, write_report_dir(tmp_path / "cpu", params, recs))
    assert len(jobs) == 3 * params["evidence"]["parity_seeds"]
    by_seed = {}
    for j in jobs:
        by_seed.setdefault(j["seed_offset"], []).append(j)
    assert all({j["data_start"] for j in js} == {js[0]["data_start"]} for js in by_seed.values())  # a pair shares its data
    assert len({js[0]["data_start"] for js in by_seed.values()}) == len(by_seed)  # each seed its own order
    assert all(1.9 < j["passes"] <= 2.0 for j in jobs)  # the step cap gives way to the passes
    assert len({j["out"] for j in jobs}) == len(jobs) and len({j["fingerprint"] for j in jobs}) == len(jobs)


def test_a_seed_sets_the_weights_and_the_data_order_and_a_pair_shares_both():
    params = tiny_params(["fp32"], batch_sizes=(2,))
    job = {"params": params, "stage": "fp32", "batch_size": 2, "steps": 4, "held_out_batches": 2}
    a, again = measure.parity_run({**job, "seed_offset": 1, "data_start": 500}), measure.parity_run({**job, "seed_offset": 1, "data_start": 500})
    other = measure.parity_run({**job, "seed_offset": 2, "data_start": 900})
    assert a["losses"] == again["losses"] and a["seed"] == params["run"]["seed"] + 1
    assert a["losses"] != other["losses"]


def test_the_report_lists_every_parity_run_superseded_ones_too(tmp_path):
    params = tiny_params(["fp32", "tf32"])
    losses = [5.0 - 0.01 * i for i in range(6)]
    recs = [make_record(params, "fp32", 8, [10.0] * 5, losses), make_record(params, "tf32", 8, [5.0] * 5, losses)]
    d = write_report_dir(tmp_path / "cpu", params, recs)
    for i, r in enumerate(_test(params, (0.001, 0.002, 0.0))):
        results.write_atomic(d / "results" / "parity" / f"run{i}.json", r)
    old = {**_run(params, "tf32", 0, 0, 4.5, 4.5), "steps": 200}
    results.write_atomic(d / "superseded" / "parity" / "tf32__b8.20261124T000000.json", old)
    rep = report.load(d)
    table = parity_view.history_md(rep)
    assert table.count("| current |") == 9 and table.count("| superseded |") == 1 and "| 200 |" in table
    assert "holds" in parity_view.recommended_md(rep)


@pytest.mark.parametrize("bump, verdict", [((1.0,), "spike"), ((0.3,) * 6, "beyond"), ((0.02,), "within")])
def test_the_loss_gate_reports_a_single_step_spike_as_a_spike_and_a_departure_as_beyond(bump, verdict):
    params = tiny_params(["fp32", "tf32"])
    ref = [5.0 - 0.05 * i for i in range(20)]
    lever = [v + (bump[i - 8] if 8 <= i < 8 + len(bump) else 0.0) for i, v in enumerate(ref)]
    df = results.table([make_record(params, "fp32", 2, [1.0] * 5, ref), make_record(params, "tf32", 2, [1.0] * 5, lever)],
                       ["fp32", "tf32"], params["run"]["loss_tolerance"])
    row = df.iloc[-1]
    assert row["loss_verdict"] == verdict and row["loss_within_tolerance"] is (verdict != "beyond")
    assert (row["loss_spike_step"] == 8) if verdict == "spike" else pd.isna(row["loss_spike_step"])


def test_the_method_states_the_parity_rule_and_the_batch_tie_rule_before_any_number(tmp_path):
    from lib import report_text

    params = tiny_params(["fp32", "tf32"])
    losses = [5.0 - 0.01 * i for i in range(6)]
    d = write_report_dir(tmp_path / "cpu", params, [make_record(params, "fp32", 2, [10.0] * 5, losses),
                                                    make_record(params, "tf32", 2, [5.0] * 5, losses)])
    text = report_text.method_md(report.load(d))
    assert "within ±0.02 nats" in text and "3 seeds" in text and "a tie goes to the batch size that needs the least memory" in text
    assert "single-step spike" in text
