"""Each lever fact has one home, the stage registry, and the rest follows from it: the packages setup
checks and the environment records, the leave-one-out ablation's entry for every switch a stage sets,
and the plain loop's mirror of the canonical trainer's switches."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lib.core import levers, stages
from lib.measure import environment
from lib.run import jobs

ROOT = Path(__file__).resolve().parent.parent
# A switch that replicates a configuration rather than changing its step: the ablation runs on one GPU.
NOT_ABLATED = {"devices", "ddp_options"}  # the DDP stage's own: how its ranks run, not a lever of the recipe


def _pins(path: Path) -> dict[str, str]:
    """name -> version of each `name==version` line of a requirements file (comments dropped)."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return dict(line.split("==", 1) for line in lines if line)


def test_every_lever_package_is_pinned_for_the_wheelhouse_and_nothing_else_is():
    pinned = _pins(ROOT / "requirements-levers.txt")
    assert set(pinned) == set(stages.lever_packages()), "requirements-levers.txt and the stages' packages differ"
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.]*", v) for v in pinned.values()), pinned


def test_the_cpu_environment_pins_a_lever_package_at_the_wheelhouse_version():
    wanted = _pins(ROOT / "requirements-levers.txt")
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    cpu = dict(line.split("==", 1) for line in lines if "==" in line)
    assert {k: v for k, v in cpu.items() if k in wanted} == {k: wanted[k] for k in cpu if k in wanted}


def test_the_environment_records_every_lever_package_and_triton():
    assert set(environment.LEVER_PACKAGES) == {"triton", *stages.lever_packages()}


def test_the_makefile_checks_the_modules_the_registry_names():
    out = subprocess.run([sys.executable, "-m", "lib.core.stages", "modules"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == sorted({s.module_name for s in stages.STAGES.values() if s.package})
    assert "cut_cross_entropy" in out.stdout.split()  # a distribution name with '-' imports with '_'
    assert "$(PYTHON) -m lib.core.stages modules" in (ROOT / "Makefile").read_text()


def test_a_stage_names_its_package_module_when_the_name_differs():
    stage = stages.Stage("x", "X", "x", package="nvmath-python", module="nvmath")
    assert stage.module_name == "nvmath"
    missing = stages.Stage("y", "Y", "y", package="no-such-lever-package")
    assert missing.not_applicable({"backend": "cpu", "count": 1}) == (
        "Y needs the no-such-lever-package package, which is not installed here"
    )


def _unablated(stage) -> set[str]:
    """The switches `stage` sets that no leave-one-out entry turns off."""
    covered = {switch for off in levers.LEVERS.values() for switch in off}
    return set(stage.identity()) - {"key", "peak"} - covered - NOT_ABLATED


@pytest.mark.parametrize("key", stages.ORDER)
def test_every_switch_a_stage_sets_has_a_leave_one_out_entry(key):
    assert _unablated(stages.STAGES[key]) == set()


def test_a_switch_without_a_leave_one_out_entry_is_found(monkeypatch):
    monkeypatch.setattr(levers, "LEVERS", {k: v for k, v in levers.LEVERS.items() if "fp8_lm_head" not in v})
    assert _unablated(stages.STAGES["fp8_head"]) == {"fp8_lm_head"}


def _switches_read(path: Path) -> set[str]:
    """The switch names the plain loop reads from its job: sw["name"] and sw.get("name")."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sw":
            found.add(ast.literal_eval(node.slice))
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "sw.get":
            found.add(ast.literal_eval(node.args[0]))
    return found


def test_the_plain_loop_reads_every_switch_it_mirrors_and_no_other():
    assert _switches_read(ROOT / "lib" / "train" / "plain_loop.py") == set(jobs.PLAIN_LOOP_SWITCHES)


def test_the_scan_of_the_plain_loop_sees_a_missing_switch(tmp_path):
    source = (ROOT / "lib" / "train" / "plain_loop.py").read_text()
    cut = tmp_path / "plain_loop.py"
    cut.write_text(source.replace('sw["fused_adamw"]', "False"))
    assert set(jobs.PLAIN_LOOP_SWITCHES) - _switches_read(cut) == {"fused_adamw"}


def test_the_plain_loop_mirrors_only_switches_of_the_registry():
    assert set(jobs.PLAIN_LOOP_SWITCHES) <= set(stages.SWITCHES)


def test_the_plain_loops_fingerprint_follows_its_code_not_its_layout(tmp_path, monkeypatch):
    loop = tmp_path / "plain_loop.py"
    source = (ROOT / "lib" / "train" / "plain_loop.py").read_text()
    monkeypatch.setattr(jobs, "PLAIN_LOOP", loop)
    loop.write_text(source)
    before = jobs.plain_loop_source()
    loop.write_text("# a comment\n" + source.replace("\n\n\n", "\n\n\n\n"))
    assert jobs.plain_loop_source() == before
    loop.write_text(source.replace('sw["fused_adamw"]', "False"))
    assert jobs.plain_loop_source() != before
