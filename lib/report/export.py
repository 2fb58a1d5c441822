"""From executed notebooks to the shareable report: one assembled notebook (summary sections
with the stage chapters inserted where the summary says), a self-contained HTML file (no script,
stylesheet or font from the internet: nbconvert's body-only template plus our own CSS) and a
PDF rendered from that HTML by WeasyPrint."""

from __future__ import annotations

import html

import ctypes.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from lib.core.paths import ROOT
from lib.report import formats as fmt

CSS = Path(__file__).with_name("report.css")
HIDDEN_TAGS = {"parameters", "injected-parameters", "report-hide"}
WALL_TIME_TOKEN = "@@WALL_TIME@@"  # the summary prints this; filled in once the total is known


def _tags(cell) -> set:
    return set(cell.get("metadata", {}).get("tags", []))


def html_only_titles(cells) -> list[str]:
    """The headings of the summary's cells tagged `html-only` (report.css leaves them out of the PDF)."""
    return [
        line.lstrip("#").strip()
        for c in cells
        if "html-only" in _tags(c)
        for line in (c.source if c.cell_type == "markdown" else "").splitlines()[:1]
        if line.startswith("#")
    ]


def html_only_block(body: str, note: str, markdown: bool = False) -> str:
    """HTML (or Markdown) for the HTML report alone, and in its place in the PDF one line (`note`) saying where
    it is."""
    if markdown:
        import mistune  # nbconvert's own Markdown renderer

        body = mistune.html(body)
    return f'<div class="html-only">{body}</div><p class="print-only note">{html.escape(note)}</p>'


def assemble(summary_path, chapter_paths, out_path) -> nbformat.NotebookNode:
    """The report notebook: summary cells, with every chapter's cells inserted at the summary cell tagged `chapters`;
    parameter cells and cells tagged `report-hide` are left out. The chapters are the HTML report's depth: their
    cells are tagged `html-only`, and the PDF has one line in their place naming the summary's sections it leaves
    to the HTML."""
    summary = nbformat.read(summary_path, as_version=4)
    chapters = [nbformat.read(p, as_version=4) for p in chapter_paths]
    cells = []
    for cell in summary.cells:
        if _tags(cell) & HIDDEN_TAGS:
            continue
        cells.append(cell)
        if "chapters" not in _tags(cell):
            continue
        titles = ["the chapter of each lever"] + html_only_titles(summary.cells)
        note = "*In the HTML report (report.html, beside this PDF), not in this PDF:* " + "; ".join(titles) + "."
        # a fixed id: a random one made the HTML differ between two renders of the same records
        cells.append(nbformat.v4.new_markdown_cell(note, metadata={"tags": ["pdf-only"]}, id="pdf-only-chapters-note"))
        for path, nb in zip(chapter_paths, chapters):
            # every chapter is drawn from one template: its cells are told apart by the chapter's name
            for c in nb.cells:
                if _tags(c) & HIDDEN_TAGS:
                    continue
                tags = sorted(_tags(c) | {"html-only"})
                cells.append(
                    nbformat.from_dict(
                        {**c, "id": f"{Path(path).stem}-{c.id}", "metadata": {**c.get("metadata", {}), "tags": tags}}
                    )
                )
    report = nbformat.v4.new_notebook(cells=cells, metadata=summary.metadata)
    nbformat.write(report, out_path)
    return report


def to_html(notebook, title: str) -> str:
    from nbconvert import HTMLExporter
    from pygments.formatters import HtmlFormatter

    exporter = HTMLExporter(
        template_name="basic", exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True
    )
    exporter.log.setLevel("ERROR")  # charts carry their titles inside the image; no alt-text nagging
    body, _ = exporter.from_notebook_node(notebook)
    css = CSS.read_text() + HtmlFormatter(style="default").get_style_defs(".highlight")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>\n{css}\n</style></head>\n"
        f'<body><main class="report">\n{body}\n</main></body></html>\n'
    )


