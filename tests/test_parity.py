"""The parity test's fixed design (lib/results/parity.py), which judges the folders measured before the sequential one
(tests/test_sequential.py): paired seeds, the test's own noise from the repeat pairs of both stages, one-sided bounds
on the mean paired difference, and one rule that adopts, rejects or leaves undecided."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pandas as pd
import pytest
import conftest
from conftest import make_record, write_report_dir

from lib.measure import parity_run, series
from lib.report import loader, method_text, parity_view
from lib.results import decide, parity, parity_futility, sequential, store
from lib.core import stages
from lib.run import parity_runs


def tiny_params(*args, **kwargs):
    """The CPU default's params under the fixed design these tests hold (three seeds, the first two repeated)."""
    p = conftest.tiny_params(*args, **kwargs)
    p.evidence = dataclasses.replace(
        p.evidence,
        parity_looks=None,
        parity_horizon_tokens=None,
        parity_steps=40,
        parity_passes=2,
        parity_seeds=3,
        parity_noise_seeds=2,
    )
    return p


EV = SimpleNamespace(parity_seeds=3, parity_margin=0.02, parity_confidence=0.95, parity_power=0.8)


def _run(params, stage, seed, replicate, held, final, batch=8):
    rec = make_record(params, stage, batch, [1.0] * 5, [final] * 10)
    rec.update(kind="parity", variant="parity", steps=10, held_out_loss=held, seed_offset=seed, replicate=replicate)
    return rec


def _test(params, lever_deltas, noise=0.001, stage="tf32"):
    """One seed per delta: each stage twice (its second run `noise` apart), the lever `delta` above the reference."""
    recs = []
    for seed, delta in enumerate(lever_deltas):
        base = 4.0 + 0.1 * seed  # seeds differ far more than the lever: pairing takes that out
        for s, d in (("fp32", 0.0), (stage, delta)):
            recs += [
                _run(params, s, seed, 0, base + d, base + d),
                _run(params, s, seed, 1, base + d + noise, base + d - noise),
            ]
    return recs


@pytest.mark.parametrize(
    "deltas, verdict",
    [
        ((0.001, 0.002, 0.0), parity.HOLDS),  # a tight bound below +0.02
        ((-0.10, -0.08, -0.12), parity.HOLDS),  # a lever that lowers the loss is not failed for it
        ((0.10, 0.11, 0.09), parity.WORSE),  # wholly beyond the margin
        ((0.0, 0.04, 0.02), parity.UNDECIDED),  # the upper bound reaches past the margin
    ],
)
def test_the_verdict_flips_with_the_paired_differences(deltas, verdict):
    params = tiny_params(["fp32", "tf32"])
    check = parity.checks(_test(params, deltas), EV)["tf32"]
    assert check["verdict"] == verdict and check["ok"] is (verdict == parity.HOLDS)
    assert check["seeds"] == [0, 1, 2] and check["reference"] == "fp32"
    assert check["intervals"]["held_out"]["mean"] == pytest.approx(sum(deltas) / 3)


def test_a_test_whose_runs_scatter_more_than_the_margin_cannot_adopt_even_at_a_zero_mean():
    """Each stage's two runs 0.03 nats apart: the bound never uses less spread than that noise."""
    params = tiny_params(["fp32", "tf32"])
    quiet, noisy = (parity.checks(_test(params, (0.0, 0.0, 0.0), noise=n), EV)["tf32"] for n in (0.001, 0.03))
    assert quiet["verdict"] == parity.HOLDS and quiet["noise_sd"] == pytest.approx(0.001)
    assert noisy["verdict"] == parity.UNDECIDED and noisy["intervals"]["held_out"]["sd"] == pytest.approx(0.03)
    assert noisy["detectable"] > 0.02


def test_the_noise_comes_from_the_lever_repeats_too_not_only_the_reference():
    """Seen on an H100: the eager reference repeats to 0.0001 nats, the compiled FP8 lever to 0.01."""
    params = tiny_params(["fp32", "tf32"])
    recs = _test(params, (0.0, 0.0, 0.0), noise=0.0)
    for r in recs:
        if r["stage"] == "tf32" and r["replicate"] == 1:
            r["held_out_loss"] += 0.04
    check = parity.checks(recs, EV)["tf32"]
    assert check["noise_sd"] == pytest.approx(0.04 / 2**0.5) and check["verdict"] == parity.UNDECIDED


def test_one_seed_or_no_repeats_cannot_decide_on_a_measured_noise():
    params = tiny_params(["fp32", "tf32"])
    one_seed = parity.checks(_test(params, (0.0,)), SimpleNamespace(**{**vars(EV), "parity_seeds": 1}))["tf32"]
    assert one_seed["verdict"] == parity.UNDECIDED and "paired seed" in parity_view.why_undecided(one_seed)
    no_repeats = [r for r in _test(params, (0.0, 0.0, 0.0)) if r["replicate"] == 0]
    assert parity.checks(no_repeats, EV)["tf32"]["noise_sd"] is None


