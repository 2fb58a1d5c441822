"""What a report decides, as data (lib/results/decisions.py): each lever's decision flips with its records, the
recommendation is a recipe whose micro-batch reaches the global batch, and the waterfall and the next experiment
follow from the same records. No wording is asserted here; page 1 lays these out."""

from __future__ import annotations

import json

import pytest

from conftest import make_record, tiny_params, write_parity_test, write_report_dir

from lib.report import loader
from lib.results import recommendation
from lib.results import decide, decisions, next_experiment, store, waterfall

LOSSES = [5.0] * 6


def _folder(tmp_path, ms: dict, batch_sizes=(2,)):
    p = tiny_params(list(ms), batch_sizes=batch_sizes)
    recs = [make_record(p, k, b, [v] * 5, LOSSES) for k, v in ms.items() for b in batch_sizes]
    return write_report_dir(tmp_path, p, recs), p


def _levers(report_dir) -> dict:
    return {r["stage"]: r for r in loader.load(report_dir).decided["levers"]}


def test_a_lever_outside_the_recipe_is_skipped_when_slower_and_not_yet_when_faster_but_untested(tmp_path):
    d, _ = _folder(tmp_path / "a", {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "bf16_residual": 130.0})
    row = _levers(d)["bf16_residual"]
    assert (row["decision"], row["in_recipe"]) == (decisions.SKIP, False)
    assert row["matrix"]["ratio"] < 1
    # the same lever faster, its quality untested: not yet (it would be the recipe only once its test held)
    d, p = _folder(tmp_path / "b", {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "bf16_residual": 90.0})
    _undecided(d, p, "bf16_residual")
    row = _levers(d)["bf16_residual"]
    assert row["decision"] == decisions.NOT_YET and row["quality"]["verdict"] == "undecided"
    assert row["quality"]["steps"] and row["quality"]["seeds"] >= 2  # the looks it took to stop


def test_a_lever_whose_parity_test_finds_it_worse_is_skipped_whatever_its_speed(tmp_path):
    d, p = _folder(tmp_path, {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "bf16_residual": 90.0})
    write_parity_test(d, p, "bf16_residual", lever_held=4.5, ref_held=4.0)
    row = _levers(d)["bf16_residual"]
    assert (row["decision"], row["quality"]["verdict"]) == (decisions.SKIP, "worse")
    assert row["matrix"]["ratio"] > 1


def test_the_stages_whose_quality_test_did_not_hold_are_decided_once_and_the_views_read_them(tmp_path):
    """parity.rejected is judged in decisions.compute (issue 61): decisions.json's `rejected` names the stages whose
    test did not let them stand, and parity_view gives their tests and the reason from it, judging nothing again."""
    from lib.report import parity_view

    d, p = _folder(tmp_path, {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "bf16_residual": 90.0})
    write_parity_test(d, p, "bf16_residual", lever_held=4.5, ref_held=4.0)
    write_parity_test(d, p, "compile", lever_held=4.0, ref_held=4.0)
    rep = loader.load(d)
    out = decisions.compute(rep.decisions, {**rep.evidence, "matrix": rep.records}, p, rep.env)
    assert out["rejected"] == rep.decided["rejected"] == ["bf16_residual"]
    assert json.loads(json.dumps(out["rejected"])) == out["rejected"]
    assert parity_view.rejected(rep) == {"bf16_residual": rep.quality_checks["bf16_residual"]}
    assert parity_view.rejected_reason(rep, "bf16_residual").startswith("quality test worse")
    rep.decided["rejected"] = []  # the views show what was decided
    assert parity_view.rejected(rep) == {}


