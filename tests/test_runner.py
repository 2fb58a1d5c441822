"""lib/run/runner.py: each configuration in its own process; a process that fails still leaves a
result (an error record), and run_stage itself never raises for it."""

from __future__ import annotations

import json

import pytest
from conftest import read_json, tiny_params

from lib.core import paths
from lib.results import store
from lib.run import runner


@pytest.fixture(scope="module")
def crashed_stage(tmp_path_factory):
    """run_stage with parameters that passed validation but make GPTConfig raise in the
    measuring child (n_head no longer divides n_embd)."""
    report_dir = tmp_path_factory.mktemp("runner") / "cpu"
    params = tiny_params(batch_sizes=(2,))
    params.model.n_head = 3
    recs = runner.run_stage("fp32", params, report_dir)
    return recs, report_dir, params


def test_crash_in_the_child_is_an_error_record(crashed_stage):
    recs, _, _ = crashed_stage
    assert len(recs) == 1
    rec = recs[0]
    assert rec["status"] == "error"
    assert (rec["stage"], rec["batch_size"]) == ("fp32", 2)
    assert rec["reason"].startswith("measurement process failed (exit 1)")
    assert "not divisible by n_head" in rec["reason"]  # the child's last words
    assert "Traceback" in rec["stderr_tail"]


def test_crash_in_the_child_writes_the_error_record_to_results(crashed_stage):
    recs, report_dir, _ = crashed_stage
    path = store.record_path(report_dir / "results", "fp32", 2)
    assert read_json(path) == json.loads(json.dumps(recs[0]))
    assert store.load_records(report_dir / "results")[0]["status"] == "error"


def test_run_stage_captures_the_environment_and_leaves_params_to_the_run(crashed_stage):
    """The run's one params object is the CLI's (or, by hand, the first measurement's): a stage
    measured into a report never rewrites it."""
    _, report_dir, params = crashed_stage
    env = read_json(report_dir / "environment.json")
    assert env["device"]["backend"] == "cpu"
    assert not (report_dir / "params.json").exists()


def test_environment_is_captured_once_and_then_read_back(tmp_path):
    (tmp_path / "environment.json").write_text(json.dumps({"device": {"backend": "mps", "name": "m"}}))
    assert runner.environment(tmp_path)["device"]["name"] == "m"


def test_stage_the_device_cannot_run_is_not_applicable_without_a_process(tmp_path, monkeypatch):
    (tmp_path / "environment.json").write_text(json.dumps({"device": {"backend": "mps", "name": "mps"}}))

    def no_process(*args, **kwargs):
        raise AssertionError("nothing should be launched for a not-applicable stage")

    monkeypatch.setattr(runner.subprocess, "Popen", no_process)
    params = tiny_params(batch_sizes=(2, 4))
    recs = runner.run_stage("tf32", params, tmp_path)
    assert [(r["status"], r["batch_size"]) for r in recs] == [("not_applicable", 2), ("not_applicable", 4)]
    assert all("TF32" in r["reason"] for r in recs)
    assert {p.name for p in (tmp_path / "results").glob("*.json")} == {"tf32__b2.json", "tf32__b4.json"}


def test_resolve_keeps_absolute_paths_and_anchors_relative_ones_at_the_repository(tmp_path):
    assert paths.resolve(tmp_path) == tmp_path
    assert paths.resolve("reports/lab") == paths.ROOT / "reports" / "lab"


def test_describe_names_the_status_of_a_failed_configuration(cpu_params):
    rec = runner.error_record(cpu_params, "bf16", 8, "it broke", "line1\nline2")
    assert rec["status"] == "error" and rec["stderr_tail"].endswith("line2")
    line = runner.describe(rec)
    assert "bf16" in line and "B=8" in line and "ERROR: it broke" in line


# ---------------------------------------------------------------- resume: valid earlier results are kept

CPU_ENV = {"device": {"backend": "cpu", "name": "test-cpu"}, "torch": "x"}


class Launched(Exception):
    """Raised instead of starting the measuring process."""


@pytest.fixture
def report_without_processes(tmp_path, monkeypatch):
    """A report folder with a known environment, where launching a measurement raises Launched."""
    store.write_atomic(tmp_path / "environment.json", CPU_ENV)

    def launch(*args, **kwargs):
        raise Launched()

    monkeypatch.setattr(runner, "_launcher", launch)
    return tmp_path


def earlier_result(report_dir, params, status="ok"):
    from lib.core import stages

    rec = store.base_record(params, stages.get("fp32"), 2)
    rec.update(
        status=status,
        reason=None if status == "ok" else "x",
        median_ms=1.0,
        tokens_per_s=1.0,
        cv=0.0,
        final_loss=1.0,
        fingerprint=store.fingerprint(params, CPU_ENV, stages.get("fp32"), 2),
    )
    store.write_atomic(store.record_path(report_dir / "results", "fp32", 2), rec)
    return rec


def test_valid_earlier_result_of_the_same_setup_is_kept(report_without_processes):
    params = tiny_params(batch_sizes=(2,))
    rec = earlier_result(report_without_processes, params)
    assert runner.run_stage("fp32", params, report_without_processes) == [rec]


def test_force_measures_again(report_without_processes):
    params = tiny_params(batch_sizes=(2,))
    earlier_result(report_without_processes, params)
    with pytest.raises(Launched):
        runner.run_stage("fp32", params, report_without_processes, force=True)


def test_an_earlier_error_is_measured_again(report_without_processes):
    params = tiny_params(batch_sizes=(2,))
    earlier_result(report_without_processes, params, status="error")
    with pytest.raises(Launched):
        runner.run_stage("fp32", params, report_without_processes)


def test_a_result_of_another_workload_is_measured_again_and_never_stands_in(report_without_processes):
    params = tiny_params(batch_sizes=(2,))
    earlier_result(report_without_processes, params)
    params.run.seed += 1
    with pytest.raises(Launched):
        runner.run_stage("fp32", params, report_without_processes)
    assert not store.record_path(report_without_processes / "results", "fp32", 2).exists()


def test_one_launcher_serves_every_batch_and_a_dead_one_is_replaced(tmp_path):
    """PyTorch is imported once per run: later batches reuse the launcher; if it dies, the next
    batch starts another and still measures."""
    import signal

    params = tiny_params(batch_sizes=(2,))
    assert runner.run_stage("fp32", params, tmp_path)[0]["status"] == "ok"
    env = runner.environment(tmp_path)
    first = runner._launcher(env)[0]
    assert runner.run_stage("tf32", params, tmp_path)[0]["status"] == "ok"
    assert runner._launcher(env)[0] is first
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert runner.run_stage("bf16", params, tmp_path)[0]["status"] == "ok"
    assert runner._launcher(env)[0] is not first
