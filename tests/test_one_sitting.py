"""What lets a report be measured in one sitting and trusted afterwards: the compile cache's key and
ledger, the provenance stamp every record must carry, the run's own account (run.json, the progress
line, a resumable interruption), the depth the default leaves out, the noise between machines and
the repeat rule. The end-to-end checks read the session's CPU pipeline run (conftest `pipeline_ok`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, describe_proc, read_json, run_cli

from lib.core import chapters, config, provenance, record
from lib.measure import compile_cache
from lib.report import cost_view, tables
from lib.results import decide, noise, store
from lib.run import run_log

GPU_ENV = {
    "torch": "2.5.1",
    "cuda": "12.4",
    "numpy": "1.26.4",
    "packages": {"triton": "3.1.0"},
    "device": {"name": "NVIDIA H100 80GB HBM3", "backend": "cuda", "capability": [9, 0]},
}


def _env(**changes) -> dict:
    env = json.loads(json.dumps(GPU_ENV))
    for k, v in changes.items():
        if k == "device_name":
            env["device"]["name"] = v
        else:
            env[k] = v
    return env


def _lever_code(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    for name in compile_cache.LEVER_CODE:
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "lib" / name, code / name)
    return code


def _all_records(run) -> list[tuple[Path, dict]]:
    return [(p, read_json(p)) for p in sorted(run.results_dir.rglob("*.json"))]


# ---------------------------------------------------------------- 1-3: the compile cache


def test_compile_cache_folder_follows_torch_device_and_lever_code_only(tmp_path, monkeypatch):
    """A cached graph is reused only by the same torch, GPU model and lever code: each of them gives
    another folder, while an unrelated package (numpy) keeps the same one."""
    base = compile_cache.folder(_env(), root=tmp_path)
    assert base.parent == tmp_path and base.name.startswith("nvidia-h100-80gb-hbm3-")
    assert compile_cache.folder(_env(torch="2.6.0"), root=tmp_path) != base
    assert compile_cache.folder(_env(device_name="NVIDIA H200"), root=tmp_path) != base
    assert compile_cache.folder(_env(numpy="2.1.0"), root=tmp_path) == base

    code = _lever_code(tmp_path)
    before = compile_cache.key(_env(), code_dir=code)
    assert before == compile_cache.key(_env(), code_dir=ROOT / "lib")  # the copy is the same code
    monkeypatch.setattr(compile_cache.key, "__defaults__", (code,))  # folder() keys on this copy now
    folder_before = compile_cache.folder(_env(), root=tmp_path)
    step = code / "train" / "step.py"
    step.write_text(step.read_text() + "\n\n# a comment, and the layout, are not code\n")
    assert compile_cache.key(_env(), code_dir=code) == before
    step.write_text(step.read_text() + "\nA_CHANGE_TO_THE_TRAINING_STEP = 1\n")
    after = compile_cache.key(_env(), code_dir=code)
    assert after["code"] != before["code"]
    assert compile_cache.folder(_env(), root=tmp_path) != folder_before
    assert compile_cache.key(_env(numpy="2.1.0"), code_dir=code) == after


def test_compile_cache_outcome_states():
    """torch's cache counters say whether a process compiled cold, warm, partly or not at all; a warm
    one carries the cold compile the ledger remembers."""
    cold_entry = {"first_step_s": 41.5, "finished_at": "2025-01-01T00:00:00"}
    cold = compile_cache.outcome({"inductor": {"fxgraph_cache_hit": 0, "fxgraph_cache_miss": 3}}, cold_entry)
    assert cold["state"] == "cold" and cold["fx_misses"] == 3 and cold["fx_hits"] == 0
    assert "cold" not in cold  # a cold process is its own cold compile
    warm = compile_cache.outcome({"inductor": {"fxgraph_cache_hit": 3}}, cold_entry)
    assert warm["state"] == "warm" and warm["fx_hits"] == 3 and warm["cold"] == cold_entry
    partial = compile_cache.outcome({"inductor": {"fxgraph_cache_hit": 2, "fxgraph_cache_miss": 1}})
    assert partial["state"] == "partial"
    assert compile_cache.outcome({})["state"] == "not compiled"
    assert (
        compile_cache.outcome({"inductor": {"fxgraph_cache_hit": 0, "fxgraph_cache_miss": 0}})["state"]
        == "not compiled"
    )


def test_compile_cache_ledger_remembers_cold_compiles_only(tmp_path, monkeypatch):
    """remember() keeps a cold process's first step under its fingerprint in the COMPILE_CACHE folder's
    ledger; a warm process (whose first step is no compile) is not remembered."""
    monkeypatch.setenv(compile_cache.VAR, str(tmp_path))
    env = {"device": {"name": "x", "backend": "cpu"}, "torch": "t"}
    assert compile_cache.ledger(env) == {}
    stamp = {"commit": "abc", "host_id": "host-a"}
    compile_cache.remember(
        env,
        {
            "compile_cache": {"state": "cold"},
            "first_step_s": 12.5,
            "fingerprint": "fp-cold",
            "finished_at": "2025-01-01T00:00:00",
            "provenance": stamp,
        },
    )
    compile_cache.remember(
        env, {"compile_cache": {"state": "warm"}, "first_step_s": 0.2, "fingerprint": "fp-warm", "provenance": stamp}
    )
    book = compile_cache.ledger(env)
    assert set(book) == {"fp-cold"}
    assert book["fp-cold"]["first_step_s"] == 12.5 and book["fp-cold"]["host_id"] == "host-a"
    assert (compile_cache.folder(env) / compile_cache.LEDGER).is_file()
    assert compile_cache.folder(env).parent == tmp_path
    # what a later warm process of that configuration then reports
    warm = compile_cache.outcome({"inductor": {"fxgraph_cache_hit": 1}}, compile_cache.ledger(env).get("fp-cold"))
    assert warm["cold"]["first_step_s"] == 12.5


# ---------------------------------------------------------------- 4-5: provenance


def test_write_record_refuses_unstamped_and_clockless_records(tmp_path):
    """store.write_record writes nothing without a provenance stamp, nor a timed ok record without
    the clocks of its timed steps; a stamped record is written."""
    stamp = provenance.run_stamp({"device": {"name": "x", "backend": "cpu"}, "torch": "t"})
    rec = {"stage": "fp32", "batch_size": 2, "status": "ok", "tokens_per_s": 1.0}
    path = tmp_path / "fp32__b2.json"
    with pytest.raises(provenance.UnstampedRecord):
        store.write_record(path, {**rec, "clocks": {}})
    with pytest.raises(provenance.UnstampedRecord):
        store.write_record(path, {**rec, "provenance": stamp})  # timed (kind absent), no clocks
    assert not path.exists()
    store.write_record(path, {**rec, "provenance": stamp, "clocks": {"span": "the timed steps"}})
    assert read_json(path)["provenance"] == json.loads(json.dumps(stamp))
    # a record that timed nothing needs no clocks
    store.write_record(
        tmp_path / "na.json", {"stage": "ddp", "batch_size": 2, "status": "not_applicable", "provenance": stamp}
    )


def test_every_record_of_the_run_is_stamped(pipeline_ok):
    """Every record the pipeline wrote says where it was measured, and every timed ok record carries its
    clocks and how its compile went; run.json is the completed run's account."""
    recs = _all_records(pipeline_ok)
    assert recs
    timed = 0
    for path, rec in recs:
        stamp = rec.get("provenance")
        assert isinstance(stamp, dict), path
        assert {"commit", "host_id", "gpu_uuid"} <= set(stamp), path
        assert stamp.get("tree_hash"), path
        if rec.get("status") == "ok" and rec.get("kind") in (None, "plain"):
            timed += 1
            assert "clocks" in rec, path
            assert "compile_cache" in rec, path
    assert timed > 0
    run = read_json(pipeline_ok.report_dir / "run.json")
    assert run["state"] == "completed"
    assert run["host_id"] and run["host_id"] == provenance.host_id()
    assert "commit" in run["code"]
    if (ROOT / ".git").exists():
        assert run["code"]["commit"]
    assert run["configurations"]["measured"] > 0