def test_a_test_cut_off_part_way_decides_nothing_until_every_seed_has_run():
    """Seen on an H100: a run stopped by its time budget after 3 of 5 seeds, and the resumed run read the
    part-test as a rejection and recommended another stage. Part of a test neither rejects nor adopts."""
    params = tiny_params(["fp32", "tf32"])
    losses = [5.0 - 0.01 * i for i in range(6)]
    matrix = [make_record(params, "fp32", 8, [10.0] * 5, losses), make_record(params, "tf32", 8, [5.0] * 5, losses)]
    worse = _test(params, (0.1, 0.1, 0.1))
    part = [r for r in worse if r["seed_offset"] < 2]
    check = parity.checks(part, EV)["tf32"]
    assert check["verdict"] == parity.INCOMPLETE and not check["ok"] and check["seeds_run"] == 2
    assert "2 of the 3 seeds" in parity_view.summary(check)
    assert decide.best_config(matrix + part, params)["stage"] == "tf32"  # kept its place while the test runs
    assert decide.best_config(matrix + worse, params)["stage"] == "fp32"  # the whole test rejects it
    # A run that failed counts as run: the test ends, and decides on the seeds that paired.
    failed = [{**r, "status": "oom"} if r["seed_offset"] == 2 and r["stage"] == "tf32" else r for r in worse]
    assert parity.checks(failed, EV)["tf32"]["verdict"] == parity.WORSE


def test_the_bound_uses_students_t_and_never_less_spread_than_the_measured_noise():
    i = parity.interval([0.01, 0.02, 0.03], 0.95)
    assert i["sd"] == pytest.approx(0.01) and i["hi"] - i["mean"] == pytest.approx(2.919986 * 0.01 / 3**0.5, rel=1e-5)
    assert parity.interval([0.01, 0.01, 0.01], 0.95, noise_sd=0.005)["sd"] == 0.005
    assert sequential.detectable(0.005, 3, 0.95, 0.8) > sequential.detectable(0.005, 10, 0.95, 0.8)


def test_an_undecided_test_says_how_many_seeds_would_settle_it():
    params = tiny_params(["fp32", "tf32"])
    check = parity.checks(_test(params, (0.0, 0.02, 0.0)), EV)["tf32"]  # mean 0.0067, sd 0.0115: 3 seeds are too few
    assert check["verdict"] == parity.UNDECIDED and 3 < parity.seeds_needed(check) < 20


def test_only_a_stage_whose_parity_test_holds_is_recommended():
    params = tiny_params(["fp32", "tf32"])
    losses = [5.0 - 0.01 * i for i in range(6)]
    matrix = [make_record(params, "fp32", 8, [10.0] * 5, losses), make_record(params, "tf32", 8, [5.0] * 5, losses)]
    assert decide.best_config(matrix, params)["stage"] == "tf32"  # no parity test yet: the 30-step gate alone
    for deltas, stage in (
        ((0.001, 0.002, 0.0), "tf32"),
        ((0.0, 0.04, 0.02), "fp32"),
        ((0.1, 0.1, 0.1), "fp32"),
        ((-0.1, -0.1, -0.1), "tf32"),
    ):
        assert decide.best_config(matrix + _test(params, deltas), params)["stage"] == stage


def test_the_plan_pairs_each_seed_and_stays_within_the_passes(tmp_path):
    params = tiny_params(["fp32", "tf32"], batch_sizes=(4,))
    params.evidence.parity_steps, params.evidence.parity_passes = 10**6, 2
    losses = [5.0 - 0.01 * i for i in range(6)]
    recs = [make_record(params, "fp32", 4, [10.0] * 5, losses), make_record(params, "tf32", 4, [5.0] * 5, losses)]
    params.evidence.parity_noise_seeds = None  # every seed twice, as a report measured before the key had it
    jobs = parity_runs.parity_jobs(params, write_report_dir(tmp_path / "cpu", params, recs))
    assert len(jobs) == 4 * params.evidence.parity_seeds
    by_seed = {}
    for j in jobs:
        by_seed.setdefault(j["seed_offset"], []).append(j)
    assert all(
        {j["data_start"] for j in js} == {js[0]["data_start"]} for js in by_seed.values()
    )  # a pair shares its data
    assert len({js[0]["data_start"] for js in by_seed.values()}) == len(by_seed)  # each seed its own order
    assert all(1.9 < j["passes"] <= 2.0 for j in jobs)  # the step cap gives way to the passes
    assert len({j["out"] for j in jobs}) == len(jobs) and len({j["fingerprint"] for j in jobs}) == len(jobs)