def test_the_spread_between_machines_is_decided_once_and_page_one_states_it(tmp_path):
    """noise.machine_spread is judged in decisions.compute (issue 61): decisions.json's `machine_spread` counts the
    machines and the configurations timed on more than one, with their spread, and the provenance line states it."""
    from lib.report import tables

    p = tiny_params(["fp32", "tf32"])

    def rec(stage, host, tps, variant=None, batch=2):
        r = make_record(p, stage, batch, [10.0] * 5, LOSSES)
        prov = {"host_id": host, "gpu_uuid": None, "commit": "c" * 40, "modified": False}
        return {**r, "tokens_per_s": tps, "variant": variant, "provenance": prov}

    for shared, expected in ((True, {"machines": 2, "shared": 1, "spread": 4.0 / 102.0}), (False, None)):
        d = write_report_dir(tmp_path / str(shared), p, [rec("fp32", "host-a", 100.0), rec("tf32", "host-a", 120.0)])
        other = rec("fp32", "host-b", 104.0, "repeat", 2 if shared else 4)
        store.write_atomic(d / "results" / "repeats" / "fp32__b2__r1.json", other)
        rep = loader.load(d)
        out = decisions.compute(rep.decisions, {**rep.evidence, "matrix": rep.records}, p, rep.env)["machine_spread"]
        assert out == rep.decided["machine_spread"] == json.loads(json.dumps(out))
        text = tables.provenance_md(rep)
        if shared:
            assert out == pytest.approx(expected)
            assert "The spread between them, measured on 1 configurations timed on more than one, is 3.9 %" in text
        else:
            assert out == {"machines": 2, "shared": 0, "spread": None} and "their offset is unknown" in text
    rep.decided["machine_spread"] = {"machines": 2, "shared": 3, "spread": 0.05}  # the line states what was decided
    assert "measured on 3 configurations timed on more than one, is 5.0 %" in tables.provenance_md(rep)


def test_the_recipe_s_levers_are_adopted_by_their_leave_one_out_and_neutral_within_noise(tmp_path, monkeypatch):
    d, _ = _folder(tmp_path, {"fp32": 100.0, "tf32": 80.0, "bf16": 50.0})
    rows = [
        {"lever": "TF32", "stage": "tf32", "worth": 0.001, "within_noise": True, "record": {"status": "ok"}},
        {"lever": "BF16 autocast", "stage": "bf16", "worth": 0.3, "within_noise": False, "record": {"status": "ok"}},
    ]
    monkeypatch.setattr(
        decisions, "leave_one_out", lambda records, ablation: ({"stage": "bf16", "batch_size": 2}, rows)
    )
    levers = _levers(d)
    assert levers["bf16"]["decision"] == decisions.ADOPT and levers["tf32"]["decision"] == decisions.NEUTRAL
    rows[0]["within_noise"], rows[0]["worth"] = False, 0.05
    assert _levers(d)["tf32"]["decision"] == decisions.ADOPT
    rows[0]["record"], rows[0]["worth"] = {"status": "oom"}, None  # the micro-batch does not fit without it
    assert _levers(d)["tf32"]["leave_one_out"]["cannot_fit"] and _levers(d)["tf32"]["decision"] == decisions.ADOPT


def test_the_recommendation_is_a_micro_batch_that_reaches_the_global_batch(tmp_path):
    """B=3 of T=64 does not divide the CPU profile's 512-token batch: never the recipe, however fast."""
    p = tiny_params(["fp32", "tf32"], batch_sizes=(2, 3))
    recs = [
        make_record(p, "fp32", 2, [100.0] * 5, LOSSES),
        make_record(p, "fp32", 3, [100.0] * 5, LOSSES),
        make_record(p, "tf32", 2, [80.0] * 5, LOSSES),
        make_record(p, "tf32", 3, [60.0] * 5, LOSSES),  # the fastest tokens/s of all
    ]
    d = write_report_dir(tmp_path, p, recs)
    assert decide.best_config(store.decision_records(d / "results"), p)["batch_size"] == 3
    rep = loader.load(d)
    recipe = rep.decided["recipe"]
    assert (recipe["stage"], recipe["micro_batch"], recipe["accumulation"]) == ("tf32", 2, 4)
    written = recommendation.record(rep)
    assert (written["micro_batch"], written["accumulation_steps"]) == (2, 4)
    assert written["micro_batch"] * written["accumulation_steps"] * p.run.seq_len == p.evidence.global_batch_tokens


def test_a_check_stage_is_recommended_whatever_the_noise_says(tmp_path):
    """The CPU default names its stage, so its parity test, recipe and leave-one-out run on every machine."""
    p = tiny_params(["fp32", "tf32", "bf16"])
    recs = [make_record(p, k, 2, [v] * 5, LOSSES) for k, v in {"fp32": 50.0, "tf32": 80.0, "bf16": 90.0}.items()]
    write_report_dir(tmp_path, p, recs)
    records = store.decision_records(tmp_path / "results")
    assert decide.recommended(records, p)["stage"] == "fp32"
    p.evidence.check_stage = "tf32"
    assert decide.recommended(records, p)["stage"] == "tf32"


