"""lib/report writes every number through lib/report/formats.py (issue 61): no view spells a format spec of its own,
so a figure reads the same wherever it stands. Reads the files only: fast."""

from __future__ import annotations

import ast
import string
from collections import Counter
from pathlib import Path

REPORT = Path(__file__).resolve().parent.parent / "lib" / "report"
HOME = "formats.py"  # the one module that may spell a format spec
# A format spec that is no number's (a name padded to a width), file -> how many; commented each. None so far.
ALLOWED: dict[str, int] = {}
# Inline formats that other work is moving into formats.py (issue 61): file -> how many may remain. Lower a count as
# they go; the test fails if one grows. Remove the entry at zero.
PENDING: dict[str, int] = {}


def _literal_specs(text: str) -> list[str]:
    """The format specs in a str.format template: '{:.2f} and {n:,}' -> ['.2f', ',']."""
    try:
        return [spec for _, field, spec, _ in string.Formatter().parse(text) if field is not None and spec]
    except ValueError:  # not a template (a stray brace): str.format would raise on it anyway
        return []


def inline_formats(path: Path) -> list[int]:
    """The lines of `path` that format a value inline: an f-string field with a spec (f"{x:.2f}", f"{n:,}"), a
    string literal's .format with one ("{:.2f}".format(x)), or format() given one as a literal (format(x, ".2f"))."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            template = node.func.value
            if isinstance(template, ast.Constant) and isinstance(template.value, str):
                lines += [node.lineno] * bool(_literal_specs(template.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "format":
            spec = node.args[1] if len(node.args) > 1 else None
            if isinstance(spec, ast.Constant) and isinstance(spec.value, str) and spec.value:
                lines.append(node.lineno)
    return sorted(lines)


def _found() -> dict[str, list[int]]:
    return {p.name: lines for p in sorted(REPORT.glob("*.py")) if p.name != HOME and (lines := inline_formats(p))}


def test_no_inline_number_formats_in_lib_report():
    """Every lib/report module but formats.py formats its numbers through formats.py's helpers."""
    may = Counter(ALLOWED) + Counter(PENDING)
    over = {name: lines for name, lines in _found().items() if len(lines) > may[name]}
    assert not over, "inline format specs in lib/report (use a lib/report/formats.py helper):\n" + "\n".join(
        f"lib/report/{name}:{line}" for name, lines in over.items() for line in lines
    )


def test_pending_counts_are_not_stale():
    """A PENDING or ALLOWED entry names a module of lib/report that is still there, so the lists only shrink."""
    names = {p.name for p in REPORT.glob("*.py")}
    assert set(PENDING) <= names and set(ALLOWED) <= names


def test_the_check_finds_each_kind(tmp_path):
    """The scan sees an f-string spec, a nested one, a template's .format and format() with a spec, and nothing
    else (a plain field, a conversion, an unformatted template, a docstring's braces)."""
    src = tmp_path / "m.py"
    src.write_text(
        '"""{stage: its record} in a docstring."""\n'
        'a = f"{x:.2f}"\n'
        'b = f"{x:{w}}"\n'
        'c = "{:,}".format(n)\n'
        'd = format(x, ".1f")\n'
        'e = f"{x} {x!r} {y}"\n'
        'f = "{} and {n}".format(1, n=2)\n'
        "g = format(x)\n"
    )
    assert inline_formats(src) == [2, 3, 4, 5]