def test_a_seed_sets_the_weights_and_the_data_order_and_a_pair_shares_both():
    params = tiny_params(["fp32"], batch_sizes=(2,))
    job = {"params": params, "stage": "fp32", "batch_size": 2, "steps": 4, "held_out_batches": 2}
    a, again = (
        parity_run.parity_run({**job, "seed_offset": 1, "data_start": 500})[0],
        parity_run.parity_run({**job, "seed_offset": 1, "data_start": 500})[0],
    )
    other = parity_run.parity_run({**job, "seed_offset": 2, "data_start": 900})[0]
    assert a["losses"] == again["losses"] and a["seed"] == params.run.seed + 1
    assert a["losses"] != other["losses"]


@pytest.mark.parametrize("stage", ["fused", "compile"])
def test_a_parity_series_in_one_process_trains_as_separate_processes_do(stage):
    """The runs of one side share a process and its compilation: each must start from its own seed's weights
    and an empty optimizer (Adam's moments carried over would change every later loss), and nothing recompiles."""
    from torch._dynamo.utils import counters

    params = tiny_params(["fp32", stage], batch_sizes=(2,))
    job = {"params": params, "stage": stage, "batch_size": 2, "steps": 4, "held_out_batches": 2}
    seeds = [{**job, "seed_offset": k, "data_start": 300 * k} for k in (0, 1, 0)]
    alone = [parity_run.parity_run(j)[0] for j in seeds]
    together, train = [], None
    for i, j in enumerate(seeds):
        rec, train = parity_run.parity_run(j, train)
        together.append(rec)
        if i == 0:
            compiled = sum(counters["inductor"].values())
    assert sum(counters["inductor"].values()) == compiled  # the later runs reused the first one's graph
    # Inductor's CPU kernels need not reduce in the same order in two processes (on a loaded 2-core machine the
    # compiled losses differed by 8e-5 at step 3); Adam's moments carried over move them by far more than 1e-3.
    tol = 1e-3 if stage == "compile" else 1e-6
    for a, t in zip(alone, together, strict=True):
        assert t["status"] == a["status"] == "ok" and t["init_checksum"] == a["init_checksum"]
        assert t["losses"] == pytest.approx(a["losses"], abs=tol)
        assert t["held_out_loss"] == pytest.approx(a["held_out_loss"], abs=tol)
    assert together[0]["losses"] != together[1]["losses"]


def test_a_parity_round_runs_one_process_a_side():
    jobs = [
        {"stage": s, "seed_offset": k, "out": f"{s}{k}{r}"}
        for k in (0, 1)
        for s in ("loss_only", "vocab")
        for r in (0, 1)
    ]
    groups = series.series_groups(parity_runs.in_series(jobs, "noise seeds"))
    assert [[j["out"] for j in g] for g in groups] == [
        ["loss_only00", "loss_only01", "loss_only10", "loss_only11"],
        ["vocab00", "vocab01", "vocab10", "vocab11"],
    ]
    assert series.series_groups([{"out": "a"}, {"out": "b"}]) == [[{"out": "a"}], [{"out": "b"}]]  # no series: alone


def test_an_fp8_side_keeps_a_process_a_run():
    """Restarted FP8 lm_head runs did not reproduce their seeds on an H100 (lib/measure/series.py, restartable, says by how much)."""
    jobs = [{"stage": s, "seed_offset": k, "out": f"{s}{k}"} for k in (0, 1) for s in ("fp8_head", "vocab")]
    groups = series.series_groups(parity_runs.in_series(jobs, "noise seeds"))
    assert [[j["out"] for j in g] for g in groups] == [["fp8_head0"], ["fp8_head1"], ["vocab0", "vocab1"]]
    params = tiny_params(["fp32", "fp8_head"], batch_sizes=(2,))
    assert parity_run.restart(None, params, stages.get("fp8_head")) is False  # refused before touching anything
    assert all(not series.restartable(stages.get(k)) for k in ("fp8_head", "fp8_torchao", "fp8"))
    assert series.restartable(stages.get("loss_only"))


def test_the_report_lists_every_parity_run_superseded_ones_too(tmp_path):
    params = tiny_params(["fp32", "tf32"])
    losses = [5.0 - 0.01 * i for i in range(6)]
    recs = [make_record(params, "fp32", 8, [10.0] * 5, losses), make_record(params, "tf32", 8, [5.0] * 5, losses)]
    d = write_report_dir(tmp_path / "cpu", params, recs)
    for i, r in enumerate(_test(params, (0.001, 0.002, 0.0))):
        store.write_atomic(d / "results" / "parity" / f"run{i}.json", r)
    old = {**_run(params, "tf32", 0, 0, 4.5, 4.5), "steps": 200}
    store.write_atomic(d / "superseded" / "parity" / "tf32__b8.20261124T000000.json", old)
    rep = loader.load(d)
    table = parity_view.history_md(rep)
    assert table.count("| current |") == 12 and table.count("| superseded |") == 1 and "| 200 |" in table
    text = parity_view.recommended_md(rep)
    assert "holds" in text and "{" not in text  # every figure filled in
    assert "held-out loss +0.0010 nats (" in text  # the mean of +0.001, +0.002, 0.0


