"""The long quality test admits a lever to the recipe (lib/results/long_choice.py): a lever its short test left
undecided, whose long test reaches the same loss sooner, is chosen by the next sitting (the run phase's recipe_config),
while a render keeps the recipe the sitting timed as trained; and the next experiment is then that sitting, or the long
test with the seeds that would decide it. Records are written here, nothing is measured."""

from __future__ import annotations

import json

import pytest

from conftest import make_record, tiny_params, write_parity_test, write_report_dir

from lib.report import loader, page_one, recipe_row
from lib.results import decisions, long_choice, long_quality, store
from lib.run import recipe as recipe_run
from lib.run import report_folder

SPEEDS = {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "bf16_residual": 90.0, "loss_only": 60.0}
CURVE = [(100, 6.0), (200, 5.0), (300, 4.4), (400, 4.0), (500, 3.8)]  # the reference's held-out loss, falling


def _folder(tmp_path):
    p = tiny_params(list(SPEEDS), batch_sizes=(2,))
    d = write_report_dir(tmp_path, p, [make_record(p, k, 2, [v] * 5, [5.0] * 6) for k, v in SPEEDS.items()])
    write_parity_test(d, p, "loss_only", lever_held=4.0, ref_held=4.0)
    for f in (d / "results" / "parity").glob("loss_only__*.json"):
        rec = json.loads(f.read_text())  # seeds that disagree: the short test stays undecided
        rec["held_out_loss"] = 4.0 + [0.03, -0.02, 0.01][rec["seed_offset"]] + 0.001 * rec["replicate"]
        store.write_atomic(f, rec)
    return d, p


def _long_test(d, p, costs: list[float], lever="loss_only", reference="bf16_residual") -> None:
    """lever against reference on the long corpus, one seed a cost (the lever's loss above the reference's at every
    point of the curve), written where lib/run/long_test.py --folder <report>/long writes."""
    out = d / "long" / "results" / "long"
    out.mkdir(parents=True, exist_ok=True)
    for seed, cost in enumerate(costs):
        for stage, extra in ((lever, cost), (reference, 0.0)):
            rec = make_record(p, stage, 4, [50.0] * 5, [5.0] * 6)
            curve = [[s, loss + 0.01 * seed + extra] for s, loss in CURVE]
            rec.update(
                variant=long_quality.VARIANT,
                kind="parity",
                seed_offset=seed,
                micro_steps=2,
                held_out_curve=curve,
                held_out_loss=curve[-1][1],
                passes=3.9,
                held_out_tokens=1_048_576,
            )
            store.write_atomic(out / f"{stage}__b4__s{seed}.json", rec)
    (d / "long" / f"long-{lever}-vs-{reference}.json").write_text("{}")


def _timed_recipe(d, p, stage: str) -> None:
    """The sitting's recipe, timed as trained (lib/run/recipe.py's records)."""
    for role, key in (("recommended", stage), ("baseline", "compile")):
        rec = make_record(p, key, 2, [SPEEDS[key]] * 5, [5.0] * 6)
        rec.update(variant=f"recipe: {role}", micro_steps=1)
        store.write_atomic(d / "results" / "recipe" / f"{role}__{key}__b2.json", rec)


def test_a_lever_that_reaches_the_same_loss_sooner_is_chosen_by_the_next_sitting_not_by_this_render(tmp_path):
    d, p = _folder(tmp_path)
    _timed_recipe(d, p, "bf16_residual")  # the sitting timed its recipe before the long test ran
    _long_test(d, p, [0.001, 0.002, 0.0015])
    decided = loader.load(d).decided
    row = {r["stage"]: r for r in decided["levers"]}["loss_only"]
    assert decided["recipe"]["stage"] == "bf16_residual" and decided["recipe"]["measured_as_trained"]
    assert row["long"]["decision"] == "adopt" and row["decision"] == decisions.NOT_YET
    nxt = decided["next"]
    assert (nxt["stage"], nxt["kind"], nxt["command"]) == ("loss_only", "sitting", f"make report GPU={p.name}")
    # what it pays is priced with its loss cost (its net worth, not its speed alone); a sitting costs what this took
    assert nxt["payoff"] is None or nxt["long"]["net_worth"] < nxt["over_recipe"]["ratio"] - 1
    (d / "run.json").write_text(json.dumps({"timings_s": {"total_s": 1200.0}}))
    nxt = loader.load(d).decided["next"]
    assert nxt["to_decide"]["gpu_minutes"] == pytest.approx(20.0)
    said = page_one.next_text(loader.load(d))  # page 1 says the sitting, not a short test's seeds
    assert f"<code>make report GPU={p.name}</code> chooses it" in said and "seeds would decide" not in said
    # the next sitting chooses with the long test: its run phase times the recipe with the lever
    assert recipe_run.recipe_config(p, d)["stage"] == "loss_only"
    # without the long test, the short test's undecided verdict keeps it out (the test fails without long_choice)
    for f in (d / "long").glob("long-*.json"):
        f.unlink()
    assert recipe_run.recipe_config(p, d)["stage"] == "bf16_residual"