def _pdf_env() -> dict:
    """The PDF child's environment. A host without Pango (common on GPU images) can use the
    private library folder `make wheelhouse` builds (tools/pdf_sysroot.sh); only this child
    process ever loads those libraries."""
    env = dict(os.environ)
    # fontTools stamps each embedded font subset with the time it was made unless this is set: the PDF of the same
    # HTML then differed byte for byte between two renders
    env.setdefault("SOURCE_DATE_EPOCH", "0")
    sysroot = next((p for p in (ROOT / ".deps" / "sysroot", ROOT / "wheelhouse" / "sysroot") if p.is_dir()), None)
    if sysroot and (env.get("GPT2_LEVERS_PDF_SYSROOT") == "1" or not ctypes.util.find_library("pango-1.0")):
        libs = [str(sysroot / d) for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
        env["FONTCONFIG_FILE"] = str(sysroot / "fonts.conf")
    return env


def to_pdf(html_text: str, pdf_path, base_dir) -> None:
    """Render in a child process (see _pdf_env); raises RuntimeError with the renderer's
    last words if it fails."""
    with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False, encoding="utf-8") as f:
        f.write(html_text)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "lib.report.export", f.name, str(pdf_path), str(base_dir)],
            cwd=ROOT,
            env=_pdf_env(),
            capture_output=True,
            text=True,
        )
    finally:
        os.unlink(f.name)
    if proc.returncode:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise RuntimeError(lines[-1] if lines else f"renderer exited with {proc.returncode}")


def _render(html_path: str, pdf_path: str, base_dir: str) -> None:
    import logging

    # Set before the import: WeasyPrint logs progress while loading its own stylesheets.
    for name in ("weasyprint", "weasyprint.progress", "fontTools"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from weasyprint import HTML

    tmp = Path(pdf_path).with_suffix(".pdf.tmp")
    HTML(filename=html_path, base_url=base_dir).write_pdf(str(tmp))
    os.replace(tmp, pdf_path)


def export(report_dir, chapter_paths, summary_path, title: str, t_start: float, wall_note: str | None = None) -> dict:
    """Assemble, write report.html and report.pdf; the wall time of the whole run up to the PDF
    replaces WALL_TIME_TOKEN. Returns the timings of this step."""
    report_dir = Path(report_dir)
    nb = assemble(summary_path, chapter_paths, report_dir / "report.ipynb")
    t0 = time.perf_counter()
    html_text = to_html(nb, title)
    t_html = time.perf_counter() - t0
    # The PDF is rendered once, from the final HTML: the wall time it quotes stops before it (run.json
    # keeps the PDF's own time). Rendering twice to quote its own time cost a CPU run a third of its export.
    total = time.perf_counter() - t_start
    html_text = html_text.replace(
        WALL_TIME_TOKEN,
        (
            f"{wall_note} (its drawing time is in render.json)"  # no seconds here: two renders draw the same bytes
            if wall_note
            else f"{fmt.duration(total)} s for this whole run: measuring every configuration, then the notebooks and "
            "HTML (the PDF's own time is in run.json)"
        ),
    )
    t0 = time.perf_counter()
    pdf_error = None
    try:
        to_pdf(html_text, report_dir / "report.pdf", report_dir)
    except RuntimeError as e:  # e.g. no Pango on this host: keep the HTML, say so
        pdf_error = (
            f"PDF not rendered here ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
            "render it elsewhere with `make pdf GPU=<name>`"
        )
        html_text = html_text.replace("(the PDF's own time is in run.json)", "(no PDF rendered on this host)")
    t_pdf = time.perf_counter() - t0
    timing = {"html_s": t_html, "pdf_s": t_pdf, "total_s": time.perf_counter() - t_start, "pdf_error": pdf_error}
    (report_dir / "report.html").write_text(html_text, encoding="utf-8")
    return timing


if __name__ == "__main__":
    _render(*sys.argv[1:4])
