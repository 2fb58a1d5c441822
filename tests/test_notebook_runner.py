"""The chapters are drawn two at a time: the report still lists them in chapter order, with every failure, and
the summary, which spans them, runs after all of them."""

from __future__ import annotations

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

    def fake(src, dest, parameters):
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
    failures, done, timings = notebook_runner.draw(tmp_path, params)
    assert [d.name for d in done] == [c.notebook for c in order]
    assert failures[0] == f"{order[1].notebook}: broken"
    assert most[0] == 2  # two at a time
    assert calls[-1] == ("summary", {"summary"})  # alone, after every chapter
    assert set(timings) == {c.key for c in order} | {"summary"}


def test_the_closing_line_gives_the_notebooks_wall_time_not_the_sum_of_chapters(pipeline_ok):
    """Drawn two at a time, the chapters' own seconds add up to more than the drawing took: the line
    `make report` ends with adds up to its total."""
    import re

    m = re.search(r"done in (\d+) s \(measurement (\d+) s, notebooks (\d+) s", pipeline_ok.proc.stdout)
    assert m, pipeline_ok.proc.stdout[-2000:]
    total, measured, drawn = map(int, m.groups())
    assert measured + drawn <= total + 1
