"""The shape of lib/: layers that import only what they may, no import cycle, small modules."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parent.parent / "lib"
# The packages of lib/, lowest first, and which packages each may import (itself included): imports run
# only downward, and the report side never reaches the measuring side. The modules directly in lib/
# (cli, optimal) are entry points above every package.
MAY_IMPORT = {
    "core": {"core"},
    "results": {"core", "results"},
    "train": {"core", "results", "train"},
    "measure": {"core", "results", "train", "measure"},
    "report": {"core", "results", "report"},
    "run": {"core", "results", "train", "measure", "report", "run"},
}
ENTRY_POINTS = {"cli", "optimal"}
MAX_LINES = 400


def _module(path: Path) -> str:
    return ".".join(path.relative_to(LIB).with_suffix("").parts)


@functools.lru_cache(maxsize=1)  # every parametrised test reads it: parsing lib/ once keeps the suite fast
def _imports() -> dict[str, set[str]]:
    """module ("core.stages") -> the lib modules it imports (any import, at the top or inside a function)."""
    modules = {_module(p) for p in LIB.rglob("*.py") if p.name != "__init__.py"}
    out = {}
    for path in LIB.rglob("*.py"):
        if path.name == "__init__.py":
            continue
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.ImportFrom) and node.level), (
                f"{path}: a relative import; lib/ imports by full name"
            )
            names = (
                ([node.module] + [f"{node.module}.{a.name}" for a in node.names])
                if isinstance(node, ast.ImportFrom) and node.module
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            deps |= {
                n.removeprefix("lib.") for n in names if n.startswith("lib.") and n.removeprefix("lib.") in modules
            }
        out[_module(path)] = deps
    return out


def _package(module: str) -> str:
    return module.split(".")[0] if "." in module else "entry"


def test_every_module_sits_in_a_layer_package_or_is_an_entry_point():
    stray = sorted(m for m in _imports() if _package(m) not in MAY_IMPORT and m not in ENTRY_POINTS)
    assert not stray, f"modules outside the layer packages: {stray}"
    assert all((LIB / p / "__init__.py").read_text().startswith('"""') for p in MAY_IMPORT), (
        "each package says what it holds"
    )


@pytest.mark.parametrize("module", sorted(m for m in _imports() if m not in ENTRY_POINTS))
def test_a_module_imports_only_downward(module):
    bad = sorted(d for d in _imports()[module] if _package(d) not in MAY_IMPORT[_package(module)])
    assert not bad, f"{module} imports {bad}, above or beside its package {_package(module)}"


def test_the_package_graph_has_no_cycle():
    edges = {(_package(m), _package(d)) for m, deps in _imports().items() for d in deps if m not in ENTRY_POINTS}
    packages = {a for a, _ in edges} | {b for _, b in edges}
    order = []
    while packages:  # peel off packages that import nothing but themselves and those already peeled
        free = {p for p in packages if all(b == p or b in order for a, b in edges if a == p)}
        assert free, f"a cycle among {sorted(packages)}"
        order += sorted(free)
        packages -= free