@pytest.mark.parametrize("bump, verdict", [((1.0,), "spike"), ((0.3,) * 6, "beyond"), ((0.02,), "within")])
def test_the_loss_gate_names_a_single_step_spike_as_a_spike_and_fails_it_like_a_departure(bump, verdict):
    params = tiny_params(["fp32", "tf32"])
    ref = [5.0 - 0.05 * i for i in range(20)]
    lever = [v + (bump[i - 8] if 8 <= i < 8 + len(bump) else 0.0) for i, v in enumerate(ref)]
    df = decide.table(
        [make_record(params, "fp32", 2, [1.0] * 5, ref), make_record(params, "tf32", 2, [1.0] * 5, lever)],
        ["fp32", "tf32"],
        params.run.loss_tolerance,
    )
    row = df.iloc[-1]
    assert row["loss_verdict"] == verdict and row["loss_within_tolerance"] is (verdict == "within")  # a spike fails too
    assert (row["loss_spike_step"] == 8) if verdict == "spike" else pd.isna(row["loss_spike_step"])


def test_the_method_states_the_parity_rule_and_the_batch_tie_rule_before_any_number(tmp_path):

    params = tiny_params(["fp32", "tf32"])
    losses = [5.0 - 0.01 * i for i in range(6)]
    d = write_report_dir(
        tmp_path / "cpu",
        params,
        [make_record(params, "fp32", 2, [10.0] * 5, losses), make_record(params, "tf32", 2, [5.0] * 5, losses)],
    )
    text = method_text.method_md(loader.load(d))
    assert (
        "at or below +0.02 nats" in text
        and "3 seeds" in text
        and "the smaller batch of a tie is listed as a memory saver, never recommended" in text
    )
    assert "single-step spike" in text
    assert "B=8, fixed for every test and every GPU" in text and "before any sweep" in text
    params.evidence.parity_batch = None  # a folder measured before each rule says what it ran under
    (d / "params.json").write_text(json.dumps(dataclasses.asdict(params)))
    text = method_text.method_md(loader.load(d))
    assert "the largest batch size the matrix timed the stage at, before any sweep" in text
    assert "tested at that test's batch" in text and "the tests of one report share a batch" in text
    params.evidence.parity_before_sweep = False
    (d / "params.json").write_text(json.dumps(dataclasses.asdict(params)))
    assert "size recommended when the report's first test began" in method_text.method_md(loader.load(d))
    params.evidence.parity_chain_batch = False
    (d / "params.json").write_text(json.dumps(dataclasses.asdict(params)))
    assert "size recommended when it ran (each run's record names its batch)" in method_text.method_md(loader.load(d))


def test_only_the_first_noise_seeds_repeat_and_the_test_completes_without_the_rest(tmp_path):
    """evidence.parity_noise_seeds: both stages run a second time at the first seeds only (the repeat pairs
    set the noise floor; every seed's paired difference already carries the run-to-run noise). The plan runs
    no other repeat, and the test is complete, and decides, once those seeds ran twice and the rest once."""
    params = tiny_params(["fp32", "tf32"], batch_sizes=(4,))
    params.evidence.parity_seeds, params.evidence.parity_noise_seeds = 5, 2
    losses = [5.0 - 0.01 * i for i in range(6)]
    recs = [make_record(params, "fp32", 4, [10.0] * 5, losses), make_record(params, "tf32", 4, [5.0] * 5, losses)]
    jobs = parity_runs.parity_jobs(params, write_report_dir(tmp_path / "cpu", params, recs))
    assert len(jobs) == 2 * 5 + 2 * 2
    assert {j["seed_offset"] for j in jobs if j["replicate"]} == {0, 1}

    ev = SimpleNamespace(**{**vars(EV), "parity_seeds": 5, "parity_noise_seeds": 2})
    runs = [r for r in _test(params, (0.001, 0.002, 0.0, 0.001, 0.0)) if r["replicate"] == 0 or r["seed_offset"] < 2]
    check = parity.checks(runs, ev)["tf32"]
    assert check["verdict"] == parity.HOLDS and check["seeds_run"] == 5 and check["noise_sd"] == pytest.approx(0.001)
    missing = [r for r in runs if not (r["seed_offset"] == 1 and r["replicate"] == 1 and r["stage"] == "fp32")]
    assert parity.checks(missing, ev)["tf32"]["verdict"] == parity.INCOMPLETE  # a noise seed's repeat is owed
    assert "at the first 2 of them each a second time" in parity_view.rule(params.evidence)