# ---------------------------------------------------------------- 6-7: the run's own account


def test_progress_line_shows_elapsed_and_what_is_left(pipeline_ok):
    """Each chapter heading and each record line tells the elapsed time and what is left in the run."""
    out = pipeline_ok.proc.stdout
    clock = r"\d+(?:h\d{2}m|m\d{2}s)"
    chapter_lines = re.findall(rf"^\[measure (\d+)/(\d+)\] .+; {clock} elapsed, ~{clock} left in the run\)$", out, re.M)
    n = len(chapters.order(pipeline_ok.params.stages, pipeline_ok.params.chapters))
    assert "[measure 1/" in out
    assert [int(i) for i, _ in chapter_lines] == list(range(1, n + 1)), out[-3000:]
    assert {int(total) for _, total in chapter_lines} == {n}
    record_lines = re.findall(
        rf"\[{clock} elapsed; (?:~{clock} left in the chapter|chapter over its estimate), "
        rf"~{clock} in the run\]$",
        out,
        re.M,
    )
    assert len(record_lines) >= read_json(pipeline_ok.report_dir / "run.json")["configurations"]["measured"]


@pytest.mark.rerun
def test_an_interrupted_run_says_so_and_resumes(tmp_path):
    """MEASURE_FOR stops a run between configurations with exit code 3 and run.json saying it was
    interrupted; the same command without it resumes and completes, keeping the interrupted run."""
    args = dict(REPORTS=tmp_path, MEASURE_ONLY=1, STAGES="fp32 tf32 bf16", BATCHES="2")
    first = run_cli("report", MEASURE_FOR=3, **args)
    assert first.returncode == 3, describe_proc(first)
    run = read_json(tmp_path / "cpu" / "run.json")
    assert run["state"] == "interrupted", run
    assert "interrupted after" in run["interrupted"] and "MEASURE_FOR" in run["interrupted"]
    ((cut, seconds),) = run["cut_timings_s"].items()  # the chapter it stopped in keeps the time it had spent
    assert cut in ("fp32", "tf32", "bf16", "batch_sweep", "size_sweep") and seconds > 0 and cut not in run["timings_s"]
    second = run_cli("report", **args)
    assert second.returncode == 0, describe_proc(second)
    assert "resuming" in second.stdout
    run = read_json(tmp_path / "cpu" / "run.json")
    assert run["state"] == "completed"
    assert run["earlier_runs"][0]["state"] == "interrupted"
    total = cost_view.chapter_seconds(run)  # the cut chapter's two parts add up
    assert set(total) >= {"fp32", "tf32", "bf16", cut} and total[cut] > seconds


