"""The run as it goes: run.json rewritten atomically after every configuration (so a run cut off by a
time limit or a kill leaves a truthful account), and the progress line a person can plan by (elapsed
time and what is left, per chapter and for the run). Only this program writes run.json.

A run that is killed outright cannot write its end: its run.json then says "running", and the next
program to open the folder (a resumed run, a render) settles it as interrupted after the
configurations it recorded.

The measuring part of a run is its account (measuring_account); what drawing the report adds (the notebooks'
and the export's seconds, their failures, the re-renders) is kept beside it, so a notebook's inputs do not change
when only the drawing did (lib/run/notebook_runner.py). A resume that measured nothing new is no measuring run:
run.json keeps the account of the run before it and lists the drawing among its renders."""

from __future__ import annotations

import atexit
import datetime as dt
import json
import os
import signal
import time
from pathlib import Path

from lib.core import config, provenance, record, stages
from lib.core.params import Params
from lib.results import store

BUDGET_VAR = "MEASURE_FOR"  # seconds this run may measure; then it stops between configurations, resumable
# What tells one record of a report folder from another (a configuration, its process, its parity seed and run).
IDENTITY = ("stage", "batch_size", "fingerprint", "variant", "repeat", "replicate", "seed_offset", "kind")
# What drawing the report adds to a run's entry after its measuring (RunLog.rendered), and its re-renders.
DRAWING_KEYS = ("notebooks_s", "drawing_failures", "renders")
DRAWING_TIMINGS = ("html_s", "pdf_s", "pdf_error")


def measuring_account(run: dict) -> dict:
    """run.json without what drawing the report added to it: what the report's notebooks are drawn from."""
    out = {k: v for k, v in run.items() if k not in DRAWING_KEYS}
    if isinstance(out.get("timings_s"), dict):
        out["timings_s"] = {k: v for k, v in out["timings_s"].items() if k not in DRAWING_TIMINGS}
    return out


class TimeBudgetSpent(BaseException):
    """MEASURE_FOR ran out: the run stops after the configuration that used it up (a BaseException, so no
    chapter's own error handling records it as a failure)."""


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    return f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s"


def settle(run: dict) -> dict:
    """A run.json entry left 'running' by a process that no longer exists: interrupted."""
    if run.get("state") == "running":
        n = (run.get("configurations") or {}).get("measured", 0)
        run.update(
            state="interrupted",
            interrupted=f"interrupted after {n} configurations: {record.UNCLOSED_RUN}",
        )
    return run


def estimates(params: Params, history: list[dict], device: dict | None = None) -> tuple[dict, dict]:
    """({chapter: seconds}, {chapter: source}) for the progress line: the latest earlier run that timed a
    chapter, else the cost model of params (cost_model_s): per configuration, eager or compiled (a stage
    the profile skips or the device cannot run costs nothing)."""
    from lib.core import chapters  # the registry (running layer) is only needed here

    model = params.cost_model_s or {}
    out, source = {}, {}
    for chapter in chapters.order(params.stages, params.chapters):
        timed = [r["timings_s"][chapter.key] for r in history if (r.get("timings_s") or {}).get(chapter.key)]
        if timed:
            out[chapter.key], source[chapter.key] = timed[-1], "the previous run"
            continue
        stage = stages.STAGES.get(chapter.key)
        if stage and ((params.skip or {}).get(stage.key) or (device and stage.not_applicable(device))):
            out[chapter.key] = 0
        elif stage:
            per = model.get("compiled_config" if stage.compile else "eager_config", 0)
            out[chapter.key] = per * len(config.stage_batches(params, chapter.key)) + model.get("evidence", {}).get(
                chapter.key, 0
            )
        else:
            out[chapter.key] = model.get(chapter.key, 0)
        source[chapter.key] = "the cost model"
    return out, source