def test_a_render_after_the_sitting_that_timed_the_admitted_lever_shows_that_recipe(tmp_path):
    d, p = _folder(tmp_path)
    _timed_recipe(d, p, "loss_only")  # the next sitting: it chose, and timed, the admitted lever
    _long_test(d, p, [0.001, 0.002, 0.0015])
    decided = loader.load(d).decided
    assert decided["recipe"]["stage"] == "loss_only" and decided["recipe"]["measured_as_trained"]


def test_an_undecided_long_test_is_the_next_experiment_with_the_seeds_that_would_decide_it(tmp_path):
    d, p = _folder(tmp_path)
    _timed_recipe(d, p, "bf16_residual")
    _long_test(d, p, [0.2, -0.15, 0.1])  # a wide spread: neither sooner nor later beyond the interval
    row = {r["stage"]: r for r in loader.load(d).decided["levers"]}["loss_only"]
    nxt = loader.load(d).decided["next"]
    assert row["long"]["decision"] == "not yet" and row["long"]["seeds_to_decide"]
    assert nxt["kind"] == "long test" and f"--seeds {row['long']['seeds_to_decide']}" in nxt["command"]
    assert "--micro-steps 2" in nxt["command"] and f"--folder reports/{p.name}/long" in nxt["command"]
    assert long_choice.choose(loader.load(d).decisions, p, loader.load(d).evidence)[0]["stage"] == "bf16_residual"


def test_a_new_sitting_keeps_the_long_test_of_the_folder_it_archives(tmp_path):
    d, p = _folder(tmp_path / "reports" / "cpu")
    _long_test(d, p, [0.001, 0.002, 0.0015])
    moved = report_folder.archive_previous(d)
    report_folder.keep_long_test(moved, d)
    assert sorted(f.name for f in (d / "long" / "results" / "long").iterdir()) == sorted(
        f.name for f in (moved / "long" / "results" / "long").iterdir()
    )
    assert (moved / "long").is_dir()  # the archived folder keeps its own copy: it stays readable as it was


def test_the_recipe_s_whole_stack_against_the_canonical_trainer_is_judged_at_the_recipe_s_lead_over_it(tmp_path):
    """The long test of the recipe's stack against the canonical trainer's stage prices its loss cost against the
    recipe's lead as timed as trained (loss_only over compile: 100/60), not the stack's leave-one-out."""
    d, p = _folder(tmp_path)
    _timed_recipe(d, p, "loss_only")
    _long_test(d, p, [0.001, 0.002, 0.0015], lever="loss_only", reference="compile")
    decided = loader.load(d).decided
    rows = {r["stage"]: r for r in decided["levers"]}
    assert decided["recipe"]["ratio"] == pytest.approx(100 / 60, rel=1e-3)
    assert decided["recipe"]["long"]["speedup"] == pytest.approx(decided["recipe"]["ratio"])
    # the whole stack's verdict is the recipe's, not its last lever's: that lever, and every lever of the recipe the
    # canonical trainer lacks, read it as the whole recipe's; page 1 prints it once, beside the recipe's lead
    assert rows["loss_only"]["long"] is None
    for key in ("bf16_residual", "loss_only"):
        assert rows[key]["quality"]["stack"] == {
            "verdict": "adopt",
            "reference": "compile",
            "via": "loss_only",
            "long": True,
        }
    assert rows["compile"]["quality"].get("stack", {}).get("long") is None
    rep = loader.load(d)
    assert "<strong>sooner to the same loss</strong> with the whole recipe" in page_one.lever_table(rep)
    assert "at equal loss" in recipe_row.recipe_table(rep)
    # section 3 lays out the test with its paired spread at each horizon, and the PDF's method states it
    from lib.report import long_view, method_text

    section = long_view.table_html(rep)
    assert "the whole recipe, Loss-only forward<br><span class='note'>vs torch.compile</span>" in section
    assert section.count("<table") == 2 and section.count("</tr>") == 2 + 2  # two tables: a head and a row each
    assert "* **Long test**" in method_text.split(method_text.method_md(rep))[0]


def test_the_long_test_command_prices_a_test_at_the_speed_up_the_report_judged_it_at(tmp_path):
    """python -m lib.run.long_test --report reads the speed-up from decisions.json: for the recipe's whole stack against
    the canonical trainer's stage, the recipe's lead (as the report judges it), not the stack's leave-one-out."""
    import argparse

    from lib.run import long_test

    row = {"stage": "loss_only", "over_recipe": None, "leave_one_out": {"worth": 0.02}}
    recipe = {"stage": "loss_only", "ratio": 1.11, "canonical": {"stage": "compile"}}
    (tmp_path / "decisions.json").write_text(json.dumps({"levers": [row], "noise_floor": 0.01, "recipe": recipe}))
    args = argparse.Namespace(speedup=None, speed_noise=None, report=tmp_path, lever="loss_only", against="compile")
    assert long_test._speed(args) == (1.11, 0.01)
    args.against = None  # its own stack: a test the report has not judged, at the lever's own worth
    assert long_test._speed(args) == (pytest.approx(1.02), 0.01)