def test_a_record_a_later_round_lists_again_is_counted_once(tmp_path, cpu_params):
    """reports/h200's run.json counted 41 measured and 52 kept against 84 records: after the recommendation moved,
    the repeats round listed nine records again, and each was counted kept a second time."""
    import atexit
    import signal

    from lib.run import run_log

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    log = run_log.RunLog(tmp_path, cpu_params, {"device": {"backend": "cpu", "name": "cpu"}}, [], "make report")
    atexit.unregister(log._at_exit)  # a run's exit handlers, not the test session's
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    repeat = {"stage": "compile", "batch_size": 4, "fingerprint": "f", "variant": "repeat", "repeat": 1, "status": "ok"}
    fresh = {**repeat, "variant": None, "repeat": 0}
    log.record(repeat, kept=True)
    log.record(fresh, kept=False)
    log.record(repeat, kept=True)  # listed again by a later round
    log.record(fresh, kept=True)  # measured by this run, then listed again
    counts = read_json(tmp_path / "run.json")["configurations"]
    assert (counts["measured"], counts["kept"], counts["by_status"]) == (1, 1, {"ok": 2})


def test_a_run_a_signal_stops_keeps_the_seconds_of_the_chapter_it_cut(tmp_path, cpu_params):
    """Seen on an H100 (reports/h100, 9337cdf): a call's time limit sent SIGTERM 39 s into the batch-sweep chapter;
    run.json said 'stopped by SIGTERM' but kept no seconds for that chapter, so the chapters' sum (1,285 s) fell short
    of the runs' (1,324 s). A stop keeps the cut chapter's seconds so far, as the time budget's stop does."""
    import atexit
    import signal

    from lib.core import chapters
    from lib.run import run_log

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    log = run_log.RunLog(tmp_path, cpu_params, {"device": {"backend": "cpu", "name": "cpu"}}, [], "make report")
    atexit.unregister(log._at_exit)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    order = chapters.order(cpu_params.stages, cpu_params.chapters)
    log.chapter(1, order)
    log.chapter_done(order[0].key, 1.5)
    log.chapter(2, order)
    log.stop("stopped by SIGTERM")
    run = read_json(tmp_path / "run.json")
    assert run["state"] == "interrupted" and "SIGTERM" in run["interrupted"]
    assert set(run["cut_timings_s"]) == {order[1].key} and run["cut_timings_s"][order[1].key] >= 0
    assert run["timings_s"][order[0].key] == 1.5


def test_settle_marks_an_abandoned_run_interrupted():
    """A run.json entry left 'running' by a process that is gone is settled as interrupted after the
    configurations it recorded; a finished one is left as it is."""
    run = run_log.settle({"state": "running", "configurations": {"measured": 4}})
    assert run["state"] == "interrupted"
    assert "after 4 configurations" in run["interrupted"]
    done = {"state": "completed", "configurations": {"measured": 4}}
    assert run_log.settle(dict(done)) == done


# ---------------------------------------------------------------- 8: depth


