"""Small defects of issue 61 that a new user meets: what the requirements cite, the port `make lab` states, and
the CPU default's page 1 naming a GPU. Fast: nothing is measured."""

from __future__ import annotations

import os
import re
import subprocess

from conftest import ROOT, make_record, tiny_params, write_report_dir

from lib.report import loader, recipe_row


def test_the_requirements_cite_the_modules_that_import_scipy():
    """Both requirements files cited lib/parity.py for scipy, a module that no longer exists."""
    for name in ("requirements.txt", "requirements-host.txt"):
        line = next(x for x in (ROOT / name).read_text().splitlines() if x.startswith("scipy"))
        cited = re.findall(r"lib/[\w/]+\.py", line)
        assert cited, line
        for path in cited:
            assert (ROOT / path).is_file(), f"{name} cites {path}, which does not exist"
            assert "scipy" in (ROOT / path).read_text(), f"{name} cites {path}, which does not import scipy"


def _make(*args: str) -> subprocess.CompletedProcess:
    # `-o setup`: the environment is not made (nor remade); PY=echo shows the command `make lab` would run
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(
        ["make", "--no-print-directory", "-s", "-o", "setup", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_make_lab_starts_jupyterlab_on_the_port_it_states():
    """`make lab` named no port: it starts JupyterLab on LAB_PORT (8888 unless set), says the address to open, does
    not move to another port unsaid, and `make help` lists it with its address."""
    proc = _make("lab", "PY=echo", "LAB_PORT=9123")
    assert proc.returncode == 0, proc.stderr
    assert "http://localhost:9123/lab" in proc.stdout
    assert "--ServerApp.port=9123 --ServerApp.port_retries=0" in proc.stdout
    proc = _make("lab", "PY=echo")
    assert "http://localhost:8888/lab" in proc.stdout and "--ServerApp.port=8888 " in proc.stdout
    bad = _make("lab", "PY=echo", "LAB_PORT=8888; touch x")
    assert bad.returncode != 0 and "LAB_PORT must be a port number" in bad.stderr and "jupyterlab" not in bad.stdout
    lab = [x for x in _make("help").stdout.splitlines() if x.strip().startswith("make lab")]
    assert len(lab) == 1 and "localhost:8888" in lab[0] and "LAB_PORT=" in lab[0]


def _report(tmp_path):
    p = tiny_params(["fp32", "tf32", "bf16", "flash", "vocab"])
    times = {"fp32": 100.0, "tf32": 90.0, "bf16": 60.0, "flash": 50.0, "vocab": 40.0}
    recs = [make_record(p, key, 2, [ms] * 6, [5.0] * 6) for key, ms in times.items()]
    return loader.load(write_report_dir(tmp_path / "r", p, recs))


def test_the_cpu_default_s_recipe_row_says_cpu_and_a_gpu_s_keeps_its_words(tmp_path):
    """The CPU default's page 1 named its recipe '2 × 4 × 1 GPU'."""
    rep = _report(tmp_path)
    assert "vocab" in rep.decided["recipe"]["levers_on"]
    table = recipe_row.recipe_table(rep)
    assert "<strong>Recipe: 2 × 4 × 1 CPU</strong>" in table and "accumulation steps × CPUs" in table
    assert "1 GPU" not in table and "× GPUs" not in table
    # the same records as a GPT-2 profile on a GPU read as before
    rep.params.backend, rep.params.model.padded_vocab_size = "cuda", 50304
    table = recipe_row.recipe_table(rep)
    assert "<strong>Recipe: 2 × 4 × 1 GPU</strong>" in table and "micro-batch × accumulation steps × GPUs" in table
    assert "1 CPU" not in table and "× CPUs" not in table
    # the callers that name no device (the comparison's, on GPUs) keep 'GPU'
    assert recipe_row.recipe_name({"micro_batch": 8, "accumulation": 2}) == "8 × 2 × 1 GPU"
    assert recipe_row.recipe_name({"micro_batch": 8, "accumulation": 2, "gpus": 4}) == "8 × 2 × 4 GPUs"
