"""The shape of lib/: layers that import only what they may, no import cycle, small modules."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parent.parent / "lib"
LAYERS = {
    "core": {"paths", "config", "claim_params", "stages", "record", "results", "data", "kernel_categories",
             "provenance", "noise", "parity", "cli_args"},
    "measuring": {"model", "step", "measure", "plain_loop", "ddp", "fp8", "gemm_sweep", "kernel_profile", "energy",
                  "environment", "faults", "clocks", "compile_cache"},
    "running": {"runner", "evidence", "recipe", "jobs", "chapters", "pipeline", "notebook_runner", "report_folder", "cli",
                "optimal", "size_sweep", "run_log"},
    "reporting": {"report", "frontier_view", "report_tables", "report_text", "report_charts", "evidence_view", "fidelity_view",
                  "profile_view", "sweep_view", "summary_box", "recommendation", "parity_view", "claims", "claim_figures", "rules", "compare", "export", "size_view"},
}
# What each layer may import from lib/ (any import, at the top or inside a function).
ALLOWED = {"core": {"core"}, "measuring": {"core", "measuring"}, "reporting": {"core", "reporting"},
           "running": {"core", "measuring", "running", "reporting"}}
MAX_LINES = 400


def _imports() -> dict[str, set[str]]:
    out = {}
    for path in LIB.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        out[path.stem] = deps - {"__init__"}
    return out


def _layer(module: str) -> str:
    return next(name for name, members in LAYERS.items() if module in members)


def test_every_module_has_a_layer():
    modules = {p.stem for p in LIB.glob("*.py")} - {"__init__"}
    placed = set().union(*LAYERS.values())
    assert modules == placed, f"unplaced: {sorted(modules - placed)}, gone: {sorted(placed - modules)}"


@pytest.mark.parametrize("module", sorted(set().union(*LAYERS.values())))
def test_a_module_imports_only_the_layers_it_may(module):
    bad = sorted(d for d in _imports()[module] if _layer(d) not in ALLOWED[_layer(module)])
    assert not bad, f"{module} ({_layer(module)}) imports {bad}"


def test_no_import_cycle_in_lib():
    graph, state, path = _imports(), {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for d in sorted(graph[m]):
            assert state.get(d) != "open", " -> ".join(path[path.index(d):] + [d])
            if d not in state:
                visit(d)
        path.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_module_over_400_lines():
    long = {p.name: n for p in LIB.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_notebook_cell_ids_are_unique_across_chapters():
    """The report notebook joins every chapter's cells: an id shared by two chapters (a notebook
    copied from another) makes nbformat rewrite it with a warning on every run."""
    import json

    seen = {}
    for nb in sorted((LIB.parent / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            assert cell.get("id"), f"{nb.name}: a cell without an id"
            assert cell["id"] not in seen, f"cell id {cell['id']} in both {seen[cell['id']]} and {nb.name}"
            seen[cell["id"]] = nb.name