def test_the_waterfall_is_the_running_product_of_each_lever_s_own_speed_up(tmp_path):
    d, _ = _folder(tmp_path, {"fp32": 100.0, "tf32": 50.0, "bf16": 40.0})
    steps = loader.load(d).decided["waterfall"]
    assert [s["stage"] for s in steps] == ["fp32", "tf32", "bf16"]
    assert abs(steps[-1]["cumulative"] - steps[1]["ratio"] * steps[2]["ratio"]) < 1e-9
    assert abs(steps[-1]["cumulative"] - 2.5) < 0.01


def _undecided(d, p, lever: str) -> None:
    write_parity_test(d, p, lever, lever_held=4.0, ref_held=4.0)
    for f in (d / "results" / "parity").glob(f"{lever}__*.json"):
        rec = json.loads(f.read_text())  # seeds that disagree: too wide a spread to decide
        rec["held_out_loss"] = 4.0 + [0.03, -0.02, 0.01][rec["seed_offset"]] + 0.001 * rec["replicate"]
        store.write_atomic(f, rec)


def test_the_next_experiment_is_the_not_yet_lever_that_would_add_most_to_the_recipe(tmp_path):
    d, p = _folder(
        tmp_path, {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "bf16_residual": 90.0, "loss_only": 60.0}
    )
    _undecided(d, p, "loss_only")
    decided = loader.load(d).decided
    assert decided["recipe"]["stage"] == "bf16_residual"
    nxt = decided["next"]
    assert nxt["stage"] == "loss_only" and abs(nxt["over_recipe"]["ratio"] - 1.5) < 0.01
    assert next_experiment.next_experiment([], None, 8) is None


def test_decisions_json_is_written_beside_the_results_and_equals_what_the_report_read(tmp_path):
    d, _ = _folder(tmp_path, {"fp32": 100.0, "tf32": 50.0})
    rep = loader.load(d)
    recommendation.write(rep)
    assert json.loads((d / decisions.FILE).read_text()) == json.loads(json.dumps(rep.decided, default=store.jsonable))


def test_a_faster_lever_whose_loss_leaves_the_tolerance_is_skipped_and_just_inside_is_not(tmp_path):
    """The divergence check at the report's tolerance decides: inside it the faster lever is in the recipe, beyond
    it the lever is skipped however fast it is."""
    p = tiny_params(["fp32", "tf32"])
    tol = p.run.loss_tolerance
    for name, shift, expected in (("in", 0.5 * tol, decisions.ADOPT), ("out", 3 * tol, decisions.SKIP)):
        recs = [
            make_record(p, "fp32", 2, [100.0] * 5, LOSSES),
            make_record(p, "tf32", 2, [50.0] * 5, [x + shift for x in LOSSES]),
        ]
        d = write_report_dir(tmp_path / name, p, recs)
        row = _levers(d)["tf32"]
        assert row["quality"]["test"] == "divergence check"
        assert row["decision"] in (expected, decisions.NEUTRAL if expected == decisions.ADOPT else expected), name
        assert (row["quality"]["verdict"] == "passed") == (expected != decisions.SKIP)


def test_a_lever_of_the_same_speed_outside_the_recipe_is_skipped_for_no_gain(tmp_path):
    d, p = _folder(tmp_path, {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "bf16_residual": 100.0})
    row = _levers(d)["bf16_residual"]
    assert row["decision"] in (decisions.SKIP, decisions.NEUTRAL)
    assert row["matrix"]["ratio"] == 1.0


def test_a_lever_of_the_recipe_that_slows_it_beyond_noise_is_not_yet_never_skipped(tmp_path, monkeypatch):
    """The recipe keeps it on as measured: a skip beside it contradicted the recipe page 1 hands on."""
    d, _ = _folder(tmp_path, {"fp32": 100.0, "tf32": 80.0, "bf16": 50.0})
    rows = [{"lever": "TF32", "stage": "tf32", "worth": -0.3, "within_noise": False, "record": {"status": "ok"}}]
    monkeypatch.setattr(
        decisions, "leave_one_out", lambda records, ablation: ({"stage": "bf16", "batch_size": 2}, rows)
    )
    assert _levers(d)["tf32"]["decision"] == decisions.NOT_YET
    rows[0]["within_noise"] = True
    assert _levers(d)["tf32"]["decision"] == decisions.NEUTRAL