def test_default_depth_leaves_out_what_full_depth_adds():
    """The default report leaves FP8 layers, autotuning and the size sweep to DEPTH=full and names the
    command that adds each; DEPTH=full measures them; an unknown depth is refused. (The H100 profile: the
    CPU default keeps its size sweep, which costs seconds there.)"""
    params = config.load("h100")
    assert params.depth == "default"
    assert "autotune" not in params.stages and "fp8" not in params.stages
    assert "size_sweep" not in params.chapters
    left = {n["key"]: n for n in params.not_run}
    assert set(left) == {
        "autotune",
        "fp8",
        "size_sweep",
        "ce_filter",
        "shape_padding_control",
        "recipe_harness",
        "compiled_small_batches",
        "seq_curve",
        "parity_alternatives",
    }
    for key, item in left.items():
        if item["kind"] == "evidence":  # explanatory evidence joins the run at full depth, with a line that says what
            chapter = config.EVIDENCE_CHAPTER[key]
            assert item["command"].endswith("DEPTH=full" + (f" CHAPTERS={chapter}" if chapter else "")), item
            assert item["what"] == config.DEPTH_EVIDENCE[key], item
            continue
        assert f"CHAPTERS={key}" in item["command"], item
        if item["kind"] == "stage":  # a stage joins the run only at full depth
            assert "DEPTH=full" in item["command"], item
    assert "size_sweep" not in [c.key for c in chapters.order(params.stages, params.chapters)]

    # Explanatory evidence is listed only where its chapter runs: the CPU default skips compile (no shape-padding
    # control to add), and a report of other stages has no fused cross-entropy chapter.
    assert "shape_padding_control" not in {n["key"] for n in config.load("cpu").not_run}
    full = config.load("h100", depth="full")
    subset = config.load("h100", stage_keys=["fp32", "compile"])
    assert {n["key"] for n in subset.not_run if n["kind"] == "evidence"} == {
        "shape_padding_control",
        "recipe_harness",
        "compiled_small_batches",
    }
    # The compiled stages run at the matrix's largest batch alone (each lever is decided there); eager ones at all.
    assert config.stage_batches(params, "compile") == [64] and config.stage_batches(params, "vocab") == [16, 64]
    assert config.stage_batches(full, "compile") == [16, 64]
    assert "compiled_small_batches" not in {n["key"] for n in config.load("h100", batch_sizes=[64]).not_run}
    assert left["ce_filter"]["command"] == "make report GPU=h100 DEPTH=full CHAPTERS=fused_ce"

    assert full.depth == "full"
    assert "autotune" in full.stages and "fp8" in full.stages and "size_sweep" in full.chapters
    assert full.not_run == []
    assert all(config.runs_evidence(full, k) for k in config.DEPTH_EVIDENCE)
    assert not any(config.runs_evidence(params, k) for k in config.DEPTH_EVIDENCE)
    assert "size_sweep" in [c.key for c in chapters.order(full.stages, full.chapters)]
    with pytest.raises(config.UsageError):
        config.check_depth("deep")


def test_default_run_measured_no_full_depth_records(pipeline_ok):
    """The default run wrote no records of the stages left to DEPTH=full, and ran the size sweep only because the
    cpu profile leaves it out of its depth."""
    assert not list(pipeline_ok.results_dir.rglob("autotune__b*.json"))
    assert not list(pipeline_ok.results_dir.rglob("fp8__b*.json"))
    assert pipeline_ok.params.full_depth.chapters == [] and "size_sweep" in pipeline_ok.params.chapters
    assert read_json(pipeline_ok.report_dir / "run.json")["depth"] == "default"


# ---------------------------------------------------------------- 9: noise across machines


def _rec(stage, tps, host, variant=None, batch=4):
    return {
        "stage": stage,
        "batch_size": batch,
        "status": "ok",
        "variant": variant,
        "tokens_per_s": tps,
        "provenance": {"host_id": host, "gpu_uuid": "GPU-1"},
    }


def test_one_machine_decides_on_its_own_noise_floor():
    """Records of one machine are judged against the report's noise floor alone."""
    records = [_rec("fused", 100.0, "host-a"), _rec("fused", 100.5, "host-a", "repeat"), _rec("vocab", 120.0, "host-a")]
    groups = {("fused", 4): [100.0, 100.5], ("vocab", 4): [120.0]}
    assert noise.machine_spread(records) == {"machines": 1, "shared": 0, "spread": 0.0}
    assert noise.decision_floor(records, groups) == noise.noise_floor(groups)
    assert noise.noise_floor(groups) == pytest.approx(0.5 / 100.25)


def test_two_machines_widen_the_floor_to_their_spread():
    """Where two machines timed the same configuration, their offset (3 % here) widens a within-machine
    floor of 0.5 %; where they share no configuration, nothing can be judged (None)."""
    within = {("fused", 4): [100.0, 100.5]}
    records = [
        _rec("fused", 100.0, "host-a"),
        _rec("fused", 100.5, "host-a", "repeat"),
        _rec("vocab", 100.0, "host-a"),
        _rec("vocab", 103.0, "host-b"),
    ]
    spread = noise.machine_spread(records)
    assert spread["machines"] == 2 and spread["shared"] == 1
    assert spread["spread"] == pytest.approx(3 / 101.5) and spread["spread"] == pytest.approx(0.03, abs=1e-3)
    floor = noise.decision_floor(records, within)
    assert floor >= spread["spread"] > noise.noise_floor(within)
    assert noise.across_machines(records) == spread["spread"]

    apart = [_rec("fused", 100.0, "host-a"), _rec("vocab", 103.0, "host-b")]
    assert noise.machine_spread(apart)["spread"] is None
    assert noise.decision_floor(apart, within) is None


