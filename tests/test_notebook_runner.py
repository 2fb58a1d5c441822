"""The chapters are drawn two at a time: the report still lists them in chapter order, with every failure, and
the summary, which spans them, runs after all of them."""

from __future__ import annotations

import json
import threading
import time

from conftest import tiny_params

from lib.core import chapters
from lib.run import notebook_runner


def test_chapters_drawn_side_by_side_come_back_in_order_with_their_failures(tmp_path, monkeypatch):
    params = tiny_params(["fp32", "tf32", "bf16", "flash"], batch_sizes=(2,))
    order = chapters.order(params.stages, params.chapters)
    running, most, calls = set(), [0], []
    lock = threading.Lock()

    def fake(src, dest, parameters, inputs=None):
        key = parameters.get("chapter", "summary")
        with lock:
            running.add(key)
            most[0] = max(most[0], len(running))
            calls.append((key, set(running)))
        time.sleep(0.2 if key == order[0].key else 0.05)  # the first finishes last
        with lock:
            running.discard(key)
        dest.write_text("{}")
        return f"{dest.name}: broken" if key == order[1].key else None

    monkeypatch.setattr(notebook_runner, "run_notebook", fake)
    monkeypatch.setattr(notebook_runner.os, "cpu_count", lambda: 2)
    failures, done, timings, kept = notebook_runner.draw(tmp_path, params)
    assert [d.name for d in done] == [c.notebook for c in order] and not kept
    assert failures[0] == f"{order[1].notebook}: broken"
    assert most[0] == 2  # two at a time
    assert calls[-1] == ("summary", {"summary"})  # alone, after every chapter
    assert set(timings) == {c.key for c in order} | {"summary"}


def test_a_notebook_drawn_from_unchanged_inputs_is_kept(tmp_path, monkeypatch, capsys):
    """A resume that measured nothing re-ran every notebook (about 60 s on two cores): a notebook whose records,
    params, run.json's measuring account and code are those it was drawn from is kept, and the report with it."""
    from conftest import write_report_dir

    from lib.results import store

    params = tiny_params(["fp32", "tf32"], batch_sizes=(2,))
    report_dir = write_report_dir(tmp_path / "cpu", params, [])
    store.write_atomic(report_dir / "run.json", {"state": "completed", "timings_s": {"fp32": 1.0}})
    code = tmp_path / "code.py"
    code.write_text("x = 1\n")
    monkeypatch.setattr(notebook_runner, "CODE", (str(code),))
    monkeypatch.delenv("PRICE_PER_GPU_HOUR", raising=False)
    ran = []

    def fake(src, dest, parameters, inputs=None):
        ran.append(dest.name)
        dest.write_text(json.dumps({"cells": [], "metadata": {}}))
        notebook_runner._stamp(dest, inputs)

    monkeypatch.setattr(notebook_runner, "run_notebook", fake)
    every = [c.notebook for c in chapters.order(params.stages, params.chapters)] + ["summary.ipynb"]

    def draw() -> tuple[list[str], bool]:
        ran.clear()
        *_, kept = notebook_runner.draw(report_dir, params)
        return sorted(ran), kept

    assert draw() == (sorted(every), False)
    assert draw() == ([], True)
    assert "[notebooks] " + f"{len(every)} of {len(every)} kept" in capsys.readouterr().out
    # what drawing adds to run.json changes nothing the notebooks read
    store.write_atomic(
        report_dir / "run.json",
        {"state": "completed", "timings_s": {"fp32": 1.0, "html_s": 2.0}, "notebooks_s": {}, "renders": [{}]},
    )
    assert draw() == ([], True)
    for change in (
        lambda: store.write_atomic(report_dir / "results" / "tf32__b2.json", {"stage": "tf32"}),  # a record
        lambda: code.write_text("x = 2\n"),  # the code that draws them
        lambda: monkeypatch.setenv("PRICE_PER_GPU_HOUR", "2.5"),  # what the report reads while it draws
    ):
        change()
        assert draw() == (sorted(every), False)
        assert draw() == ([], True)
    assert notebook_runner.draw(report_dir, params, keep=False)[-1] is False  # make render draws afresh


def test_the_report_is_kept_only_where_it_was_exported_after_its_notebooks(tmp_path):
    notebooks = [tmp_path / "a.ipynb", tmp_path / "summary.ipynb"]
    for p in notebooks:
        p.write_text("{}")
    assert not notebook_runner.exported_from(tmp_path, notebooks)  # no report yet
    for name in ("report.pdf", "report.html"):
        (tmp_path / name).write_text("x")
    assert notebook_runner.exported_from(tmp_path, notebooks)
    import os

    later = (tmp_path / "report.html").stat().st_mtime + 5
    os.utime(notebooks[0], (later, later))  # drawn again after the export
    assert not notebook_runner.exported_from(tmp_path, notebooks)


def test_the_closing_line_gives_the_notebooks_wall_time_not_the_sum_of_chapters(pipeline_ok):
    """Drawn two at a time, the chapters' own seconds add up to more than the drawing took: the line
    `make report` ends with adds up to its total."""
    import re

    m = re.search(r"done in (\d+) s \(measurement (\d+) s, notebooks (\d+) s", pipeline_ok.proc.stdout)
    assert m, pipeline_ok.proc.stdout[-2000:]
    total, measured, drawn = map(int, m.groups())
    assert measured + drawn <= total + 1


def test_a_kernel_is_shut_down_without_an_interrupt(monkeypatch):
    """jupyter_client sends SIGINT to a kernel before asking it to shut down, and ipykernel logged it as
    '[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel.' on the console of a run that succeeded."""
    import asyncio
    import signal

    manager = notebook_runner._kernel_manager()
    sent, real = [], manager._async_signal_kernel

    async def spy(self, signum):
        sent.append(signum)
        await real(self, signum)

    monkeypatch.setattr(manager, "_async_signal_kernel", spy)

    async def start_and_stop() -> bool:
        km = manager(kernel_name="python3")
        await km.start_kernel()
        await km.shutdown_kernel()
        return await km.is_alive()

    assert asyncio.run(start_and_stop()) is False  # the shutdown request alone stopped it
    assert signal.SIGINT not in sent


def test_an_executed_notebook_records_paths_inside_the_checkout_relative_to_it(tmp_path):
    """`make render` and `make compare` left 73 committed notebooks modified on another checkout: each carried the
    absolute path of the checkout that drew it (its report_dir parameter, papermill's input and output paths). A
    path inside the checkout is now recorded relative to it (every kernel runs there); one outside stays absolute."""
    from lib.core.paths import ROOT

    assert notebook_runner.portable(ROOT / "reports" / "h100") == "reports/h100"
    assert notebook_runner.portable(tmp_path / "cpu") == str(tmp_path / "cpu")
    nb = tmp_path / "chapter.ipynb"
    meta = {"input_path": str(ROOT / "notebooks" / "chapter.ipynb"), "output_path": str(ROOT / "reports" / "x.ipynb")}
    nb.write_text(json.dumps({"cells": [], "metadata": {"papermill": meta}}))
    notebook_runner._stamp(nb, None)
    got = json.loads(nb.read_text())["metadata"]
    assert got["papermill"] == {"input_path": "notebooks/chapter.ipynb", "output_path": "reports/x.ipynb"}
    assert notebook_runner.INPUTS_KEY not in got  # no digest given: none written
