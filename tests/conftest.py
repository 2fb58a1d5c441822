"""Shared fixtures and helpers.

The expensive part, the whole CPU pipeline (`python -m lib.cli report`, about 90-115 s on two
cores), runs once per session in `pipeline` and every end-to-end test reads its output."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.core import config, stages  # noqa: E402
from lib.core.params import Params  # noqa: E402
from lib.results import stats, store  # noqa: E402

PIPELINE_TIMEOUT_S = 600
# The variables the CLI (and lib/measure/faults.py) read; a developer's shell must not leak them into a test run.
CLI_ENV_VARS = (
    "GPU",
    "BATCHES",
    "STAGES",
    "CHAPTERS",
    "PRICE_PER_GPU_HOUR",
    "OVERRIDE",
    "REPORTS",
    "FORCE",
    "MEASURE_ONLY",
    "GPT2_LEVERS_FAULT",
    "NNODES",
    "NODE_RANK",
    "RDZV",
)


def pytest_configure(config):
    config.addinivalue_line("markers", "rerun: a second full report run (about 60 s); deselect with -m 'not rerun'")
    config.addinivalue_line(
        "markers", "slow: runs the pipeline or a measuring process; `make test-fast` leaves these out"
    )


# What makes a test slow: the session's pipeline run, or a process it starts (the CLI, the launcher, a chapter).
SLOW_FIXTURES = {"pipeline", "pipeline_ok"}
SLOW_CALLS = re.compile(r"\b(run_cli|subprocess\.run|runner\.\w+\(|ddp_launch\.\w+\(|measure_chapter|worker\.run)")


def pytest_collection_modifyitems(config, items):
    """Mark `slow` each test that runs the pipeline or starts a measuring process, itself or through one
    of its fixtures, so the pure-Python tests make a fast inner loop (`make test-fast`)."""
    import inspect

    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        funcs = [getattr(item, "function", None)] + [
            d.func
            for defs in (info.name2fixturedefs.values() if info else [])
            for d in defs
            if Path(inspect.getfile(d.func)).parent == ROOT / "tests"
        ]
        source = "".join(inspect.getsource(f) for f in funcs if f is not None)
        helpers = _slow_helpers(item.module) if getattr(item, "module", None) else None
        if SLOW_FIXTURES & set(item.fixturenames) or SLOW_CALLS.search(source) or (helpers and helpers.search(source)):
            item.add_marker(pytest.mark.slow)


def _slow_helpers(module):
    """A call of the test module's own helpers that start a process (reports/h200's long test ran 2.5 minutes of
    `make test-fast` through `_long_test`, whose subprocess the test's own source does not show), as one pattern;
    None where the module has none. A helper calling such a helper is one too."""
    import inspect

    if module not in _HELPERS:
        own = {
            name: inspect.getsource(f)
            for name, f in inspect.getmembers(module, inspect.isfunction)
            if f.__module__ == module.__name__ and not name.startswith("test_")
        }
        slow = {name for name, src in own.items() if SLOW_CALLS.search(src)}
        while more := {n for n, src in own.items() if n not in slow and re.search(_calls(slow), src or "")}:
            slow |= more
        _HELPERS[module] = re.compile(_calls(slow)) if slow else None
    return _HELPERS[module]


def _calls(names: set[str]) -> str:
    return r"\b(" + "|".join(sorted(map(re.escape, names))) + r")\(" if names else r"(?!x)x"


_HELPERS: dict = {}


# ---------------------------------------------------------------- subprocess helpers


def cli_env(**overrides) -> dict:
    """A clean environment for `python -m lib.cli`: the CLI variables removed, then `overrides`."""
    env = {k: v for k, v in os.environ.items() if k not in CLI_ENV_VARS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def run_cli(*args, timeout=PIPELINE_TIMEOUT_S, **env_overrides) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lib.cli", *args],
        cwd=ROOT,
        env=cli_env(**env_overrides),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def describe_proc(proc: subprocess.CompletedProcess) -> str:
    """The tail of a process's output, for assertion messages."""
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"


# ---------------------------------------------------------------- the CPU pipeline, once


@dataclass
class PipelineRun:
    proc: subprocess.CompletedProcess
    reports: Path  # the REPORTS folder
    report_dir: Path  # <reports>/cpu
    params: dict  # config.load("cpu"): what the run should have measured

    @property
    def results_dir(self) -> Path:
        return self.report_dir / "results"


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory) -> PipelineRun:
    reports = tmp_path_factory.mktemp("reports")
    proc = run_cli("report", REPORTS=reports)
    return PipelineRun(proc, reports, reports / "cpu", config.load("cpu"))


@pytest.fixture(scope="session")
def pipeline_ok(pipeline) -> PipelineRun:
    """The pipeline run, which must have succeeded for the tests that read its output."""
    assert pipeline.proc.returncode == 0, describe_proc(pipeline.proc)
    return pipeline


# ---------------------------------------------------------------- PDF pages without a PDF library