def test_a_test_whose_own_noise_keeps_it_from_deciding_stops_after_its_noise_seeds(tmp_path, monkeypatch):
    """Seen on an H100: the FP8 lm_head's repeat pairs were 0.016 nats apart, so five seeds could detect no less
    than 0.022 nats, beyond the 0.02 margin; the other three seeds were spent for an undecided verdict that was
    certain. The futility stop ends the test after the noise seeds, undecided; a quiet test goes on."""
    params = tiny_params(["fp32", "tf32"], batch_sizes=(4,))
    ev = SimpleNamespace(**{**vars(EV), "parity_seeds": 5, "parity_noise_seeds": 3, "parity_futility_pairs": 3})
    noisy = [r for r in _test(params, (0.0, 0.0, 0.0), noise=0.016) if r["seed_offset"] < 3]
    check = parity.checks(noisy, ev)["tf32"]
    assert check["futile"] and check["verdict"] == parity.UNDECIDED and not check["ok"] and check["seeds_run"] == 3
    assert "stopped after its 3 noise seeds" in parity_view.summary(check)
    assert "steps from initialisation" in parity_view.summary(check)  # early training, said where it holds or not
    quiet = [r for r in _test(params, (0.0, 0.0, 0.0), noise=0.001) if r["seed_offset"] < 3]
    assert parity.checks(quiet, ev)["tf32"]["verdict"] == parity.INCOMPLETE  # the rest of its seeds still run
    # A noise seed still owed: no stop, whatever the noise of the others.
    owed = [r for r in noisy if not (r["seed_offset"] == 1 and r["replicate"] == 1)]
    assert parity.checks(owed, ev)["tf32"]["verdict"] == parity.INCOMPLETE
    # Two repeat pairs are too few to stop on (two sittings of one H200 test measured 0.0110 and 0.0209 nats):
    # the same noise over two noise seeds lets the test run all its seeds.
    ev2 = SimpleNamespace(**{**vars(EV), "parity_seeds": 5, "parity_noise_seeds": 2, "parity_futility_pairs": 3})
    two = [r for r in noisy if r["seed_offset"] < 2]
    assert not parity.checks(two, ev2)["tf32"]["futile"] and parity.checks(two, ev2)["tf32"]["verdict"] == (
        parity.INCOMPLETE
    )
    assert "Every test runs all its seeds" in parity_view.rule(ev2) and "futility" in parity_view.rule(ev)
    # A folder measured before the key stopped after its noise seeds, whatever their number: it keeps that rule
    # (two H200 sittings' FP8 lm_head tests were decided so; re-judged by today's, one came back incomplete).
    before = SimpleNamespace(**{**vars(EV), "parity_seeds": 5, "parity_noise_seeds": 2})
    assert parity.checks(two, before)["tf32"]["futile"] and parity.checks(two, before)["tf32"]["verdict"] == (
        parity.UNDECIDED
    )

    # The runs: the first runs of the noise seeds, their repeats, the other seeds, each round only where the test
    # is not yet futile (here by its noise, after the repeats).
    params.evidence.parity_seeds, params.evidence.parity_noise_seeds = 5, 3
    losses = [5.0 - 0.01 * i for i in range(6)]
    matrix = [make_record(params, "fp32", 4, [10.0] * 5, losses), make_record(params, "tf32", 4, [5.0] * 5, losses)]
    report_dir = write_report_dir(tmp_path / "cpu", params, matrix)
    for noise, rounds in ((0.016, 2), (0.001, 3)):
        calls = []

        def fake_measure(jobs, env, force=False, noise=noise, calls=calls):
            calls.append(sorted({j["seed_offset"] for j in jobs}))
            for j in jobs:
                delta = noise if j["replicate"] else 0.0
                rec = _run(params, j["stage"], j["seed_offset"], j["replicate"], 4.0 + delta, 4.0 - delta, batch=4)
                store.write_atomic(j["out"], {**rec, "fingerprint": j["fingerprint"]})
            return {}

        monkeypatch.setattr(parity_runs.runner, "measure_jobs", fake_measure)
        for f in (
            (report_dir / "results" / "parity").glob("*.json") if (report_dir / "results" / "parity").exists() else []
        ):
            f.unlink()
        parity_runs.measure(params, report_dir)
        assert calls[0] == [0, 1, 2] and len(calls) == rounds, (noise, calls)