def test_a_recipe_lever_after_the_canonical_reference_is_spoken_for_by_the_whole_stack_s_test(tmp_path):
    """reports/h100's page 1 read "divergence check passed, 30 steps" for torch.compile and the BF16 residual
    stream, though the recipe's held-out test of its whole stack against the vocab stage covers them (a reader asked
    for a quality test of the BF16 residual stream first). The levers after the canonical reference carry the stack's
    verdict, with the stage whose test it is; those up to it (BF16 autocast) are the reference's own and do not."""
    ms = {"fp32": 400.0, "bf16": 260.0, "vocab": 200.0, "compile": 120.0, "bf16_residual": 110.0, "loss_only": 100.0}
    d, p = _folder(tmp_path, ms)
    write_parity_test(d, p, "loss_only", lever_held=4.0, ref_held=4.0)
    levers = _levers(d)
    assert loader.load(d).decided["recipe"]["stage"] == "loss_only"
    assert levers["loss_only"]["quality"]["verdict"] == "holds" and "stack" not in levers["loss_only"]["quality"]
    for key in ("compile", "bf16_residual"):
        assert levers[key]["quality"]["stack"] == {"verdict": "holds", "reference": "vocab", "via": "loss_only"}
        assert levers[key]["quality"]["test"] == "divergence check"  # its own check stays beside it
    assert "stack" not in (levers["bf16"]["quality"] or {})
    # where that test finds the stack worse, the recipe leaves it, and no lever claims a test of another recipe's stack
    write_parity_test(d, p, "loss_only", lever_held=4.5, ref_held=4.0)
    assert loader.load(d).decided["recipe"]["stage"] != "loss_only"
    assert not any("stack" in (r["quality"] or {}) for r in _levers(d).values())


def test_the_recipes_lead_over_the_canonical_trainer_multiplies_from_its_parts():
    """reports/h200's recipe led its canonical trainer by 1.059x where reports/h100's led by 1.107x, and nothing said
    which part moved. waterfall.beyond_canonical gives each lever the recipe adds after the canonical trainer's stage
    (its waterfall ratio) and the rest; their product is the measured ratio, and only levers after that stage count."""
    wf = [
        {"stage": "fp32", "title": "FP32", "ratio": 1.0, "batch": None},
        {"stage": "compile", "title": "torch.compile", "ratio": 1.3, "batch": 4},
        {"stage": "bf16_residual", "title": "BF16 residual stream", "ratio": 1.05, "batch": 4},
        {"stage": "loss_only", "title": "Loss-only forward", "ratio": 1.02, "batch": 4},
    ]
    recipe = {"stage": "loss_only", "ratio": 1.08, "canonical": {"stage": "compile"}}
    parts = waterfall.beyond_canonical(wf, recipe)
    assert [p["stage"] for p in parts["levers"]] == ["bf16_residual", "loss_only"]
    product = parts["rest"] * 1.05 * 1.02
    assert abs(product - 1.08) < 1e-12 and parts["canonical_stage"] == "compile"
    assert waterfall.beyond_canonical(wf, {**recipe, "ratio": None}) is None  # no canonical trainer measured


def test_the_next_experiment_states_what_it_would_pay_and_when_it_repays_its_test():
    """A page-1 reader of reports/h100 worked out by hand when deciding the FP8 classifier would pay (38-47B tokens):
    the decision carries it. A lever 1.25x the recipe saves a fifth of the recipe's GPU-hours on its token budget;
    a test of 60 GPU-minutes is repaid after budget x 1 h / saved."""
    recipe = {"gpu_hours": 5.0, "token_budget": 10_000_000_000}
    pay = next_experiment.payoff(1.25, recipe, {"gpu_minutes": 60.0})
    assert pay["gpu_hours_saved"] == pytest.approx(1.0) and pay["test_gpu_hours"] == pytest.approx(1.0)
    assert pay["break_even_tokens"] == pytest.approx(10_000_000_000)
    assert next_experiment.payoff(1.25, recipe, None)["break_even_tokens"] is None  # an untested lever: cost unknown
    assert next_experiment.payoff(0.99, recipe, {"gpu_minutes": 60.0}) is None  # a slower lever pays nothing
    # and in money at the stated price: what the test costs and what it saves (a reader priced the test by hand)
    priced = next_experiment.payoff(1.25, {**recipe, "price_per_gpu_hour": 3.5}, {"gpu_minutes": 60.0})
    assert priced["test_cost"] == pytest.approx(3.5) and priced["cost_saved"] == pytest.approx(3.5)
    assert pay["test_cost"] is None and pay["cost_saved"] is None  # no price: no money said


