"""The parity test's sequential design (lib/results/sequential.py, parity.py): its error rates in simulation, the looks
that decide and stop, the horizon, and each lever set against its own stack with the full stack checked once against
the canonical reference."""

from __future__ import annotations

import pytest
from conftest import make_record, tiny_params, write_report_dir

from lib.results import decide, parity, sequential
from lib.run import parity_runs

LOOKS = (4, 8)


def test_the_design_keeps_its_error_rates_over_all_its_looks():
    """Simulated tests on a sample the critical value was not found on: a lever exactly at the margin is called holds
    (or worse) in about 5 % of tests, not the 5 % per look that naive peeking would double; one well below it holds."""
    c = sequential.critical_value(LOOKS, 0.05)
    naive = 1.8946  # Student's t, one-sided 95 %, 7 degrees of freedom: what a single look at 8 seeds would use
    assert c > naive
    at_margin = sequential.error_rates(LOOKS, 0.05, 0.0, sims=60_000, seed=7)
    assert at_margin["holds"] == pytest.approx(0.05, abs=0.006) and at_margin["worse"] == pytest.approx(0.05, abs=0.006)
    below = sequential.error_rates(LOOKS, 0.05, -1.5, sims=60_000, seed=7)
    assert below["holds"] > 0.9 and below["worse"] < 0.001 and below["mean_seeds"] < 6  # it stops early, mostly at 4


def test_peeking_with_the_single_look_bound_would_break_the_stated_rate():
    """Why the design needs its own critical value: Student's t at each look calls holds too often."""

    t = sequential._t_paths(LOOKS, 60_000, seed=3)
    naive_holds = float(((t[:, 0] <= -2.3534) | (t[:, 1] <= -1.8946)).mean())
    assert naive_holds > 0.07


def test_looks_must_rise_from_two():
    with pytest.raises(ValueError, match="rising"):
        sequential.critical_value((4, 4), 0.05)


def _run(params, stage, seed, held, final, batch=8, steps=40):
    rec = make_record(params, stage, batch, [1.0] * 5, [final] * 10)
    rec.update(kind="parity", variant="parity", steps=steps, held_out_loss=held, seed_offset=seed, replicate=0)
    rec["wall_s"] = 2.0
    return rec


def _pairs(params, lever, reference, deltas, seeds=None):
    recs = []
    for seed, delta in enumerate(deltas[: seeds or len(deltas)]):
        base = 4.0 + 0.1 * seed
        recs += [_run(params, reference, seed, base, base), _run(params, lever, seed, base + delta, base + delta)]
    return recs


def _params():
    p = tiny_params(["fp32", "tf32", "bf16"])
    p.evidence.parity_looks, p.evidence.parity_seeds = list(LOOKS), LOOKS[-1]
    p.evidence.parity_futility_trend = False  # the looks alone (the trend's stop has its own test)
    return p


@pytest.mark.parametrize(
    "deltas, seeds, verdict, wanted",
    [
        ((0.001, -0.002, 0.0, 0.001), 4, parity.HOLDS, 4),  # decided at the first look: no more seeds
        ((0.10, 0.11, 0.09, 0.10), 4, parity.WORSE, 4),
        ((0.0, 0.03, -0.02, 0.01), 4, parity.INCOMPLETE, 8),  # neither bound crosses: the next look is wanted
        ((0.0, 0.04, -0.03, 0.02, 0.0, 0.03, -0.02, 0.02), 8, parity.UNDECIDED, 8),  # the last look undecided
        ((0.0, 0.03, -0.02), 3, parity.INCOMPLETE, 4),  # short of the first look: nothing is judged yet
    ],
)
def test_the_sequential_test_decides_at_a_look_and_stops(deltas, seeds, verdict, wanted):
    params = _params()
    check = parity.checks(_pairs(params, "tf32", "fp32", deltas, seeds), params.evidence)["tf32"]
    assert check["verdict"] == verdict and check["wanted"] == wanted
    assert check["critical_value"] == pytest.approx(sequential.critical_value(LOOKS, 0.05))


