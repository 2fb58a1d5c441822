"""Model presets (MODEL=) and the size-sweep chapter: validation, what the fingerprint covers, the
configurations each size runs, 'does not fit' rows, and the crossover statement on synthetic data."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import make_record, run_cli, write_report_dir

from lib.core import config, stages
from lib.report import loader, size_sweep_view
from lib.results import store
from lib.run import pipeline, size_sweep

ENV = {"device": {"name": "NVIDIA H100 80GB HBM3", "backend": "cuda", "memory_bytes": 80 * 10**9}, "torch": "2.11"}


# ---------------------------------------------------------------- presets


def test_the_four_gpt2_presets_have_gpt2s_shapes():
    shapes = {n: (p["n_layer"], p["n_head"], p["n_embd"]) for n, p in config.presets().items()}
    assert shapes["gpt2"] == (12, 12, 768) and shapes["gpt2-medium"] == (24, 16, 1024)
    assert shapes["gpt2-large"] == (36, 20, 1280) and shapes["gpt2-xl"] == (48, 25, 1600)


def test_model_picks_the_preset_and_is_recorded():
    p = config.load("h100", model="gpt2-xl")
    assert (p.model.n_layer, p.model.n_embd, p.model_preset) == (48, 1600, "gpt2-xl")
    assert p.model.vocab_size == 50257 and p.run.batch_sizes == config.presets()["gpt2-xl"]["batch_sizes"]
    assert store.base_record(p, stages.get("compile"), 4)["model"] == "gpt2-xl"
    assert config.load("h100").model_preset == "gpt2" and config.load("cpu").model_preset == "tiny"


def test_an_unknown_model_is_refused_listing_the_presets():
    with pytest.raises(config.UsageError, match="unknown MODEL 'gpt3'.*gpt2-medium.*gpt2-xl"):
        config.load("h100", model="gpt3")
    with pytest.raises(config.UsageError, match="presets:"):
        pipeline.check_inputs("h100", None, None, None, model="gpt2-huge")


def test_make_report_refuses_an_unknown_model_before_measuring(tmp_path):
    proc = run_cli("report", REPORTS=tmp_path, MODEL="gpt-5")
    assert proc.returncode == 2 and "unknown MODEL 'gpt-5'" in proc.stderr
    assert not (tmp_path / "cpu").exists()


def test_the_fingerprint_changes_with_the_preset_and_not_with_its_name_alone():
    small, xl = config.load("h100"), config.load("h100", model="gpt2-xl")
    fp = {n: store.fingerprint(p, ENV, stages.get("compile"), 8) for n, p in (("small", small), ("xl", xl))}
    assert fp["small"] != fp["xl"]
    renamed = dataclasses.replace(small, model_preset="gpt2-renamed")
    assert store.fingerprint(renamed, ENV, stages.get("compile"), 8) == fp["small"]


def test_a_profile_may_override_a_presets_batch_sizes(tmp_params_dir):
    text = (tmp_params_dir / "h100.yaml").read_text() + "models:\n  gpt2-xl:\n    batch_sizes: [2]\n"
    (tmp_params_dir / "h100.yaml").write_text(text)
    assert config.load("h100", model="gpt2-xl").run.batch_sizes == [2]
    assert config.load("h100").run.batch_sizes == [16, 64]
    (tmp_params_dir / "h100.yaml").write_text(text + "  gpt4: {batch_sizes: [1]}\n")
    with pytest.raises(config.ConfigError, match="'gpt4' is no preset"):
        config.load("h100")


def test_a_size_sweep_naming_no_preset_or_no_fp8_stage_is_refused(cpu_params):
    cpu_params.evidence.size_sweep.presets = ["gpt2", "gpt-7"]
    with pytest.raises(config.ConfigError, match="'gpt-7' is no preset"):
        config.validate(cpu_params)
    cpu_params.evidence.size_sweep.presets, cpu_params.evidence.size_sweep.fp8_stages = ["gpt2"], ["compile"]
    with pytest.raises(config.ConfigError, match="'compile' is no FP8 stage"):
        config.validate(cpu_params)


def test_the_report_folder_is_named_by_a_preset_other_than_the_profiles_own():
    assert config.report_name("h100", "gpt2") == "h100"
    assert config.report_name("h100", "gpt2-xl") == "h100-gpt2-xl"
    assert config.report_name("cpu", "tiny") == "cpu"


def test_a_report_from_before_presets_is_known_by_its_shape():
    p = config.load("h100", model="gpt2-large")
    p.model_preset = None
    assert config.preset_of(p) == "gpt2-large"
    p.model.n_layer = 7
    assert config.preset_of(p) == "custom"


def test_gpt2_medium_validates_on_the_cpu_profile_at_its_tiny_batches():
    p = config.load("cpu", model="gpt2-medium")
    assert p.model.n_layer == 24 and p.run.batch_sizes == [2, 4] and p.model.vocab_size == 1000


# ---------------------------------------------------------------- what each size runs


def test_each_fp8_form_is_added_to_the_recommendation_without_fp8():
    p = config.load("h100")
    by_variant = {c["variant"]: c for c in size_sweep.plan(p, "fp8_head")}
    assert by_variant[size_sweep.WITHOUT_FP8]["stage"] == "loss_only"
    assert by_variant["FP8 lm_head (torchao)"] == {
        "stage": "fp8_head",
        "overrides": None,
        "variant": "FP8 lm_head (torchao)",
        "like": "fp8_head",
    }
    assert by_variant["FP8 linear layers (torchao)"]["overrides"] == {"float8": "tensorwise"}
    # a recommendation without FP8 is itself the reference point
    assert size_sweep.plan(p, "loss_only")[0]["stage"] == "loss_only"


def test_a_recommendation_whose_fp8_form_is_not_listed_is_measured_too():
    plan = size_sweep.plan(config.load("h100"), "fp8")
    assert plan[0]["stage"] == "compile" and plan[-1] == {
        "stage": "fp8",
        "overrides": None,
        "variant": "FP8 linear layers",
        "like": "fp8",
    }


def test_the_parameter_count_matches_the_model():
    from lib.train.model import GPT
    from lib.train.step import model_config

    p = size_sweep.preset_params(config.load("cpu"), "gpt2-medium")
    built = GPT(model_config(p, stages.get("vocab")))
    assert size_sweep.n_params(p.model) == sum(w.numel() for w in built.parameters())  # all, wpe too


def test_a_preset_that_cannot_fit_is_a_row_that_says_why():
    xl = size_sweep.preset_params(config.load("h100"), "gpt2-xl").model
    why = size_sweep.does_not_fit(xl, {"memory_bytes": 16 * 10**9})
    assert why.startswith("does not fit") and "16.0 GB" in why
    assert size_sweep.does_not_fit(xl, {"memory_bytes": 80 * 10**9}) is None
    assert size_sweep.does_not_fit(xl, {}) is None  # unknown memory: measured, and an OOM stays a row


def test_size_sweep_jobs_on_a_small_gpu_are_not_applicable_rows(tmp_path, monkeypatch):
    small_gpu = {**ENV, "device": {**ENV["device"], "memory_bytes": 16 * 10**9, "capability": [9, 0], "count": 1}}
    monkeypatch.setattr(size_sweep.runner, "environment", lambda _: small_gpu)
    jobs = size_sweep.jobs(config.load("h100"), tmp_path, "fp8_head")
    reasons = {(j["params"].model_preset, j["variant"]): j["not_applicable"] for j in jobs}
    assert reasons[("gpt2-xl", size_sweep.WITHOUT_FP8)].startswith("does not fit")
    assert reasons[("gpt2", size_sweep.WITHOUT_FP8)] is None
    assert len({j["fingerprint"] for j in jobs}) == len(jobs) == 12


# ---------------------------------------------------------------- the crossover


def _sweep(tmp_path, ratios: dict[str, float], floor_runs=(100.0, 101.0)):
    """A report folder with a size sweep: each preset's without-FP8 point at 1000 tokens/s x size factor
    and the FP8 lm_head form at `ratios` of it; one configuration repeated for the noise floor."""
    p = config.load("cpu")
    recs = [make_record(p, "fused", 2, times_ms=[10.0] * 5, losses=[5.0] * 6) for _ in floor_runs]
    for rec, tps in zip(recs, floor_runs):
        rec["tokens_per_s"] = tps
    d = write_report_dir(tmp_path / "cpu", p, recs[:1])
    store.write_atomic(d / "results" / "repeats" / "fused__b2__r1.json", {**recs[1], "variant": "repeat"})
    for i, (preset, ratio) in enumerate(ratios.items()):
        for variant, tps in ((size_sweep.WITHOUT_FP8, 1000.0), ("FP8 lm_head (torchao)", 1000.0 * ratio)):
            rec = {
                **make_record(p, "fused", 8, times_ms=[10.0] * 5, losses=[5.0] * 6),
                "model": preset,
                "variant": variant,
                "tokens_per_s": tps,
            }
            store.write_atomic(d / "results" / "size" / f"{preset}__{variant[:3]}.json", rec)
    return loader.load(d)


def test_the_crossover_is_the_smallest_size_from_which_fp8_wins_beyond_noise(tmp_path):
    rep = _sweep(tmp_path, {"gpt2": 0.95, "gpt2-medium": 1.05, "gpt2-large": 1.10, "gpt2-xl": 1.2})
    assert size_sweep_view.bands(rep)[0]["gpt2"] == pytest.approx(
        0.01, abs=1e-3
    )  # nothing repeated: the report's floor
    text = size_sweep_view.crossover_md(rep)
    assert "pays from **gpt2-medium** on: the crossover on this device" in text


def test_the_crossover_statement_flips_when_the_data_flips(tmp_path):
    rep = _sweep(tmp_path, {"gpt2": 1.05, "gpt2-medium": 0.95, "gpt2-large": 0.9, "gpt2-xl": 0.8})
    text = size_sweep_view.crossover_md(rep)
    assert "crossover on this device" not in text
    assert "pays at gpt2 but not at every larger size" in text


def test_no_win_anywhere_says_there_is_no_crossover_up_to_the_largest_size(tmp_path):
    rep = _sweep(tmp_path, {"gpt2": 0.5, "gpt2-medium": 0.7, "gpt2-large": 1.005, "gpt2-xl": 1.0})
    text = size_sweep_view.crossover_md(rep)
    assert "does not pay at any size measured" in text and "no crossover up to gpt2-xl" in text
    assert "slower beyond the noise at gpt2, gpt2-medium" in text and "within the noise at gpt2-large, gpt2-xl" in text


def _again(rep, name: str, tokens_per_s: float):
    """A second process of the size-sweep point in results/size/<name>.json, at `tokens_per_s`."""
    rec = {**json.loads((rep.dir / "results" / "size" / f"{name}.json").read_text()), "tokens_per_s": tokens_per_s}
    store.write_atomic(rep.dir / "results" / "size" / f"{name}__r1.json", rec)


def test_each_size_is_judged_by_the_spread_of_its_own_repeated_points(tmp_path):
    rep = _sweep(tmp_path, {"gpt2": 1.05, "gpt2-medium": 1.05, "gpt2-large": 1.05})
    _again(rep, "gpt2__wit", 1100.0)  # gpt2's short steps: 9.5 % apart
    _again(rep, "gpt2-medium__wit", 1005.0)  # medium's: 0.5 %, under the report's 1 % floor
    rep = loader.load(rep.dir)
    band, floor = size_sweep_view.bands(rep)
    assert band["gpt2"] == pytest.approx(0.1 / 1.05, rel=1e-3) and band["gpt2-medium"] == pytest.approx(floor)
    assert band["gpt2-large"] == band["gpt2"]  # not repeated: the sweep's widest range
    text = size_sweep_view.crossover_md(rep)
    assert "pays at gpt2-medium but not at every larger size" in text  # 1.05x: inside ±9.5 %, beyond ±1 %


def test_the_size_sweep_is_decided_once_and_the_chapter_lays_out_its_bands_and_crossover(tmp_path):
    """decisions.compute judges the size sweep (issue 61): each size's band, where it comes from and each FP8 form's
    crossover are in decisions.json (plain JSON), and the chapter states them without judging again."""
    from lib.results import decisions

    rep = _sweep(tmp_path, {"gpt2": 1.05, "gpt2-medium": 1.05, "gpt2-large": 1.05})
    _again(rep, "gpt2__wit", 1100.0)  # 9.5 % apart: gpt2's own band
    _again(rep, "gpt2-medium__wit", 1005.0)  # 0.5 %: under the report's floor, which judges it
    rep = loader.load(rep.dir)
    out = decisions.compute(rep.decisions, {**rep.evidence, "matrix": rep.records}, rep.params, rep.env)["size_sweep"]
    assert out == rep.decided["size_sweep"] == json.loads(json.dumps(out))
    assert out["bands"]["gpt2"] == pytest.approx(0.1 / 1.05, rel=1e-3) == out["bands"]["gpt2-large"]
    assert out["bands"]["gpt2-medium"] == pytest.approx(0.01, abs=1e-3)
    assert out["source"] == {"gpt2": "own", "gpt2-medium": "floor", "gpt2-large": "sweep"}
    c = out["crossover"]["FP8 lm_head (torchao)"]
    assert (c["from"], c["wins"], c["ties"]) == (None, ["gpt2-medium"], ["gpt2", "gpt2-large"])
    text = size_sweep_view.crossover_md(rep)
    assert "gpt2 9.5 %, gpt2-medium 1.0 % (the report's noise floor), gpt2-large 9.5 % (the sweep's widest" in text
    assert "pays at gpt2-medium but not at every larger size" in text
    rep.decided["size_sweep"]["crossover"]["FP8 lm_head (torchao)"] = {**c, "from": "gpt2-medium"}  # shown as decided
    assert "pays from **gpt2-medium** on" in size_sweep_view.crossover_md(rep)
    assert decisions.compute([], {"size": []}, rep.params, rep.env)["size_sweep"] is None  # no sweep, no decision


def test_without_repeats_at_a_size_the_sweeps_widest_spread_judges_it(tmp_path):
    rep = _sweep(tmp_path, {"gpt2": 1.05, "gpt2-medium": 1.05})
    _again(rep, "gpt2__wit", 1100.0)
    rep = loader.load(rep.dir)
    assert "does not pay at any size measured" in size_sweep_view.crossover_md(rep)  # both inside ±9.5 %


def test_the_cpu_pipeline_measures_the_size_sweep_with_a_gpt2_shape(pipeline_ok):
    """The CPU default takes GPT-2 small's shape through the size sweep (gpt2-medium cost it 29 s of 48 s)."""
    recs = store.load_records(pipeline_ok.results_dir / "size")
    ran = {r["model"] for r in recs if r["status"] == "ok"}
    assert ran == {"tiny", "gpt2"}
    small = next(r for r in recs if r["model"] == "gpt2" and r["status"] == "ok")
    estimate = size_sweep.n_params(size_sweep.preset_params(pipeline_ok.params, "gpt2").model)
    assert abs(small["n_params"] - estimate) / estimate < 0.01  # the estimate counts the padded vocabulary
    fp8 = [r for r in recs if r["variant"] != size_sweep.WITHOUT_FP8]
    assert fp8 and all(r["status"] == "not_applicable" and "FP8" in r["reason"] for r in fp8)
    html = (pipeline_ok.report_dir / "report.html").read_text()
    assert "Model size: what FP8 buys" in html and "<td>gpt2 (86M, d=768)</td>" in html