def test_within_noise_honours_the_spread_between_machines():
    """A 0.9 % difference is noise when machines differ by 3 %, but not against the processes' own
    ranges alone."""
    assert noise.within_noise([100, 100.2], [101, 101.1], floor=0.01, across=0.03) is True
    assert noise.within_noise([100, 100.2], [101, 101.1], floor=0.01, across=0.0) is False
    assert noise.within_noise([100, 100.2], [101, 101.1], floor=0.01, across=None) is None


# ---------------------------------------------------------------- 10: the repeat rule


def test_third_process_only_where_the_first_two_disagree(pipeline_ok):
    """repeat_runs.measure: a configuration gets a third process (__r2) exactly where its first two
    (the matrix's or sweep's record and __r1) differ by more than evidence.repeat_tolerance."""
    res, tolerance = pipeline_ok.results_dir, pipeline_ok.params.evidence.repeat_tolerance
    repeats = sorted((res / "repeats").glob("*__r*.json"))
    assert repeats, "the run repeated nothing"
    configs = {}
    for path in repeats:
        m = re.fullmatch(r"(.+)__b(\d+)__r(\d+)\.json", path.name)
        assert m, path
        assert int(m.group(3)) < pipeline_ok.params.evidence.repeats, path
        configs.setdefault((m.group(1), int(m.group(2))), {})[int(m.group(3))] = read_json(path)
    for (stage, batch), runs in configs.items():
        assert 1 in runs, (stage, batch)
        first = [p for p in (res / f"{stage}__b{batch}.json", res / "sweep" / f"{stage}__b{batch}.json") if p.exists()]
        assert len(first) == 1, (stage, batch, first)
        r0 = read_json(first[0])
        apart = noise.spread([r0["tokens_per_s"], runs[1]["tokens_per_s"]])["spread"]
        if 2 in runs:
            assert apart > tolerance, (stage, batch, apart)
        else:
            assert apart <= tolerance, (stage, batch, apart)


def test_repeat_rule_runs_a_third_process_only_beyond_the_tolerance(tmp_path, monkeypatch, cpu_params):
    """repeat_runs.measure, with the launcher replaced: every configuration gets a second process; only the
    one whose first two processes differ by more than repeat_tolerance (5 % against 0.5 %, tolerance
    1 %) gets a third; without a tolerance every configuration gets one."""
    from lib.run import repeat_runs

    env = {"device": {"name": "x", "backend": "cpu"}, "torch": "t", "packages": {}}
    timed = [
        _rec("fp32", 100.0, "host-a", batch=2),
        _rec("fp32", 100.5, "host-a", "repeat", batch=2),
        _rec("tf32", 100.0, "host-a", batch=2),
        _rec("tf32", 105.0, "host-a", "repeat", batch=2),
    ]
    launched = []
    monkeypatch.setattr(repeat_runs.runner, "environment", lambda report_dir: env)
    monkeypatch.setattr(repeat_runs, "repeat_configs", lambda params, report_dir: [("fp32", 2), ("tf32", 2)])
    monkeypatch.setattr(repeat_runs.store, "decision_records", lambda results_dir: timed)
    monkeypatch.setattr(
        repeat_runs.runner,
        "measure_jobs",
        lambda jobs, env, force=False: launched.extend((j["stage"], j["repeat"]) for j in jobs) or {},
    )
    cpu_params.evidence.repeats, cpu_params.evidence.repeat_tolerance = 3, 0.01
    repeat_runs.measure(cpu_params, tmp_path)
    assert sorted(launched) == [("fp32", 1), ("tf32", 1), ("tf32", 2)]

    launched.clear()
    cpu_params.evidence.repeat_tolerance = None  # as a report's params.json from before the rule
    repeat_runs.measure(cpu_params, tmp_path)
    assert sorted(launched) == [("fp32", 1), ("fp32", 2), ("tf32", 1), ("tf32", 2)]


def test_a_configuration_the_repeats_lift_into_the_top_two_is_repeated_too(tmp_path, monkeypatch, cpu_params):
    """The repeats move the medians the top two were read from (CI saw it on a CPU: the leader's second
    process was slower, a third configuration became the recommendation, and it had run once). The
    ranking is read again after each round, and whatever it names anew is repeated; nothing twice."""
    from lib.run import repeat_runs

    env = {"device": {"name": "x", "backend": "cpu"}, "torch": "t", "packages": {}}
    rankings, launched = [[("fp32", 2), ("tf32", 2)], [("tf32", 2), ("bf16", 2)]], []  # before, after the repeats
    monkeypatch.setattr(repeat_runs.runner, "environment", lambda report_dir: env)
    monkeypatch.setattr(
        repeat_runs, "repeat_configs", lambda params, report_dir: rankings.pop(0) if len(rankings) > 1 else rankings[0]
    )
    monkeypatch.setattr(repeat_runs.store, "decision_records", lambda results_dir: [])
    monkeypatch.setattr(
        repeat_runs.runner,
        "measure_jobs",
        lambda jobs, env, force=False: launched.extend((j["stage"], j["repeat"]) for j in jobs) or {},
    )
    cpu_params.evidence.repeats = 2
    repeat_runs.measure(cpu_params, tmp_path)
    assert sorted(launched) == [("bf16", 1), ("fp32", 1), ("tf32", 1)]