def test_seeds_past_a_deciding_look_do_not_change_the_verdict():
    """A look decides on its own seeds: runs made later (a reference's runs serve another lever's test) are not read."""
    params = _params()
    clear = [0.0, 0.001, -0.001, 0.0]
    check = parity.checks(_pairs(params, "tf32", "fp32", clear + [0.3, 0.3, 0.3, 0.3]), params.evidence)["tf32"]
    assert check["verdict"] == parity.HOLDS and check["seeds"] == [0, 1, 2, 3]


def test_a_trend_that_cannot_hold_stops_undecided_at_the_first_look():
    params = _params()
    params.evidence.parity_futility_trend = True
    check = parity.checks(_pairs(params, "tf32", "fp32", (0.03, 0.01, 0.05, 0.02)), params.evidence)["tf32"]
    assert check["verdict"] == parity.UNDECIDED and check["futile"] == "trend"


def test_an_undecided_test_states_the_seeds_and_minutes_that_would_decide_it():
    params = _params()
    deltas = (0.0, 0.04, -0.03, 0.02, 0.0, 0.03, -0.02, 0.02)
    check = parity.checks(_pairs(params, "tf32", "fp32", deltas), params.evidence)["tf32"]
    n = parity.seeds_needed(check)
    assert n is not None and n > 8 and check["run_s"] == {"lever": 2.0, "reference": 2.0}
    i = check["intervals"]["held_out"]
    # n fresh seeds in one look (the probe the report proposes) would hold with the rule's power, n - 1 would not
    t = sequential.t_quantile

    def bound(k):  # with the rule's power: the bound would fall within the margin in 80 % of such tests
        return i["mean"] + (t(check["confidence"], k - 1) + t(check["power"], k - 1)) * i["sd"] / k**0.5

    assert bound(n) <= 0.02 < bound(n - 1)


def test_a_lever_is_set_against_its_own_stack_and_the_full_stack_against_the_canonical_reference():
    """The FP8 classifier's own stack is the loss-only forward; its canonical reference the eager vocab stage."""
    params = tiny_params(["vocab", "bf16_residual", "loss_only", "fp8_classifier"])
    params.evidence.parity_looks, params.evidence.parity_seeds = list(LOOKS), 8
    own = _pairs(params, "fp8_classifier", "loss_only", (0.001, -0.001, 0.0, 0.001))
    vocab = [_run(params, "vocab", seed, 4.0 + 0.1 * seed - 0.2, 4.0 + 0.1 * seed - 0.2) for seed in range(4)]
    alone = parity.checks(own, params.evidence)["fp8_classifier"]
    assert alone["reference"] == "loss_only" and alone["verdict"] == parity.HOLDS and "canonical" not in alone
    both = parity.checks(own + vocab, params.evidence)["fp8_classifier"]
    assert both["canonical"]["reference"] == "vocab" and both["canonical"]["verdict"] == parity.WORSE
    assert parity.standing(both) == parity.WORSE and "fp8_classifier" in parity.rejected({"fp8_classifier": both})