def pdf_page_count(path: Path) -> int:
    """Pages of a PDF: pypdf when installed, otherwise the page objects (/Type /Page, not /Pages)
    counted in the raw file and in every Flate stream (WeasyPrint puts objects in object streams)."""
    try:
        import pypdf
    except ImportError:
        pypdf = None
    if pypdf is not None:
        return len(pypdf.PdfReader(str(path)).pages)
    raw = path.read_bytes()
    chunks = [raw]
    for m in re.finditer(rb"stream\r?\n", raw):
        try:
            chunks.append(zlib.decompressobj().decompress(raw[m.end() :]))
        except zlib.error:
            pass  # not a Flate stream
    page = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
    return sum(len(page.findall(c)) for c in chunks)


# ---------------------------------------------------------------- params and records


@pytest.fixture(autouse=True)
def no_injected_faults(monkeypatch):
    """In-process tests run without the fault injection of lib/measure/faults.py unless they ask for it."""
    monkeypatch.delenv("GPT2_LEVERS_FAULT", raising=False)


@pytest.fixture
def cpu_params() -> Params:
    """A fresh copy of the validated CPU parameters (tests may change it)."""
    return config.load("cpu")


def tiny_params(stage_keys=None, batch_sizes=(2,), warmup=1, timed=5) -> Params:
    p = config.load("cpu")
    p.run = dataclasses.replace(p.run, batch_sizes=list(batch_sizes), warmup_steps=warmup, timed_steps=timed)
    p.evidence.check_stage = None  # the CPU default's pipeline check fixes its stage; these tests decide by the records
    if stage_keys is not None:
        p.stages = list(stage_keys)
    return p


def make_record(
    params: dict,
    stage_key: str,
    batch: int,
    times_ms=None,
    losses=None,
    status: str = "ok",
    reason: str | None = None,
    mem_bytes: int | None = None,
) -> dict:
    """A result record the way worker.run builds one, from chosen timings and losses."""
    rec = store.base_record(params, stages.get(stage_key), batch)
    if status in ("ok", "diverged"):
        rec["losses"] = list(losses)
        rec["mem_device_bytes"] = mem_bytes
        stats.fill_timing(rec, list(times_ms), batch * params.run.seq_len)
        stats.fill_mfu(rec, 1_000_000, params.peak_tflops, stages.get(stage_key).peak)
        stats.fill_loss(rec, params.run.final_loss_window)
    else:
        rec.update(status=status, reason=reason)
    return rec


def write_report_dir(report_dir: Path, params: Params, records: list[dict]) -> Path:
    """A report folder as the notebooks leave it, without measuring anything."""
    report_dir.mkdir(parents=True, exist_ok=True)
    store.write_atomic(report_dir / "params.json", params)
    store.write_atomic(
        report_dir / "environment.json", {"device": {"backend": params.backend, "name": "x"}, "torch": "x"}
    )
    for rec in records:
        store.write_atomic(store.record_path(report_dir / "results", rec["stage"], rec["batch_size"]), rec)
    return report_dir


@pytest.fixture
def tmp_params_dir(tmp_path, monkeypatch) -> Path:
    """A writable copy of params/ that lib.core.config reads instead of the real one. config.ROOT
    moves with it because config names files relative to ROOT in its messages."""
    root = tmp_path / "root"
    shutil.copytree(ROOT / "params", root / "params")
    monkeypatch.setattr(config, "ROOT", root)
    monkeypatch.setattr(config, "PARAMS_DIR", root / "params")
    return root / "params"


def read_json(path: Path):
    return json.loads(Path(path).read_text())


def write_parity_test(
    report_dir: Path, params: Params, lever: str, lever_held: float, ref_held: float, batch: int = 2, seeds: int = 3
) -> None:
    """A parity test as parity_runs.parity_plan leaves it: per seed the lever and its reference twice each."""
    from lib.core import stages

    for seed in range(seeds):
        for stage, replicate, held in (
            (lever, 0, lever_held),
            (lever, 1, lever_held),
            (stages.get(lever).reference, 0, ref_held),
            (stages.get(lever).reference, 1, ref_held),
        ):
            rec = {
                **make_record(params, stage, batch, [1.0] * 5, [4.0] * 30),
                "kind": "parity",
                "variant": "parity",
                "steps": 30,
                "held_out_loss": held,
                "micro_steps": 1,
                "seed_offset": seed,
                "replicate": replicate,
            }
            store.write_atomic(
                report_dir / "results" / "parity" / f"{stage}__b{batch}__s{seed}__r{replicate}.json", rec
            )


def claim_facts(rep) -> dict:
    """What the claims' verdicts read of a loaded report beyond its stage matrix (claim_figures.facts), from the same
    inputs decisions.compute hands it."""
    from lib.results import claim_figures, decisions, leave_one_out

    return claim_figures.facts(
        {**rep.evidence, "matrix": rep.records},
        rep.params,
        rep.env,
        rep.decided["recipe"],
        rep.quality_checks,
        leave_one_out.leave_one_out(rep.decisions, rep.evidence["ablation"]),
        rep.decided["left_to_full_depth"],
        rep.decided["noise_floor"],
        decisions.long_decisions(rep.decided["levers"]),
    )