def test_a_record_measured_again_is_superseded_never_deleted(tmp_path, monkeypatch):
    """FORCE (or the recipe's all-in-one-call rule) re-measures a configuration: the earlier record moves to
    <report>/superseded/ with its content intact, and the new record takes its place."""
    from lib.run import runner

    monkeypatch.setenv("COMPILE_CACHE", str(tmp_path / "cache"))
    params = config.load("cpu")
    out = tmp_path / "cpu" / "results" / "recipe" / "compile__b2.json"
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps({"stage": "compile", "old": True}))
    env = {"device": {"name": "x86_64", "backend": "cpu", "count": 1}, "torch": "t"}
    job = {
        "params": params,
        "stage": "compile",
        "batch_size": 2,
        "out": str(out),
        "fingerprint": "fp",
        "not_applicable": "skipped by the test",
    }
    runner.measure_jobs([job], env, force=True)
    moved = list((tmp_path / "cpu" / "superseded" / "recipe").glob("compile__b2.*.json"))
    assert len(moved) == 1 and json.loads(moved[0].read_text()) == {"stage": "compile", "old": True}
    assert json.loads(out.read_text())["status"] == "not_applicable"


def test_page_one_says_which_machine_timed_what_and_that_their_offset_is_unknown(tmp_path):
    """Decision records from one machine, a 'not applicable' row and the recipe from another, no configuration timed
    on both: page 1 counts the record files per machine, says which folders each timed, and that ratios joining them
    are not judged (it must not claim a 0 % spread)."""
    from types import SimpleNamespace

    def rec(host, status="ok", variant=None):
        return {
            "stage": "vocab",
            "batch_size": 4,
            "status": status,
            "variant": variant,
            "tokens_per_s": 100.0,
            "provenance": {"host_id": host, "gpu_uuid": None, "commit": "c" * 40, "modified": False},
        }

    files = {
        "vocab__b4.json": rec("host-a"),
        "repeats/vocab__b4__r1.json": rec("host-a", variant="repeat"),
        "ddp__b4.json": rec("host-b", status="not_applicable"),
        "recipe/r0.json": rec("host-b", variant="recipe"),
    }
    for name, body in files.items():
        store.write_atomic(tmp_path / "results" / name, body)
    decisions = [files["vocab__b4.json"], files["repeats/vocab__b4__r1.json"], files["ddp__b4.json"]]
    rep = SimpleNamespace(
        records=decisions,
        decisions=decisions,
        decided={"machine_spread": noise.machine_spread(decisions)},  # as decisions.compute judges it
        evidence={},
        run=None,
        dir=tmp_path,
        params=SimpleNamespace(name="cpu", not_run=[], method=record.METHOD),
    )
    text = tables.provenance_md(rep)
    assert (
        "4 records from 2 machines" in text
        and '<span class="nowrap">host-a</span>: 2' in text
        and "Superseded" not in text
    )
    assert "host-a timed matrix, repeats" in text and "host-b timed recipe" in text
    assert "offset is unknown" in text and "0.0 %" not in text
    assert "Incomplete" not in text

    # Seen on an H100 (2026-11-25): the fourth call's run stopped at its time budget and no call resumed it; page 1
    # counted it among the runs "then resumed" and never said the recipe and the leave-one-out were missing.
    cut = "interrupted after 21 configurations: its time budget (MEASURE_FOR=470 s) was spent"
    earlier = [{"state": "interrupted", "interrupted": "interrupted after 31 configurations"}] * 3
    rep.run = {"state": "interrupted", "interrupted": cut, "earlier_runs": earlier}
    text = tables.provenance_md(rep)
    assert "in 4 runs of the measuring command (3 stopped by their time budget or cut off, then resumed)" in text
    assert f"**Incomplete:** the last run was not resumed ({cut})" in text
    rep.run = {"state": "completed", "earlier_runs": earlier}
    assert "Incomplete" not in tables.provenance_md(rep) and "(3 stopped" in tables.provenance_md(rep)
    rep.run = {"state": "running", "earlier_runs": earlier, "pid": 2**22 + 12345}  # killed: nothing closed the run
    assert "**Incomplete:** the last run was not resumed (the process ended without closing its run" in (
        tables.provenance_md(rep)
    )
    rep.run["pid"] = os.getpid()  # the run drawing its own report is running, and not cut
    assert "Incomplete" not in tables.provenance_md(rep)
    # reports/h100-x4 (2026-11-27): a run killed on a device machine is rendered here, where its pid names another
    # process: a run of another host is never alive here
    rep.run["host_id"] = "host-of-the-device-machine"
    assert "**Incomplete:** the last run was not resumed (the process ended" in tables.provenance_md(rep)