def test_a_test_whose_seeds_spread_too_far_to_decide_stops_after_their_first_runs(tmp_path, monkeypatch):
    """Seen on an H100 (reports/h100, a345013): the FP8 classifier's repeat pairs agreed within 0.01 nats, so the
    noise stop let its test run on, but its paired differences spread by 0.04 from seed to seed and all five seeds
    could not decide it; eight FP8 processes were spent for that. The test now stops after the first runs of its
    noise seeds where even the lower bound on their spread keeps the full test from deciding; a test whose seeds
    agree goes on, and so does one whose spread is wide only by the luck of a few seeds (the bound, not the
    estimate, decides)."""
    params = tiny_params(["fp32", "tf32"], batch_sizes=(4,))
    ev = SimpleNamespace(**{**vars(EV), "parity_seeds": 5, "parity_noise_seeds": 3, "parity_futility_pairs": 3})
    spread = [r for r in _test(params, (0.034, -0.055, 0.013)) if r["replicate"] == 0]  # the classifier's held-out
    check = parity.checks(spread, ev)["tf32"]
    assert check["futile"] == "spread" and check["verdict"] == parity.UNDECIDED and not check["ok"]
    assert check["spread_floor"] == pytest.approx(0.0465 * 0.578, rel=0.01)  # sqrt(2 / chi2(0.95, 2)) = 0.578
    why = parity_view.summary(check)
    assert (
        "stopped after the first runs of 3 seeds" in why
        and "the spread of the paired differences of its first 3 seeds (at least 0.0269 nats" in why
    )
    assert "no less than 0.0369" in why  # (t(0.95, 4) + t(0.8, 4)) x 0.0269 / sqrt(5)
    monkeypatch.setattr(parity_view, "rejected", lambda rep: {"tf32": check})
    assert "after the first runs of 3 seeds" in parity_view.short_reason(None, "tf32")
    # The method text states the stop a folder ran under: a folder measured before the key, the noise stop alone.
    assert "by the lower 95 % bound on the spread of its first 3 seeds" in parity_view.rule(ev)
    before = SimpleNamespace(**{**vars(EV), "parity_seeds": 5, "parity_noise_seeds": 2})
    assert "after the repeated seeds its own noise alone" in parity_view.rule(before)
    # Seeds that agree, and a spread whose lower bound still lets five seeds detect the margin: no spread stop.
    for deltas in ((0.001, 0.002, 0.0), (0.011, 0.003, 0.031)):  # the second: the FP8 lm_head's first three seeds
        runs = [r for r in _test(params, deltas) if r["replicate"] == 0]
        assert parity.checks(runs, ev)["tf32"]["verdict"] == parity.INCOMPLETE, deltas
    # Two paired seeds are too few to stop on; a complete test is decided by its bounds, never stopped.
    assert parity.checks(spread[:4], ev)["tf32"]["verdict"] == parity.INCOMPLETE
    done = _test(params, (0.034, -0.055, 0.013, 0.0, 0.0))
    assert parity.checks(done, ev)["tf32"]["verdict"] == parity.UNDECIDED

    # The runner stops before the repeats: one round of first runs, then nothing.
    params.evidence.parity_seeds, params.evidence.parity_noise_seeds = 5, 3
    assert _rounds(tmp_path, monkeypatch, params, (0.034, -0.055, 0.013, 0.0, 0.0)) == [[(0, 0), (1, 0), (2, 0)]]


def test_a_test_whose_seeds_trend_past_the_margin_stops_and_one_heading_to_hold_goes_on(tmp_path, monkeypatch):
    """Seen on an H100 (reports/h100 and reports/probes/warm-h100-2026-11-26, 3c6c130): the FP8 lm_head's first three
    seeds differed by +0.011, +0.003 and +0.031 nats, too little spread for the spread stop, and its test ran all
    eight FP8 processes a side to come back undecided both times. At that mean and spread five seeds leave the upper
    bound at about +0.029: the test now stops there. Seeds that agree near zero, or whose spread still leaves five
    seeds within the margin, go on; a folder measured before the rule keeps the stops it ran under."""
    params = tiny_params(["fp32", "tf32"], batch_sizes=(4,))
    ev = SimpleNamespace(
        **{**vars(EV), "parity_seeds": 5, "parity_noise_seeds": 3, "parity_futility_pairs": 3},
        parity_futility_trend=True,
    )
    head = [r for r in _test(params, (0.011, 0.003, 0.031)) if r["replicate"] == 0]
    check = parity.checks(head, ev)["tf32"]
    assert check["futile"] == "trend" and check["verdict"] == parity.UNDECIDED and not check["ok"]
    bound = parity_futility.projected_bound(check["intervals"]["held_out"], 5, 0.95)
    assert bound == pytest.approx(0.015 + 2.1318 * 0.014422 / 5**0.5, abs=1e-4)  # t(0.95, 4) = 2.1318
    why = parity_view.summary(check)
    assert "stopped after the first runs of 3 seeds" in why and "+0.0150 nats on average, spread 0.0144" in why
    assert "upper bound at +0.0287 with all 5 seeds, above the +0.02 margin" in why
    monkeypatch.setattr(parity_view, "rejected", lambda rep: {"tf32": check})
    assert "upper bound at +0.0287" in parity_view.short_reason(None, "tf32")
    assert "were they to hold, would leave an upper bound above the margin" in parity_view.rule(ev)
    # Heading to hold: a small mean, or a wider spread around zero whose projection stays within the margin.
    for deltas in ((0.001, 0.002, 0.0), (0.004, -0.006, 0.012)):
        runs = [r for r in _test(params, deltas) if r["replicate"] == 0]
        assert parity.checks(runs, ev)["tf32"]["verdict"] == parity.INCOMPLETE, deltas
    # Without the key (a folder measured before it) the same seeds go on; two pairs never stop; a complete test is
    # judged by its bounds.
    before = SimpleNamespace(**{k: v for k, v in vars(ev).items() if k != "parity_futility_trend"})
    assert parity.checks(head, before)["tf32"]["verdict"] == parity.INCOMPLETE
    assert "trend" not in parity_view.rule(before) and "were they to hold" not in parity_view.rule(before)
    assert parity.checks(head[:4], ev)["tf32"]["verdict"] == parity.INCOMPLETE
    done = parity.checks(_test(params, (0.011, 0.003, 0.031, 0.0, 0.0)), ev)["tf32"]
    assert done["seeds_run"] == 5 and done["verdict"] == parity.UNDECIDED  # its bound: +0.0212
    assert "stopped" not in parity_view.summary(done)

    # The runner stops after the first round, as it does for the spread.
    params.evidence.parity_seeds, params.evidence.parity_noise_seeds = 5, 3
    params.evidence.parity_futility_pairs, params.evidence.parity_futility_trend = 3, True
    assert _rounds(tmp_path, monkeypatch, params, (0.011, 0.003, 0.031, 0.0, 0.0)) == [[(0, 0), (1, 0), (2, 0)]]


