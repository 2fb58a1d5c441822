"""Reliability: resume after a killed run, failure isolation with injected faults, no lost
reports, the per-profile lock, and bad inputs that must leave earlier reports untouched.

Faults are injected with GPT2_LEVERS_FAULT (lib/measure/faults.py). Runs use one batch size
(BATCHES=2) to keep the suite short; the full pipeline is covered in test_pipeline.py."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, cli_env, describe_proc, read_json, run_cli

from lib.core import config, data
from lib.run import report_folder

FAST = {"BATCHES": "2", "FORCE": "0", "GPT2_LEVERS_FAULT": ""}


def _records(report_dir: Path) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in sorted((report_dir / "results").glob("*.json"))}


def _our_processes() -> list[str]:
    """Measurement launchers or kernels still running from this checkout, but for the launcher of
    this test process itself (in-process tests keep one for the session)."""
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    rows = [ln.split(None, 2) for ln in out.splitlines()[1:]]
    return [
        " ".join(r)
        for r in rows
        if len(r) == 3
        and r[1] != str(os.getpid())
        and ("lib.measure.worker" in r[2] or ("ipykernel" in r[2] and "gpt2-levers" in r[2]))
        and _cwd(r[0]) in (None, str(ROOT.resolve()))  # another checkout's test run on the same machine is not ours
    ]


def _cwd(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None  # gone, or not ours to read: counted, as before


def _earlier_report(reports: Path) -> Path:
    """A stand-in for an earlier report of the cpu profile, to check nothing touches it."""
    earlier = reports / "cpu"
    (earlier / "results").mkdir(parents=True)
    (earlier / "report.html").write_text("earlier report")
    return earlier


# ---------------------------------------------------------------- killed run, resume


def test_killed_run_leaves_no_half_result_and_the_next_run_resumes(tmp_path):
    reports = tmp_path / "reports"
    env = cli_env(REPORTS=reports, **FAST)
    proc = subprocess.Popen(
        [sys.executable, "-m", "lib.cli", "report"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = reports / "cpu" / "results" / "tf32__b2.json"
    deadline = time.monotonic() + 240
    while not first.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert first.exists(), "the run never produced its second result"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20  # the kernel notices within a second or so, then the launcher follows it
    while _our_processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _our_processes() == []
    results_dir = reports / "cpu" / "results"
    assert not [p for p in results_dir.rglob("*") if p.is_file() and not p.name.endswith(".json")], (
        "a temporary file was left"
    )
    kept = _records(reports / "cpu")
    assert {"fp32__b2", "tf32__b2"} <= set(kept)
    mtimes = {p.name: p.stat().st_mtime_ns for p in results_dir.glob("*.json")}

    again = run_cli("report", REPORTS=reports, **FAST)
    assert again.returncode == 0, describe_proc(again)
    assert "resuming the cpu report" in again.stdout
    # the records it keeps are one line, not one each
    assert re.search(r"^kept \d+ configurations measured by an earlier run", again.stdout, re.M), again.stdout
    assert "(kept from an earlier run)" not in again.stdout
    for name, mtime in mtimes.items():
        assert (results_dir / name).stat().st_mtime_ns == mtime, f"{name} was measured again"
    # DDP replicates the best configuration, whose batch size the batch sweep may have raised.
    names = set(_records(reports / "cpu"))
    assert {n for n in names if not n.startswith("ddp__")} == {
        f"{s}__b2" for s in config.load("cpu").stages if s != "ddp"
    }
    assert len([n for n in names if n.startswith("ddp__")]) == 1
    assert (reports / "cpu" / "report.pdf").exists()


# ---------------------------------------------------------------- failure isolation


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    reports = tmp_path_factory.mktemp("faulty")
    proc = run_cli(
        "report",
        REPORTS=reports,
        BATCHES="2",
        FORCE="0",
        GPT2_LEVERS_FAULT="tf32:kill,bf16:oom,flash:nan,vocab:stage-raise",
    )
    return proc, reports / "cpu"


def test_faults_are_rows_and_the_run_still_renders_everything(faulty_run):
    proc, report_dir = faulty_run
    assert proc.returncode == 1, describe_proc(proc)  # something failed: non-zero, but a report exists
    recs = _records(report_dir)
    assert recs["fp32__b2"]["status"] == "ok"
    assert recs["tf32__b2"]["status"] == "error" and "signal 9" in recs["tf32__b2"]["reason"]
    assert recs["bf16__b2"]["status"] == "oom" and "out of memory" in recs["bf16__b2"]["reason"]
    assert recs["flash__b2"]["status"] == "diverged"
    assert "vocab__b2" not in recs  # its chapter raised before measuring
    assert (report_dir / "report.html").exists() and (report_dir / "report.pdf").exists()
    run = json.loads((report_dir / "run.json").read_text())
    assert any(f.startswith("vocab: RuntimeError") and "injected fault" in f for f in run["failures"])


def test_the_summary_shows_each_failure_plainly(faulty_run):
    proc, report_dir = faulty_run
    html = (report_dir / "report.html").read_text()
    assert "Failures in this run" in html
    assert "vocab: RuntimeError" in html and "injected fault" in html
    assert "OOM" in html and "DIVERGED" in html and "ERROR" in html
    # the diverged lever is skipped for its quality, as the decisions the report lays out say
    (flash,) = [lever for lever in read_json(report_dir / "decisions.json")["levers"] if lever["stage"] == "flash"]
    assert flash["decision"] == "skip" and flash["quality"]["verdict"] == "failed"
    assert "vocab: RuntimeError: injected fault" in proc.stderr  # and the terminal says it too


def test_a_raising_measurement_is_an_error_row_not_a_crash(tmp_path, monkeypatch):
    from lib.run import runner

    monkeypatch.setenv("GPT2_LEVERS_FAULT", "fp32:raise")
    params = config.load("cpu", [2])
    recs = runner.run_stage("fp32", params, tmp_path / "rep")
    assert recs[0]["status"] == "error"
    assert "injected fault" in recs[0]["reason"]


# ---------------------------------------------------------------- no lost reports


def test_force_keeps_the_earlier_report_in_the_archive(tmp_path):
    reports = tmp_path / "reports"
    earlier = _earlier_report(reports)
    (earlier / "params.json").write_text(json.dumps(config.load("cpu", [2]).to_dict()))
    moved = report_folder.archive_previous(earlier)
    assert moved.parent == reports / "archive" and moved.name.startswith("cpu-")
    assert (moved / "report.html").read_text() == "earlier report"
    assert not earlier.exists()


def test_resume_only_for_the_same_workload_and_machine(tmp_path):
    env = {"device": {"backend": "cpu", "name": "x"}, "torch": "2.13"}
    params = config.load("cpu", [2])
    report_dir = tmp_path / "cpu"
    report_dir.mkdir()
    (report_dir / "params.json").write_text(json.dumps(params.to_dict()))
    (report_dir / "environment.json").write_text(json.dumps(env))
    assert report_folder.same_setup(report_dir, params, env)
    assert not report_folder.same_setup(report_dir, config.load("cpu", [2, 4]), env)
    assert not report_folder.same_setup(report_dir, params, {**env, "torch": "2.14"})
    changed = copy.deepcopy(params)
    changed.run.seed += 1
    assert not report_folder.same_setup(report_dir, changed, env)


# ---------------------------------------------------------------- lock


def test_a_second_report_for_the_same_profile_is_refused_while_one_runs(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    held = report_folder.take_lock(reports, "cpu")
    try:
        proc = run_cli("report", REPORTS=reports, **FAST)
    finally:
        held.close()
    assert proc.returncode == 2, describe_proc(proc)
    assert proc.stderr.strip().startswith("error:") and "already running" in proc.stderr
    assert not (reports / "cpu").exists()


# ---------------------------------------------------------------- bad inputs leave earlier reports alone


@pytest.fixture
def prepared_data_copy(tmp_path):
    dest = tmp_path / "data"
    dest.mkdir()
    for name in ("gpt2.tiktoken", "corpus.txt", "tokens.npy", "manifest.json"):
        shutil.copy(data.DATA_DIR / name, dest / name)
    return dest


@pytest.mark.parametrize(
    "damage, expected",
    [
        ("corrupt-ranks", "tokenizer ranks"),
        ("missing-corpus", "is missing"),
        ("corrupt-corpus", "is corrupt"),
    ],
)
def test_bad_data_is_one_line_and_earlier_reports_are_untouched(tmp_path, prepared_data_copy, damage, expected):
    if damage == "corrupt-ranks":
        with open(prepared_data_copy / "gpt2.tiktoken", "ab") as f:
            f.write(b"x")
    elif damage == "missing-corpus":
        (prepared_data_copy / "corpus.txt").unlink()
    else:
        (prepared_data_copy / "corpus.txt").write_text("not the corpus")
    reports = tmp_path / "reports"
    earlier = _earlier_report(reports)
    proc = run_cli("report", REPORTS=reports, GPT2_LEVERS_DATA=prepared_data_copy, **FAST)
    assert proc.returncode == 2, describe_proc(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0]
    assert (earlier / "report.html").read_text() == "earlier report"
    assert not (reports / "archive").exists()


def test_an_unwritable_reports_folder_is_refused(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the reports folder should be")
    proc = run_cli("report", REPORTS=blocker / "reports", **FAST)
    assert proc.returncode == 2, describe_proc(proc)
    assert proc.stderr.strip().startswith("error: cannot write reports")


def test_make_never_runs_a_gpu_name_as_a_command(tmp_path):
    marker = tmp_path / "pwned"
    env = cli_env(REPORTS=tmp_path / "reports")
    proc = subprocess.run(
        ["make", "-s", "report", f"GPU=x;touch {marker}", f"BATCHES=$(touch {marker})"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert not marker.exists()
    assert "error:" in proc.stderr and "may only use a-z" in proc.stderr