def test_a_leave_one_out_row_from_another_machine_is_not_judged_against_noise():
    """The worth of a lever is the recommendation's median over the row without it: where that row was timed on
    another machine than the recommendation, with no measured offset, it is not called within noise or beyond it."""
    from lib.results import leave_one_out

    def rec(tps, host, variant=None):
        return {
            "stage": "fused",
            "batch_size": 4,
            "status": "ok",
            "variant": variant,
            "tokens_per_s": tps,
            "provenance": {"host_id": host, "gpu_uuid": None},
        }

    decisions = [rec(100.0, "host-a"), rec(100.5, "host-a", "repeat")]
    for host, expected in (("host-a", True), ("host-b", None)):
        ablation = [{**rec(100.1, host, "without TF32"), "lever": "TF32"}]
        _, rows = leave_one_out.leave_one_out(decisions, ablation)  # judged once, in decisions.compute
        assert rows[0]["within_noise"] is expected, host


def test_the_report_says_what_measuring_it_cost_and_what_a_warm_re_measure_would(tmp_path):
    """Seconds per chapter over every run (a cut chapter's parts added), the cold processes' compile time, and the
    estimate of a warm re-measure: each cold first step replaced by the warm processes' median first step."""
    from types import SimpleNamespace

    run = {
        "timings_s": {"compile": 100.0, "batch_sweep": 500.0, "total_s": 600.0},
        "earlier_runs": [{"timings_s": {"fp32": 50.0}, "cut_timings_s": {"compile": 150.0}}],
    }
    for name, state, first, wall in (
        ("compile__b16.json", "cold", 40.0, 60.0),
        ("sweep/compile__b64.json", "cold", 60.0, 80.0),
        ("repeats/compile__b16__r1.json", "warm", 5.0, 20.0),
        ("repeats/compile__b16__r2.json", "warm", 7.0, 22.0),
        ("fp32__b16.json", "not compiled", 1.0, 15.0),
    ):
        store.write_atomic(
            tmp_path / "results" / name, {"compile_cache": {"state": state}, "first_step_s": first, "wall_s": wall}
        )
    rep = SimpleNamespace(run=run, dir=tmp_path, params=SimpleNamespace(stages=["fp32", "compile"], chapters=[]))
    assert cost_view.chapter_seconds(run) == {"fp32": 50.0, "compile": 250.0, "batch_sweep": 500.0}
    costs = cost_view.compile_costs([json.loads(p.read_text()) for p in (tmp_path / "results").rglob("*.json")])
    assert costs["cold"]["processes"] == 2 and costs["cold"]["first_step_s"] == 100.0
    assert cost_view.warm_estimate(800.0, costs) == 800.0 - 100.0 + 2 * 6.0
    text = cost_view.cost_html(rep)
    assert (
        "over 2 runs of" in text
        and "2 processes compiled their graphs cold: the first step of each took 100 s in it, 12%" in text
    )
    # A process that records no first step (the plain loop) is not counted in the sum it is not part of.
    store.write_atomic(tmp_path / "results" / "crosscheck" / "plain.json", {"compile_cache": {"state": "cold"}})
    assert "3 processes compiled their graphs cold: the first step of the 2 that record one took 100 s in it" in (
        cost_view.cost_html(rep)
    )
    assert "about 12 minutes" in text and "<td>all chapters</td>" in text and "<td>800</td>" in text
    assert "no run.json" in cost_view.cost_html(SimpleNamespace(run=None))


