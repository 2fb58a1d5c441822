"""A resume that measures nothing new: one line for the configurations it keeps, no chapter headings for chapters
that measure nothing, and run.json left as the run before it wrote it (this run is one of its renders), so the
notebooks drawn from it are kept (tests/test_notebook_runner.py)."""

from __future__ import annotations

import atexit
import json
import signal

import pytest
from conftest import read_json

from lib.core import chapters
from lib.run import report_folder, run_log, runner

ENV = {"device": {"backend": "cpu", "name": "cpu"}}


@pytest.fixture
def new_log(cpu_params, tmp_path):
    """RunLog(...) for tmp_path, its signal handlers and exit hook undone after the test."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    made = []

    def make(earlier=()):
        log = run_log.RunLog(tmp_path, cpu_params, ENV, list(earlier), "make report")
        atexit.unregister(log._at_exit)
        made.append(log)
        return log

    yield make
    for log in made:
        atexit.unregister(log._at_exit)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _record(stage: str, batch: int) -> dict:
    return {"stage": stage, "batch_size": batch, "status": "ok", "fingerprint": f"{stage}{batch}", "tokens_per_s": 1.0}


def _measure(log, order, kept: bool, monkeypatch, capsys) -> str:
    """Every chapter of `order` reports one record, kept or measured, as runner._finished does."""
    monkeypatch.setattr(runner, "OBSERVERS", [log])
    monkeypatch.setattr(runner, "describe", lambda rec: f"{rec['stage']} B={rec['batch_size']}")
    for i, chapter in enumerate(order, 1):
        log.chapter(i, order)
        runner._finished({}, _record(chapter.key, 2), kept=kept)
        log.chapter_done(chapter.key, 0.5)
    if line := log.kept_line():
        print(line)
    return capsys.readouterr().out


def test_a_resume_that_measured_nothing_prints_one_line_and_keeps_the_earlier_account(
    new_log, cpu_params, tmp_path, monkeypatch, capsys
):
    """It printed a heading for every chapter and 62 '(kept from an earlier run)' lines, and run.json took a new run
    entry, which changed what the summary is drawn from: every notebook ran again (about 60 s)."""
    order = chapters.order(cpu_params.stages, cpu_params.chapters)[:3]
    first = new_log()
    out = _measure(first, order, kept=False, monkeypatch=monkeypatch, capsys=capsys)
    assert out.count("[measure ") == 3 and "kept" not in out
    assert first.measured(completed=True) is False  # it measured: a run of its own
    drawn_from = run_log.measuring_account(read_json(tmp_path / "run.json"))
    first.rendered({"html_s": 1.0, "pdf_s": 2.0, "pdf_error": None}, {"fp32": 3.0}, [])
    before = read_json(tmp_path / "run.json")
    assert before["timings_s"]["html_s"] == 1.0 and run_log.measuring_account(before) == drawn_from

    again = new_log(earlier=report_folder.earlier_runs(tmp_path))
    out = _measure(again, order, kept=True, monkeypatch=monkeypatch, capsys=capsys)
    assert out.strip().splitlines() == [
        "kept 3 configurations measured by an earlier run (FORCE=1 re-measures them); nothing new to measure"
    ]
    assert again.measured(completed=True) is True
    again.rendered({"html_s": 0.0, "pdf_s": 0.0, "pdf_error": None}, {}, [])
    after = read_json(tmp_path / "run.json")
    assert run_log.measuring_account(after) == drawn_from  # what the notebooks read is what they were drawn from
    assert {k: v for k, v in after.items() if k != "renders"} == before
    (render,) = after["renders"]
    assert render["kept"] == 3 and render["command"] == "make report" and render["failures"] == []


def test_a_resume_that_measures_something_is_a_run_of_its_own(new_log, cpu_params, tmp_path, monkeypatch, capsys):
    order = chapters.order(cpu_params.stages, cpu_params.chapters)[:2]
    first = new_log()
    _measure(first, order, kept=False, monkeypatch=monkeypatch, capsys=capsys)
    first.measured(completed=True)
    first.rendered({}, {}, [])
    before = read_json(tmp_path / "run.json")
    again = new_log(earlier=report_folder.earlier_runs(tmp_path))
    monkeypatch.setattr(runner, "OBSERVERS", [again])
    monkeypatch.setattr(runner, "describe", lambda rec: f"{rec['stage']} B={rec['batch_size']}")
    again.chapter(1, order)
    runner._finished({}, _record(order[0].key, 2), kept=True)
    again.chapter_done(order[0].key, 0.1)
    again.chapter(2, order)
    runner._finished({}, _record(order[1].key, 4), kept=False)
    again.chapter_done(order[1].key, 0.1)
    out = capsys.readouterr().out
    assert "[measure 1/" not in out and "[measure 2/" in out  # the heading of the chapter that measured, alone
    assert f"{order[1].key} B=4" in out and f"{order[0].key} B=2" not in out
    assert again.measured(completed=True) is False
    run = read_json(tmp_path / "run.json")
    assert run["configurations"]["measured"] == 1 and len(run["earlier_runs"]) == 1 and run["state"] == "completed"
    earlier = {k: v for k, v in before.items() if k != "earlier_runs"}
    assert json.dumps(run["earlier_runs"][0], sort_keys=True) == json.dumps(earlier, sort_keys=True)