def test_the_plan_runs_the_own_stack_first_then_the_canonical_check_each_to_its_next_look(tmp_path):
    params = tiny_params(["vocab", "fused"], batch_sizes=(4,))
    params.evidence.parity_looks, params.evidence.parity_seeds = [2, 3], 3
    losses = [5.0 - 0.01 * i for i in range(6)]
    matrix = [make_record(params, s, 4, [t] * 5, losses) for s, t in (("vocab", 10.0), ("fused", 5.0))]
    folder = write_report_dir(tmp_path / "cpu", params, matrix)
    jobs = parity_runs.parity_jobs(params, folder)
    # fused's own stack is the vocab stage, its canonical reference too: one test, to its first look
    assert {(j["stage"], j["seed_offset"]) for j in jobs} == {(s, k) for s in ("vocab", "fused") for k in (0, 1)}
    per_step = params.evidence.parity_batch * params.run.seq_len
    assert {j["steps"] for j in jobs} == {params.evidence.parity_horizon_tokens // per_step}  # the horizon rule
    assert all(j["passes"] == pytest.approx(j["steps"] * per_step / _train_tokens(params)) for j in jobs)


def _train_tokens(params):
    from lib.core import data

    return len(data.split(data.load_tokens(params.model.vocab_size))[0])


def test_only_a_stage_whose_tests_hold_is_adopted():
    params = tiny_params(["vocab", "bf16_residual", "loss_only", "fp8_classifier"])
    params.evidence.parity_looks, params.evidence.parity_seeds = list(LOOKS), 8
    losses = [5.0 - 0.01 * i for i in range(6)]
    matrix = [
        make_record(params, s, 8, [t] * 5, losses)
        for s, t in (("vocab", 10.0), ("bf16_residual", 6.0), ("loss_only", 5.0), ("fp8_classifier", 4.0))
    ]
    worse = _pairs(params, "fp8_classifier", "loss_only", (0.1, 0.1, 0.1, 0.1))
    assert decide.best_config(matrix, params)["stage"] == "fp8_classifier"  # untested: the fastest
    assert decide.best_config(matrix + worse, params)["stage"] == "loss_only"  # its own test rejects it


def _report_with_tests(tmp_path, held_deltas, vocab=None):
    """A folder whose fastest stage, the FP8 classifier, was tested against the loss-only forward at 64 steps."""
    from lib.report import loader

    params = tiny_params(["vocab", "bf16_residual", "loss_only", "fp8_head", "fp8_classifier"], batch_sizes=(8,))
    params.evidence.parity_looks, params.evidence.parity_seeds = list(LOOKS), 8
    params.evidence.parity_futility_trend = False
    losses = [5.0 - 0.01 * i for i in range(6)]
    recs = [
        make_record(params, s, 8, [t] * 5, losses)
        for s, t in (
            ("vocab", 10.0),
            ("bf16_residual", 6.0),
            ("loss_only", 5.0),
            ("fp8_head", 4.5),
            ("fp8_classifier", 4.0),
        )
    ]
    tests = _pairs(params, "fp8_classifier", "loss_only", held_deltas)
    for r in tests:
        r.update(steps=64, passes=5.95)
    extra = (
        []
        if vocab is None
        else [_run(params, "vocab", s, 4.0 + 0.1 * s + vocab, 4.0 + 0.1 * s + vocab) for s in range(4)]
    )
    d = write_report_dir(tmp_path / "r", params, recs)
    from lib.results import store

    for r in tests + extra:
        store.write_atomic(d / "results" / "parity" / f"{r['stage']}__s{r['seed_offset']}.json", r)
    return loader.load(d)


def test_page_one_states_the_quality_test_s_reference_horizon_bounds_and_what_would_decide_it(tmp_path):
    from lib.report import page_one

    rep = _report_with_tests(tmp_path, (0.0, 0.04, -0.03, 0.02, 0.0, 0.03, -0.02, 0.02))
    row = next(r for r in rep.decided["levers"] if r["stage"] == "fp8_classifier")
    q = row["quality"]
    assert row["decision"] == "not yet" and q["verdict"] == "undecided" and q["reference"] == "loss_only"
    assert q["steps"] == 64 and q["seeds"] == 8 and q["to_decide"]["seeds"] > 8
    assert q["to_decide"]["gpu_minutes"] == pytest.approx(q["to_decide"]["seeds"] * 4.0 / 60)  # the probe, afresh
    text = page_one.quality_text(q)
    lo, hi = q["held_out"]["lo"], q["held_out"]["hi"]
    assert (
        "vs Loss-only forward" in text and "tokens trained" in text and "text seen 6.0×" in text and "8 seeds" in text
    )
    assert f"[{lo:+.4f}, {hi:+.4f}]".replace("+-", "-") in text.replace("−", "-")
    assert f"~{q['to_decide']['seeds']} seeds" in text
    # stated once on page 1: in Next, where this lever is the next experiment, and not again in its row
    assert rep.decided["next"]["stage"] == "fp8_classifier"
    assert "would decide" in page_one.next_text(rep) and "would decide" not in page_one.lever_table(rep)


def test_the_quality_curves_draw_each_tested_lever_and_the_whole_stack_s_check(tmp_path):
    from lib.report import quality_curves

    rep = _report_with_tests(tmp_path, (0.001, -0.001, 0.0, 0.001), vocab=-0.001)
    drawn = quality_curves.tests(rep)
    pairs = [(c["stage"], c["reference"]) for c in drawn]
    assert pairs[:2] == [("fp8_classifier", "loss_only"), ("fp8_classifier", "vocab")]  # its own, the whole stack's
    assert ("loss_only", "vocab") in pairs  # the runs of its reference make the loss-only stack's check too
    assert quality_curves.plot(rep) is not None and (rep.dir / "figures" / "quality_curves.png").stat().st_size > 0


def test_a_round_spreads_its_seeds_over_the_host_s_gpus_one_series_a_side_per_gpu(tmp_path):
    params = tiny_params(["vocab", "fused"], batch_sizes=(4,))
    env = {"device": {"backend": "cuda", "name": "x", "count": 4}}
    micro = {"fused": 1, "vocab": 1}
    folder = write_report_dir(tmp_path / "cpu", params, [])
    jobs = parity_runs.in_series(parity_runs.parity_plan(params, env, folder, "fused", 8, micro, seeds=8), "look")
    assert {(j["seed_offset"], j["device"]) for j in jobs} == {(s, s % 4) for s in range(8)}
    lanes = {}
    for j in jobs:
        lanes.setdefault(j["device"], set()).add(j["series"])
    assert all(len(series) == 2 for series in lanes.values())  # each GPU: the lever's series and the reference's
    one_gpu = {"device": {"backend": "cuda", "name": "x", "count": 1}}
    assert all(
        j["device"] is None for j in parity_runs.parity_plan(params, one_gpu, folder, "fused", 8, micro, seeds=4)
    )


@pytest.mark.slow
def test_seeds_run_at_once_on_two_devices_make_one_test(tmp_path, monkeypatch):
    """Two lanes of the launcher at once (on this CPU, two processes side by side): the records carry the device each
    seed ran on, and the test reads them as one."""
    from lib.run import runner

    params = tiny_params(["vocab", "fused"], batch_sizes=(4,))
    params.evidence.parity_horizon_tokens = 8 * params.run.seq_len * 6  # six steps: the lanes, not the training
    params.evidence.parity_looks, params.evidence.parity_seeds = [4], 4  # one look at all four seeds
    folder = write_report_dir(tmp_path / "cpu", params, [])
    monkeypatch.setattr(parity_runs, "devices", lambda env: 2)
    env = runner.environment(folder)
    jobs = parity_runs.parity_plan(params, env, folder, "fused", 8, {"fused": 2, "vocab": 2}, seeds=4)
    recs = runner.measure_jobs(parity_runs.in_series(jobs, "look"), env)
    assert sorted((r["seed_offset"], r["device_index"]) for r in recs.values() if r["stage"] == "fused") == [
        (0, 0),
        (1, 1),
        (2, 0),
        (3, 1),
    ]
    check = parity.paired(list(recs.values()), "fused", "vocab", 8, params.evidence)
    assert check["seeds"] == [0, 1, 2, 3] and check["verdict"] in (parity.HOLDS, parity.WORSE, parity.UNDECIDED)


def test_the_default_falls_back_to_the_stack_of_a_lever_that_did_not_hold_and_leaves_its_siblings_not_yet(tmp_path):
    """The FP8 classifier undecided against the loss-only forward: the default recommends the loss-only stack, checked
    against the canonical reference alone, and leaves the FP8 lm_head (also on the loss-only stack) to DEPTH=full."""
    params = tiny_params(["vocab", "bf16_residual", "loss_only", "fp8_head", "fp8_classifier"], batch_sizes=(8,))
    params.evidence.parity_looks, params.evidence.parity_seeds = list(LOOKS), 8
    losses = [5.0 - 0.01 * i for i in range(6)]
    timed = (("vocab", 10.0), ("bf16_residual", 6.0), ("loss_only", 5.0), ("fp8_head", 4.5), ("fp8_classifier", 4.0))
    matrix = [make_record(params, s, 8, [t] * 5, losses) for s, t in timed]
    spread = (0.0, 0.09, -0.05, 0.03, 0.0, 0.06, -0.04, 0.05)
    tested = _pairs(params, "fp8_classifier", "loss_only", spread)
    assert parity.left_to_full_depth(parity.checks(tested, params.evidence), params) == ["fp8_head"]
    assert decide.best_config(matrix + tested, params)["stage"] == "loss_only"
    folder = write_report_dir(tmp_path / "cpu", params, matrix)
    from lib.results import store

    for r in tested:
        store.write_atomic(folder / "results" / "parity" / f"{r['stage']}__s{r['seed_offset']}.json", r)
    planned = {j["stage"] for j in parity_runs.parity_jobs(params, folder)}
    assert planned == {"loss_only", "vocab"}  # straight to the canonical check: no test against bf16_residual
    from lib.report import loader, page_one

    rep = loader.load(folder)
    assert rep.decided["left_to_full_depth"] == ["fp8_head"] and rep.decided["fell_back_from"] == ["fp8_classifier"]
    row = next(r for r in rep.decided["levers"] if r["stage"] == "fp8_head")
    table = page_one.lever_table(rep)
    assert row["decision"] == "not yet" and "<td>FP8 lm_head (torchao)</td>" in table
    # nor does a claim that FP8 pays for training rest on it as confirmed (reports/h100's "use FP8" read confirmed)
    from conftest import claim_facts

    facts = claim_facts(rep)
    assert "fp8_head" in facts["undecided"] and "not tested" in facts["not_held"]["fp8_head"]
    assert (
        "<strong>not tested</strong> at this depth (section 6 says how)"
        in table.split("<td>FP8 lm_head (torchao)</td>")[1].split("</tr>")[0]
    )
    params.depth = "full"
    assert decide.best_config(matrix + tested, params)["stage"] == "fp8_head"  # full depth tests the sibling
    assert {j["stage"] for j in parity_runs.parity_jobs(params, folder)} == {"fp8_head", "loss_only"}


def test_the_next_experiment_passes_over_a_lever_no_stated_seeds_would_decide_for_one_that_seeds_could(tmp_path):
    """The FP8 classifier's mean past the margin and its seeds too spread to call it worse: no number of seeds up to
    100 would decide it. The next experiment is then the FP8 lm_head, untested at this depth, through the sequential
    test's looks; the FP8 classifier is named as passed over, and its row says the test is out of reach."""
    from lib.report import loader, page_one
    from lib.results import next_experiment

    params = tiny_params(["vocab", "bf16_residual", "loss_only", "fp8_head", "fp8_classifier"], batch_sizes=(8,))
    params.evidence.parity_looks, params.evidence.parity_seeds = list(LOOKS), 8
    losses = [5.0 - 0.01 * i for i in range(6)]
    timed = (("vocab", 10.0), ("bf16_residual", 6.0), ("loss_only", 5.0), ("fp8_head", 4.5), ("fp8_classifier", 4.0))
    matrix = [make_record(params, s, 8, [t] * 5, losses) for s, t in timed]
    wide = _pairs(params, "fp8_classifier", "loss_only", (0.03, 0.12, -0.06, 0.02))  # mean +0.0275, sd 0.074
    folder = write_report_dir(tmp_path / "cpu", params, matrix)
    from lib.results import store

    for r in wide:
        store.write_atomic(folder / "results" / "parity" / f"{r['stage']}__s{r['seed_offset']}.json", r)
    rep = loader.load(folder)
    row = next(r for r in rep.decided["levers"] if r["stage"] == "fp8_classifier")
    assert row["decision"] == "not yet" and row["quality"]["out_of_reach"] == {"seeds_beyond": parity.MOST_SEEDS}
    assert "out of reach: more than 100 seeds" in page_one.quality_text(row["quality"])
    nxt = rep.decided["next"]
    assert nxt["stage"] == "fp8_head" and not nxt["tested"] and nxt["seeds"] is None and nxt["batch"] == 8
    assert [p["stage"] for p in nxt["passed_over"]] == ["fp8_classifier"]
    text = page_one.next_text(rep)
    assert text.startswith("test FP8 lm_head (torchao)") and "parity_probe.py cpu fp8_head --batch 8<" in text
    assert (
        "make report GPU=cpu DEPTH=full" in text
        and "looks at 4, 8 seeds" in text
        and "more than 100 would be needed" in text
    )
    # a spread a stated number of seeds could decide: that lever is the next experiment, with those seeds
    levers = [dict(r) for r in rep.decided["levers"]]
    for r in levers:
        if r["stage"] == "fp8_classifier":
            r["quality"] = {
                **r["quality"],
                "out_of_reach": None,
                "to_decide": {"seeds": 12, "more": 8, "gpu_minutes": 3.0},
            }
    picked = next_experiment.next_experiment(levers, rep.decided["recipe"], 8)
    assert picked["stage"] == "fp8_classifier" and picked["seeds"] == 12 and picked["passed_over"] == []
    assert next_experiment.next_experiment([], None, 8) is None