def test_the_recipe_states_what_it_saves_against_the_canonical_trainer():
    """A page-1 reader worked out by hand what the recipe saves on the token budget: the decisions carry it, and page
    1 says it (reports/h100: 5.7 against 5.2 GPU-hours for 10B tokens)."""
    from conftest import ROOT

    from lib.report import recipe_row

    rep = loader.load(ROOT / "reports" / "h100")
    r = rep.decided["recipe"]
    assert r["saves"]["gpu_hours"] == pytest.approx(r["canonical_time"]["gpu_hours"] - r["gpu_hours"])
    assert r["saves"]["cost"] == pytest.approx(r["canonical_time"]["cost"] - r["cost"]) and r["saves"]["cost"] > 0
    table = recipe_row.recipe_table(rep)  # beneath the recipe's own GPU-hours and cost
    assert f"{r['gpu_hours']:.1f}<br><span class='note'>saves {r['saves']['gpu_hours']:.2f}</span>" in table


def test_the_recipe_and_the_canonical_trainer_are_set_side_by_side_by_one_statistic_their_mean_step():
    """The recipe row compared the harness's median step with the plain loop's wall-clock mean; a token budget takes
    the mean step's time: each side's tokens/s now come from its mean step."""
    from lib.results import recipe_decision

    params = tiny_params(["fp32", "fused"])
    harness = {"variant": "recipe: recommended", "status": "ok", "stage": "fused", "batch_size": 2}
    harness |= {"tokens_per_s": 1000.0, "median_ms": 100.0, "mean_ms": 125.0}  # a slow tail: the mean is longer
    plain = {"variant": "recipe: baseline", "status": "ok", "stage": "fp32", "batch_size": 2, "tokens_per_s": 700.0}
    sides = recipe_decision.recipe_sides([harness, plain], params)
    assert sides["recommended"]["median"] == pytest.approx(800.0)  # 1000 × 100 / 125
    assert sides["baseline"]["median"] == pytest.approx(700.0)  # the plain loop's figure is its mean already


def test_a_lever_faster_than_its_own_stack_but_slower_than_the_recipe_is_skipped(tmp_path):
    """reports/h200 of 25022d9: once the recipe took the FP8 classifier, the FP8 lm_head (+3.6 % over the loss-only
    forward, 0.95x the recipe) read "adopt" as one of the recipe's levers, and then, out of it, "not yet". An
    alternative the recipe already beats is skipped for that."""
    row = {"in_recipe": False, "quality": None, "leave_one_out": None}
    row["matrix"] = {"ratio": 1.036, "within_noise": False, "against": "loss_only"}
    row["over_recipe"] = {"ratio": 0.954, "batch": 64}
    assert decisions._decide(row, None) == (decisions.SKIP, "slower than the recipe")
    row["over_recipe"] = {"ratio": 1.02, "batch": 64}
    assert decisions._decide(row, None)[0] == decisions.NOT_YET


def test_a_lever_s_long_test_is_priced_at_its_own_stage_over_its_reference(monkeypatch):
    """The speed and the loss a long verdict sets side by side come from one pair of stages: reports/h200 priced the
    FP8 classifier's test against the loss-only forward at 1.0x (its speed over the recipe it had become) and the
    loss-only forward's against torch.compile at its leave-one-out 1.016x, where the matrix gives 1.086x and 1.062x."""
    from lib.results import long_quality

    priced = {}
    monkeypatch.setattr(
        long_quality, "verdict", lambda recs, lever, ref, b, speed, floor: priced.update({lever: speed})
    )
    rows = [
        {"stage": "fp8_classifier", "in_recipe": True, "decision": "adopt", "over_recipe": None, "matrix": None},
        {"stage": "loss_only", "in_recipe": True, "decision": "adopt", "over_recipe": None, "matrix": None},
    ]
    rows[1]["leave_one_out"] = {"worth": 0.016}
    recs = [{"stage": r["stage"], "status": "ok", "batch_size": 128} for r in rows]
    tps = {("fp8_classifier", 64): [108.6], ("loss_only", 64): [100.0], ("compile", 64): [94.2]}
    pairs = [("fp8_classifier", "loss_only"), ("loss_only", "compile")]
    decisions.long_verdicts(rows, recs, pairs, 0.01, None, tps)
    assert priced == pytest.approx({"fp8_classifier": 1.086, "loss_only": 100.0 / 94.2})
    decisions.long_verdicts(rows, recs, pairs, 0.01, None, {})  # the matrix lacks them: lever_speedup
    assert priced == pytest.approx({"fp8_classifier": 1.0, "loss_only": 1.016})