def test_the_launcher_imports_once_what_each_child_would_and_initialises_no_device():
    """torch._dynamo imported in the launcher spares each child its import; nothing preloaded may leave a
    forked child unable to use the GPU. Inductor's compile_fx did, on two H200s: on a GPU backend a throwaway
    child tries it first and it is left out (once, with the reason in the log) where a child forked after it
    could not compute on the GPU; a preload after which a forked child is in PyTorch's bad-fork state is
    refused with its name (both simulated: no GPU here)."""
    code = (
        "import sys, torch; from lib.measure import preload; preload.preload(); "
        "print(all(m in sys.modules for m in preload.PRELOADED), 'torch._inductor.compile_fx' in sys.modules, "
        "torch.cuda.is_initialized())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["True", "False", "False"]  # before the jobs' backend is known: dynamo alone
    # Asked through the CUDA runtime, 'is CUDA available' left every later fork unable to use an H100's GPU once
    # Inductor was imported; asked through NVML it did not (tools/probe_preload.py). Set before the first import.
    code = "import os; from lib.measure import preload; preload.preload(); print(os.environ['PYTORCH_NVML_BASED_CUDA_CHECK'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["1"]
    code = "import sys; from lib.measure import preload; preload.preload('{}'); print('torch._inductor.compile_fx' in sys.modules)"
    for backend in ("cpu", "cuda"):  # the CPU directly; a GPU backend after its trial, clean here
        out = subprocess.run([sys.executable, "-c", code.format(backend)], capture_output=True, text=True, cwd=ROOT)
        assert out.stdout.split() == ["True"], (backend, out.stderr[-500:])
    code = (
        "import sys; from lib.measure import preload\n"
        "preload.fork_is_clean = lambda use_device=False, **k: not use_device  # computing on the GPU fails\n"
        "trials = []; tried = preload.trial_import\n"
        "preload.trial_import = lambda name: trials.append(name) or tried(name)\n"
        "preload.preload('cuda'); preload.preload('cuda')\n"
        "print('torch._inductor.compile_fx' in sys.modules, len(trials))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "1"], out.stderr[-500:]
    assert "torch._inductor.compile_fx not preloaded: a child forked after it could not use the GPU" in out.stderr
    code = "import torch; from lib.measure import preload; torch.cuda._is_in_bad_fork = lambda: True; preload.preload()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0 and "preloading torch._dynamo left the launcher unable to fork" in out.stderr


def test_the_compile_chapter_names_the_sitting_that_compiled_cold():
    """A warm run quotes the cold compile from the cache's ledger; where that process belongs to another sitting
    (the one that filled the cache this run started from), its commit and machine are named, so a reader of a
    one-sitting report sees that figure came from elsewhere (reports/h200-x2 quoted 21.2 s from the earlier run)."""
    from lib.report.loader import compile_time_text

    here = {"commit": "4e48e808033b", "host_id": "host-cf7df40068d2"}
    cold = {"first_step_s": 21.2, "finished_at": "2026-11-26T01:05:40", "commit": "f826bfef093d", "host_id": "host-60a"}
    rec = {"batch_size": 64, "first_step_s": 3.6, "provenance": here, "compile_cache": {"state": "warm", "cold": cold}}
    text = compile_time_text(rec)
    assert "21.2 s cold" in text and "by commit f826bfe on host-60a" in text and "took 3.6 s" in text
    rec["compile_cache"]["cold"] = {**cold, **here}
    assert "in this sitting" in compile_time_text(rec) and "f826bfe" not in compile_time_text(rec)


def test_a_record_no_run_of_the_report_measured_takes_no_part_in_it(pipeline_ok, tmp_path):
    """Seen on an H100 (2026-11-26): between two calls of one sitting, 48 records of another sitting (commit 1459691,
    another host, the day before) appeared in the run's results/ on the device, with no run.json entry; the next
    call's measuring code read them (a parity test of a lever this sitting never tested). A record that no run in
    run.json measured is a stray: decisions, tables and page 1 leave it out, and page 1 says so; nothing is deleted.
    Here the stray is the recommended stage at a new batch size, ten times faster: taken in, it would win."""
    import shutil

    from lib.core.params import Params
    from lib.report import loader

    report = tmp_path / "cpu"
    shutil.copytree(pipeline_ok.report_dir, report)
    params = Params.read(report / "params.json")
    before = decide.best_config(store.decision_records(report / "results"), params)
    stray = json.loads(json.dumps(before))  # the record decide chose, as another sitting might have left it
    stray["batch_size"] = before["batch_size"] * 3
    stray["tokens_per_s"] *= 10
    stray["provenance"] = {**stray["provenance"], "commit": "1459691" + "0" * 33, "host_id": "host-elsewhere"}
    store.write_atomic(report / "results" / "sweep" / f"{before['stage']}__b{stray['batch_size']}.json", stray)

    after = decide.best_config(store.decision_records(report / "results"), params)
    assert (after["stage"], after["batch_size"]) == (before["stage"], before["batch_size"])
    assert [path.name for path, _ in store.every_record(report)[1]] == [
        f"{before['stage']}__b{stray['batch_size']}.json"
    ]
    rep = loader.load(report)
    assert all(r.get("provenance", {}).get("host_id") != "host-elsewhere" for r in rep.decisions + rep.records)
    text = tables.provenance_md(rep)
    assert (
        "**Left out:** 1 record in results/ that no run of this report measured (code 1459691 on host-elsewhere" in text
    )
    assert (report / "results" / "sweep" / f"{before['stage']}__b{stray['batch_size']}.json").exists()
    # without a run.json (an older report) a folder's records are taken as they are
    (report / "run.json").unlink()
    assert store.every_record(report)[1] == []


def test_what_the_launcher_says_of_its_preloads_reaches_the_run_log(capsys):
    """The launcher's stderr is kept for error records only; its own notes (whether Inductor was preloaded on a GPU,
    and why not) must reach the log, or a GPU run cannot show which way it went (the H100 run of e1a43f1 could not)."""
    import io

    from lib.run import runner

    lines: list[str] = []
    runner.drain(io.StringIO("W some warning\nlauncher: torch._inductor.compile_fx preloaded (...)\n"), lines)
    assert len(lines) == 2
    assert capsys.readouterr().out == "launcher: torch._inductor.compile_fx preloaded (...)\n"