def test_the_title_names_the_preset(tmp_path):
    assert pipeline._title(config.load("h100", model="gpt2-xl"), tmp_path).startswith(
        "gpt2-xl training optimisation report"
    )


def test_a_report_without_a_size_sweep_names_the_command_that_measures_it(tmp_path):
    rep = _sweep(tmp_path, {})
    assert "make report GPU=cpu CHAPTERS=size_sweep" in size_sweep_view.size_html(rep)


def test_a_win_only_at_the_largest_size_places_the_crossover_between_the_last_two(tmp_path):
    rep = _sweep(tmp_path, {"gpt2": 0.9, "gpt2-medium": 1.2})
    _again(rep, "gpt2-medium__wit", 1002.0)
    _again(rep, "gpt2-medium__FP8", 1190.0)
    text = size_sweep_view.crossover_md(loader.load(rep.dir))
    assert (
        "pays at **gpt2-medium**, the largest size measured and the only one at which it pays: the crossover "
        "on this device, at this batch" in text
    )
    assert "its slowest process is +18.8 % against the fastest without FP8 (1,190 against 1,002 tokens/s)" in text


def test_where_no_fp8_form_ran_the_crossover_says_why_and_the_note_counts_only_processes(tmp_path):
    rep = _sweep(tmp_path, {"gpt2": 1.0})
    for path in (rep.dir / "results" / "size").glob("*FP8*.json"):
        rec = json.loads(path.read_text())
        rec.update(status="not_applicable", reason="FP8 needs compute capability 8.9", wall_s=None)
        store.write_atomic(path, rec)
    rep = loader.load(rep.dir)
    assert (
        size_sweep_view.crossover_md(rep) == "No FP8 form ran at any size on this device (not applicable: FP8 needs "
        "compute capability 8.9)."
    )
    assert "processes took" not in size_sweep_view.size_html(rep)  # no record here timed a process
    empty = _sweep(tmp_path / "none", {})
    assert "was not measured for this report" in size_sweep_view.crossover_md(empty)