def test_no_import_cycle_between_modules():
    graph, state, path = _imports(), {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for d in sorted(graph[m]):
            assert state.get(d) != "open", " -> ".join(path[path.index(d) :] + [d])
            if d not in state:
                visit(d)
        path.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_module_over_400_lines():
    long = {str(p.relative_to(LIB)): n for p in LIB.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_notebook_cell_ids_are_unique_across_the_templates():
    """The report notebook joins the summary's cells and every chapter's (export.assemble prefixes a
    chapter's ids with its name): an id the summary shares with the chapter template makes nbformat
    rewrite it with a warning on every run."""
    import json

    seen = {}
    for nb in sorted((LIB.parent / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            assert cell.get("id"), f"{nb.name}: a cell without an id"
            assert cell["id"] not in seen, f"cell id {cell['id']} in both {seen[cell['id']]} and {nb.name}"
            seen[cell["id"]] = nb.name


def test_the_readme_layout_names_every_module_in_its_package():
    """README's layout is where a newcomer learns the packages: each module is listed under its own."""
    import re

    text = (LIB.parent / "README.md").read_text()
    block = text[text.index("lib/        the code") : text.index("```", text.index("lib/        the code"))]
    listed, package = {}, None
    for line in block.splitlines()[1:]:
        m = re.match(r"  (\w+)/\s", line)
        package = m.group(1) if m else package if line.startswith("      ") else None
        if package:
            listed.setdefault(package, set()).update(re.findall(r"[a-z_][a-z0-9_]*", line))
    for package in MAY_IMPORT:
        modules = {p.stem for p in (LIB / package).glob("*.py")} - {"__init__"}
        assert modules <= listed.get(package, set()), (
            f"{package}/: README does not list {sorted(modules - listed.get(package, set()))}"
        )


def test_the_repository_tracks_no_symbolic_link():
    """A link committed by mistake travels with every clone: a `.deps` link to one checkout's own folder (git's
    `.deps/` pattern ignores only a directory) sent every device machine's `make setup` into a loop of links, so the
    FP8 runs of a sitting found no torchao. The ignore patterns now cover a link too."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=root, capture_output=True, text=True, check=True).stdout
    links = [line.split("\t", 1)[1] for line in listed.splitlines() if line.startswith("120000 ")]
    assert links == []


# What judges: a call of one of these decides something (a recommendation, a verdict, a tie, a spread to judge by).
# A report folder's decisions are computed once, by lib/report/loader.py calling decisions.compute (and parity.checks
# and long_choice.choose, which that computation shares); every other view reads decisions.json, the matrix's table
# (decide.table) and the leave-one-out included.
JUDGES = {
    ("decide", "recommended"),
    ("decide", "best_config"),
    ("decide", "ranked_configs"),
    ("decide", "table"),
    ("parity", "checks"),
    ("long_choice", "choose"),
    ("decisions", "compute"),
    ("noise", "noise_floor"),
    ("noise", "decision_floor"),
    ("noise", "within_noise"),
    ("noise", "twin_drift"),
    ("machine_spread", "judge"),
    ("comparison", "compute"),
    ("leave_one_out", "leave_one_out"),
    ("crosscheck", "rows"),
    ("parity", "rejected"),
    ("size_sweep", "bands"),
    ("size_sweep", "spread"),
    ("size_sweep", "crossover"),
    ("size_sweep", "decided"),
    ("noise", "machine_spread"),
    ("noise", "across_machines"),
    ("parity", "to_decide"),
    ("parity", "seeds_needed"),
    ("parity", "out_of_reach"),
}
# Where a judging call in lib/report is still allowed, and why: the loader computes a folder's decisions once, and the
# comparison's loader (compare.Reports) the comparison's (lib/results/comparison.py); nothing else may join this list.
JUDGES_ALLOWED = {
    "report.loader": {("decisions", "compute"), ("parity", "checks"), ("long_choice", "choose")},
    "report.compare": {("comparison", "compute")},
}


def _judging_calls(path: Path) -> set[tuple[str, str]]:
    """The judging calls of a module, by the module's own name for what it imported: `noise_stats.decision_floor`
    after `from lib.results import noise as noise_stats` is noise.decision_floor (fidelity_view's alias hid two
    judging calls from this test), and a function imported by name is its module's."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules, functions = {}, {}  # local name -> module name; local name -> (module, function)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if node.module.startswith("lib.") and node.module.count(".") == 1:  # from lib.results import noise
                    modules[a.asname or a.name] = a.name
                else:  # from lib.results.noise import decision_floor
                    functions[a.asname or a.name] = (node.module.rsplit(".", 1)[-1], a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name] = a.name.rsplit(".", 1)[-1]
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            call = (modules.get(f.value.id, f.value.id), f.attr)
        elif isinstance(f, ast.Name):
            call = functions.get(f.id)
        else:
            continue
        if call in JUDGES:
            found.add(call)
    return found


def test_the_views_judge_nothing_they_read_the_decisions():
    """reports/h100 rendered once called decide.recommended 31 times and parity.checks 57 times, each view judging
    again (and the comparison by a rule of its own). lib/report calls a judging function only where JUDGES_ALLOWED
    says: a view that needs a decision reads decisions.json (Report.decided)."""
    calls = {_module(p): _judging_calls(p) for p in sorted((LIB / "report").glob("*.py"))}
    extra = {m: sorted(c - JUDGES_ALLOWED.get(m, set())) for m, c in calls.items() if c - JUDGES_ALLOWED.get(m, set())}
    assert extra == {}