class RunLog:
    """One run's entry of run.json, kept true as the run goes."""

    def __init__(
        self,
        report_dir: Path,
        params: Params,
        env: dict,
        earlier: list[dict],
        command: str,
        estimate: tuple[dict, dict] = ({}, {}),
    ):
        self.path = Path(report_dir) / "run.json"
        self.t0 = time.perf_counter()
        self.estimate, self.source = estimate
        self.chapter_key, self.chapter_t0, self.left_after = None, self.t0, 0.0
        self.heading, self.chapter_kept = None, 0  # the chapter's line, printed with its first measured record
        self.counted: set[tuple] = set()
        # the run.json this run resumes, as it was: a resume that measures nothing goes back to it (measured)
        self.before = load(report_dir) if earlier else None
        self.render: dict | None = None  # set when it did (measured)
        budget = os.environ.get(BUDGET_VAR)
        self.budget_s = float(budget) if budget else None
        stamp = provenance.run_stamp(env)
        self.run = {
            "profile": params.name,
            "started": dt.datetime.now().isoformat(timespec="seconds"),
            "state": "running",
            "pid": os.getpid(),
            "completed": False,
            "measure_only": True,
            "code": provenance.code_version(),
            "host_id": stamp["host_id"],
            "gpu_uuid": stamp["gpu_uuid"],
            "device": stamp["device"],
            "command": command,
            "depth": params.depth,
            "configurations": {"measured": 0, "kept": 0, "by_status": {}, "compile": {}},
            "timings_s": {},
            "failures": [],
            "earlier_runs": earlier,
        }
        self.write()
        atexit.register(self._at_exit)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def write(self) -> None:
        if self.run.get("state") == "running":  # the run's seconds: of its measuring, once that is over
            self.run["timings_s"]["total_s"] = time.perf_counter() - self.t0
        store.write_atomic(self.path, self.run)

    # ---------------------------------------------------------------- progress

    def chapter(self, index: int, order: list) -> str:
        """The chapter's heading line: what it is expected to take and what is left for the run. It is printed
        with the chapter's first record measured in this run (announce), so a resume lists only the chapters
        that measure something; the records it keeps are counted in one line at the end (kept_line)."""
        chapter = order[index - 1]
        self.chapter_key, self.chapter_t0 = chapter.key, time.perf_counter()
        self.left_after = sum(self.estimate.get(c.key, 0) for c in order[index:])
        own = self.estimate.get(chapter.key)
        guess = (
            f"~{_clock(own)} by {self.source[chapter.key]}"
            if own is not None and chapter.key in self.source
            else "no estimate"
        )
        self.heading = (
            f"[measure {index}/{len(order)}] {chapter.title} ({guess}; {_clock(self.elapsed())} elapsed, "
            f"~{_clock((own or 0) + self.left_after)} left in the run)"
        )
        self.chapter_kept = 0
        return self.heading

    def announce(self) -> None:
        """Print the chapter's heading, once: before its first measured record or its failure."""
        if self.heading:
            print(self.heading, flush=True)
            self.heading = None

    def kept_line(self) -> str | None:
        """One line for every record this run kept from earlier runs (none is printed on its own)."""
        counts = self.run["configurations"]
        if not counts["kept"]:
            return None
        return (
            f"kept {counts['kept']} configuration{'s' if counts['kept'] != 1 else ''} measured by an earlier run "
            f"(FORCE=1 re-measures them){'; nothing new to measure' if not counts['measured'] else ''}"
        )

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def record(self, rec: dict, kept: bool) -> str:
        """Count a record, rewrite run.json, and return the progress to print beside the record's line."""
        counts = self.run["configurations"]
        # A record a later round lists again (the repeats, once the recommendation moved) is counted once: kept
        # counts records of earlier runs, measured this run's, and together they count the folder's records.
        ident = tuple(rec.get(k) for k in IDENTITY)
        if kept and ident in self.counted:
            return ""
        self.counted.add(ident)
        if kept:
            self.chapter_kept += 1
        else:
            self.announce()
        counts["kept" if kept else "measured"] += 1
        counts["by_status"][rec.get("status")] = counts["by_status"].get(rec.get("status"), 0) + 1
        if not kept and rec.get("compile_cache"):
            state = rec["compile_cache"]["state"]
            counts["compile"][state] = counts["compile"].get(state, 0) + 1
        self.write()
        if kept or self.chapter_key is None:
            return ""
        own = self.estimate.get(self.chapter_key) or 0
        spent = time.perf_counter() - self.chapter_t0
        here = f"~{_clock(own - spent)} left in the chapter" if spent < own else "chapter over its estimate"
        return (
            f"  [{_clock(self.elapsed())} elapsed; {here}, ~{_clock(max(own - spent, 0) + self.left_after)} in the run]"
        )

    def check_budget(self) -> None:
        """Raise TimeBudgetSpent once MEASURE_FOR is spent (called after each record's line is printed)."""
        if self.budget_s is not None and self.elapsed() > self.budget_s:
            self.stop(f"its time budget ({BUDGET_VAR}={self.budget_s:g} s) was spent; the same command resumes it")
            raise TimeBudgetSpent(self.run["interrupted"])

    def chapter_done(self, key: str, seconds: float, failure: str | None = None) -> None:
        if not self.chapter_kept:  # a chapter that measured nothing and kept nothing still shows that it ran
            self.announce()
        self.heading = None
        self.run["timings_s"][key] = seconds
        if failure:
            self.run["failures"].append(failure)
        self.write()

    def chapter_cut(self, key: str, seconds: float) -> None:
        """The chapter the time budget stopped: its seconds so far (the resumed run times the rest), so the
        time a chapter cost adds up over resumed runs (lib/report/cost_view.py chapter_seconds)."""
        self.run.setdefault("cut_timings_s", {})[key] = seconds
        self.write()

    # ---------------------------------------------------------------- the end

    def finish(self, completed: bool, measure_only: bool, **extra) -> None:
        """Close the run's measuring as completed (`completed`: every chapter of the report has run)."""
        self.write()  # its seconds, up to now
        self.run.update(
            state="completed",
            ended=dt.datetime.now().isoformat(timespec="seconds"),
            completed=completed,
            measure_only=measure_only,
            **extra,
        )
        self.run.pop("pid", None)
        self.write()

    def measured(self, completed: bool) -> bool:
        """The measuring is over and the report is drawn next: the run's account closes as completed (rendered
        adds the drawing). A resume that measured nothing new and failed nowhere, after a completed run that drew
        its report, is no measuring run: run.json goes back to that run's account as it was, and this run is one
        of its renders. Returns whether it went back."""
        last, counts = self.before, self.run["configurations"]
        if (
            last
            and not counts["measured"]
            and not self.run["failures"]
            and last.get("state") == "completed"
            and not last.get("measure_only")
            and (last.get("completed") or not completed)
        ):
            self.render = {
                "date": self.run["started"],
                "command": self.run["command"],
                "code": self.run["code"],
                "kept": counts["kept"],
                "measured_s": self.elapsed(),
            }
            self.run = last
            self.write()
            return True
        self.finish(completed=completed, measure_only=False)
        return False

    def rendered(self, timings: dict, notebooks_s: dict, failures: list[str]) -> None:
        """What drawing the report took (the notebooks drawn, the export's seconds, their failures), beside the
        measuring's account: under the run's renders where it measured nothing new (measured)."""
        timings = {k: timings.get(k) for k in DRAWING_TIMINGS}
        if self.render is not None:
            self.render.update(timings_s={**timings, "total_s": self.elapsed()}, notebooks_s=notebooks_s)
            self.run.setdefault("renders", []).append({**self.render, "failures": failures})
        else:
            self.run["timings_s"].update(timings)
            self.run.update(notebooks_s=notebooks_s, drawing_failures=failures)
        self.write()

    def stop(self, why: str) -> None:
        """Close the run as interrupted, with why (a time budget, a signal, an early exit)."""
        if self.run["state"] != "running":
            return
        key = self.chapter_key
        if key is not None and key not in self.run["timings_s"]:  # the chapter it cut: its seconds so far (chapter_cut)
            self.run.setdefault("cut_timings_s", {})[key] = time.perf_counter() - self.chapter_t0
        n = self.run["configurations"]["measured"]
        self.run.update(
            state="interrupted",
            interrupted=f"interrupted after {n} configurations: {why}",
            ended=dt.datetime.now().isoformat(timespec="seconds"),
        )
        self.run.pop("pid", None)
        self.write()

    def _on_signal(self, signum, frame) -> None:
        self.stop(f"stopped by {signal.Signals(signum).name}")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _at_exit(self) -> None:
        self.stop("the program ended before the run did")


def load(report_dir: Path) -> dict | None:
    try:
        return json.loads((Path(report_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return None