def _rounds(tmp_path, monkeypatch, params, deltas) -> list:
    """The parity runner's rounds (the seeds and replicates each measured) for a lever `deltas` above its reference."""
    losses = [5.0 - 0.01 * i for i in range(6)]
    matrix = [make_record(params, "fp32", 4, [10.0] * 5, losses), make_record(params, "tf32", 4, [5.0] * 5, losses)]
    report_dir = write_report_dir(tmp_path / "cpu", params, matrix)
    calls = []

    def fake_measure(jobs, env, force=False):
        calls.append(sorted({(j["seed_offset"], j["replicate"]) for j in jobs}))
        for j in jobs:
            delta = deltas[j["seed_offset"]] if j["stage"] == "tf32" else 0.0
            rec = _run(params, j["stage"], j["seed_offset"], j["replicate"], 4.0 + delta, 4.0 + delta, batch=4)
            store.write_atomic(j["out"], {**rec, "fingerprint": j["fingerprint"]})
        return {}

    monkeypatch.setattr(parity_runs.runner, "measure_jobs", fake_measure)
    parity_runs.measure(params, report_dir)
    return calls


def test_a_reference_in_micro_batches_says_why_without_naming_a_batch_it_never_ran():
    """Seen on an H100 probe: 'the reference accumulating 2 micro-batches of B=48 (the largest batch the matrix
    timed it at)', though the matrix timed it at B=64 and never at 48."""
    params = tiny_params(["fp32", "tf32"])
    check = {**parity.checks(_test(params, (0.0, 0.0, 0.0)), EV)["tf32"], "micro_steps": 2, "batch_size": 96}
    text = parity_view.summary(check)
    assert (
        "the reference accumulating 2 micro-batches of B=48, since the matrix timed it at no batch as large as B=96 "
        "(the test follows the matrix; the batch sweep comes after it)" in text
    )
    both = parity_view.summary({**check, "lever_micro_steps": 2})  # a batch fixed for every test: both sides
    # the review of reports/h100 and h200: "(the matrix, which the test follows and the batch sweep does not, timed
    # neither at a batch as large as B=128)" was nearly unparseable
    assert (
        "each side accumulating 2 micro-batches of B=48, since the matrix timed neither stage at a batch as large as "
        "B=96 (the test follows the matrix; the batch sweep comes after it)" in both
    )


def test_a_stage_tested_at_two_batches_is_judged_by_the_test_that_decided():
    """A history with a complete test at one batch and a cut-off one at another (a resume after the recommendation
    moved) shows the complete one, whatever order the records come in, and names the other batch."""
    params = tiny_params(["fp32", "tf32"])
    complete = _test(params, (0.001, 0.002, 0.0))  # batch 8, holds
    cut = [_run(params, "tf32", 0, 0, 4.0, 4.0, batch=16), _run(params, "fp32", 0, 0, 4.0, 4.0, batch=16)]
    for recs in (complete + cut, cut + complete):
        check = parity.checks(recs, EV)["tf32"]
        assert check["batch_size"] == 8 and check["verdict"] == parity.HOLDS and check["other_batches"] == [16]
        assert "Its runs at B=16 decided less" in parity_view.summary(check)


def _earlier(params, stage, replicate, held, losses, batch=8):
    """A parity run of the earlier method: one long run, no seed in its record."""
    rec = _run(params, stage, 0, replicate, held, losses[-1], batch=batch)
    del rec["seed_offset"]
    rec.update(losses=list(losses), steps=len(losses))
    return rec