def test_where_a_long_test_was_measured_says_what_its_runs_took():
    """A reviewer found page 1's '24 min of measuring' left the long test out: where it was measured now says its
    GPU-seconds (each run on one GPU), beside its commits and machines."""
    one = {"commit": "a" * 40, "host_id": "host-1", "device": "NVIDIA H200"}
    runs = [
        {"wall_s": 200.0, "provenance": {**one, "gpu_uuid": "GPU-1"}},
        {"wall_s": 230.5, "provenance": {**one, "commit": "b" * 40, "host_id": "host-4", "gpu_uuid": "GPU-2"}},
        {"wall_s": 100.0, "provenance": {**one, "commit": "b" * 40, "host_id": "host-4", "gpu_uuid": "GPU-3"}},
    ]
    by = long_quality.measured_by(runs)
    assert by == {
        "commits": ["aaaaaaa", "bbbbbbb"],
        "device": "NVIDIA H200",
        "machines": 2,  # hosts: a host of four GPUs ran two of the seeds at once
        "gpus": 3,
        "gpu_seconds": 530.5,
    }


def test_what_a_long_test_took_counts_only_the_runs_its_verdicts_pair(tmp_path):
    """Reference runs measured ahead of their lever's seeds (four H200s ran the loss-only forward's seeds 3-6 while
    the FP8 lm_head's found no torchao) rest no verdict yet: counting them had made page 1 say 7 machines and 59
    GPU-minutes for tests that rest on 3 machines and 43."""
    d, p = _folder(tmp_path)
    _timed_recipe(d, p, "bf16_residual")
    _long_test(d, p, [0.001, 0.002, 0.0015])
    paired = loader.load(d).decided
    out = d / "long" / "results" / "long"
    for seed in (3, 4):  # the reference's runs alone, waiting for the lever's
        rec = json.loads((out / "bf16_residual__b4__s0.json").read_text())
        rec.update(seed_offset=seed, wall_s=999.0)
        store.write_atomic(out / f"bf16_residual__b4__s{seed}.json", rec)
    decided = loader.load(d).decided
    row = {r["stage"]: r for r in decided["levers"]}["loss_only"]
    assert row["long"]["n"] == 3 and row["long"]["seeds"] == [0, 1, 2]
    assert decided["long_measured_by"] == paired["long_measured_by"]
    assert row["long"]["measured_by"]["gpu_seconds"] == paired["long_measured_by"]["gpu_seconds"]


def test_a_short_test_that_needs_many_seeds_gives_way_to_the_long_test_where_that_costs_less():
    """A reader of reports/h100-x4 found Next proposing 61 seeds of the short test (98 on reports/h100, 77 GPU-min),
    where issue 62 measured the long test decide with a few: the next experiment is the long test's first seeds where
    they cost less than the short test's, priced at the recipe's speed over the pinned corpus's horizon; on a CPU,
    where that horizon takes hours, the short test stays."""
    from lib.results import next_experiment as ne

    def lever(seeds, minutes):
        q = {"test": "parity", "seeds": 4, "batch": 128, "reference_micro_steps": 2, "tokens": 8_388_608}
        q |= {"to_decide": {"seeds": seeds, "more": seeds - 4, "gpu_minutes": minutes}, "out_of_reach": None}
        row = {"stage": "fp8_classifier", "title": "FP8 classifier (fused)", "decision": "not yet", "long": None}
        return row | {"over_recipe": {"ratio": 1.075, "batch": 64}, "quality": q}

    gpu = {"tokens_per_s": 536_420.0, "seq_len": 1024, "micro_batch": 128, "gpu_hours": 5.2, "token_budget": 10**10}
    nxt = ne.next_experiment([lever(98, 77.4)], gpu, 128, "h100")
    assert nxt["kind"] == "long pilot" and nxt["seeds"] == 3 and nxt["short_seeds"] == 98
    assert nxt["command"] == "python -m lib.run.long_test h100 fp8_classifier --micro-steps 2 --seeds 3 --folder " + (
        "reports/h100/long"
    )
    # 3 seeds a side of 784 steps of B=128 at the recipe's speed and the lever's: about 22 GPU-min, not 77
    assert nxt["to_decide"]["tokens_a_run"] == 784 * 128 * 1024 and 20 < nxt["to_decide"]["gpu_minutes"] < 25
    assert ne.next_experiment([lever(12, 3.0)], gpu, 128, "h100")["kind"] == "parity"  # few seeds: the short test
    cpu = {**gpu, "tokens_per_s": 18_000.0, "seq_len": 64}
    assert ne.next_experiment([lever(98, 9.0)], cpu, 128, "cpu")["kind"] == "parity"


def test_the_pinned_corpus_gives_the_training_tokens_the_next_experiment_sizes_a_long_test_by():
    from lib.core import long_corpus

    manifest = long_corpus.LONG_DIR / "manifest.json"
    if not manifest.exists():
        pytest.skip("the long corpus is not fetched here (make corpus-long)")
    assert json.loads(manifest.read_text())["train_tokens"] == long_corpus.PINNED_TRAIN_TOKENS