@pytest.mark.parametrize(
    "lever_shift, held, verdict",
    [
        (0.0, 4.01, parity.HOLDS),  # inside the reference's envelope and held-out range
        (0.10, 4.01, parity.WORSE),  # its training loss leaves the envelope by 0.1 > 0.05
        (0.0, 4.12, parity.WORSE),  # its held-out loss lies 0.1 beyond the reference's range
    ],
)
def test_a_parity_run_of_the_earlier_method_is_judged_by_its_own_rule_and_decides(lever_shift, held, verdict):
    """A committed H100 report's FP8 lm_head failed its one 200-step run (training loss 0.156 nats outside the
    reference's envelope, held-out 0.067 outside their range); read by the paired rule, which found no seeds, the
    test was 'incomplete', decided nothing, and the stage came back recommended in a comparison. An earlier run is
    judged by the rule it was measured under; a failed one keeps its stage out."""
    params = tiny_params(["fp32", "tf32"], batch_sizes=(8,))
    curve = [5.0 - 0.01 * i for i in range(40)]
    recs = [
        make_record(params, "fp32", 8, [10.0] * 5, [4.0] * 6),
        make_record(params, "tf32", 8, [5.0] * 5, [4.0] * 6),
        _earlier(params, "fp32", 0, 4.00, curve),
        _earlier(params, "tf32", 0, held, [v + lever_shift for v in curve]),
        _earlier(params, "fp32", 1, 4.02, [v + 0.02 for v in curve]),
    ]
    check = parity.checks(recs, EV)["tf32"]
    assert (check["protocol"], check["verdict"]) == ("earlier", verdict)
    best = decide.best_config(recs, params)
    assert best["stage"] == ("tf32" if verdict == parity.HOLDS else "fp32")
    text = parity_view.summary(check)
    assert "earlier method" in text and ("held" if verdict == parity.HOLDS else "failed: not adopted") in text
    # A paired test of the same stage decides where there is one; the earlier run stays in the records.
    paired = parity.checks(recs + _test(params, (0.001, 0.002, 0.0)), EV)["tf32"]
    assert "protocol" not in paired and paired["verdict"] == parity.HOLDS


def test_a_lever_that_holds_but_is_measurably_worse_says_so():
    """The H100's FP8 lm_head held with its final training loss worse in every seed (interval +0.0007 to +0.0166):
    'holds' alone undersold a measured penalty. Within the margin and above zero: the verdict says both."""
    params = tiny_params(["fp32", "tf32"])
    worse = parity.checks(_test(params, (0.008, 0.009, 0.010)), EV)["tf32"]
    assert worse["verdict"] == parity.HOLDS and worse["intervals"]["final"]["lo"] > 0
    assert "Worse all the same, by less than the margin" in parity_view.summary(worse)
    level = parity.checks(_test(params, (0.001, -0.002, 0.0)), EV)["tf32"]
    assert level["verdict"] == parity.HOLDS and "Worse all the same" not in parity_view.summary(level)


def test_page_one_names_a_futility_stop_by_its_noise_and_an_undecided_test_by_the_bound_that_crossed(monkeypatch):
    """Seen on an H200: the FP8 lm_head's test stopped after its 3 noise seeds, and page 1 quoted the held-out interval
    of those seeds (upper bound +0.0196, inside the 0.02 margin) as if it were why the lever was skipped."""
    held = {"n": 3, "mean": -0.0104, "lo": -0.0404, "hi": 0.0196, "sd": 0.02}
    final = {"n": 3, "mean": 0.001, "lo": -0.03, "hi": 0.032, "sd": 0.02}
    c = {
        "verdict": parity.UNDECIDED,
        "futile": True,
        "seeds_run": 3,
        "wanted": 5,
        "noise_sd": 0.0178,
        "confidence": 0.95,
        "power": 0.8,
        "margin": 0.02,
        "intervals": {"held_out": held, "final": final},
    }
    monkeypatch.setattr(parity_view, "rejected", lambda rep: {"fp8_head": c})
    why = parity_view.short_reason(None, "fp8_head")
    assert "stopped undecided after its 3 noise seeds" in why and "0.0178 nats" in why and "no less than 0.0245" in why
    assert "-0.0404" not in why
    c.update(futile=False, seeds_run=5)  # complete and undecided: the bound that reached past the margin
    assert parity_view.short_reason(None, "fp8_head").startswith("parity test undecided: final training loss")


def test_a_test_that_holds_beyond_its_detectable_difference_says_the_bounds_decide():
    """reports/h200: the loss-only forward held while its detectable difference (0.0308) exceeded the margin, and a
    reviewer read the two as contradicting; the sentence now says which decides."""
    params = tiny_params(["fp32", "tf32"])
    ok = parity.checks(_test(params, (-0.01, 0.008, -0.006)), EV)["tf32"]
    assert ok["verdict"] == parity.HOLDS and ok["detectable"] > ok["margin"]
    assert "the upper bounds decide" in parity_view.summary(ok)
    quiet = parity.checks(_test(params, (0.001, 0.002, 0.0)), EV)["tf32"]
    assert quiet["detectable"] < quiet["margin"] and "the upper bounds decide" not in parity_view.summary(quiet)
