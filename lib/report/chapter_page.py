"""A chapter as the report shows it: its text, notebooks/chapters/<key>.md, with the views it names
drawn where it names them (a line `<!-- view: name arguments -->`). One template notebook,
notebooks/chapter.ipynb, shows every chapter this way, so a view added here can appear in any chapter
by one line of its text. A view is a function of the report, the chapter's key and the marker's
arguments; it returns what to show, in order: ("md", text), ("html", text) or a matplotlib figure."""

from __future__ import annotations

import html
import itertools
import re

from lib.core import chapters, record, stages
from lib.report import (
    ablation_view,
    batch_sweep_view,
    charts,
    ddp_charts,
    evidence_view,
    frontier_view,
    gemm_sweep_view,
    profile_view,
    prose,
    size_sweep_view,
    stage_facts,
    tables,
)
from lib.report.loader import Report, compile_time_text, recommended
from lib.results import decide, profiles

MARKER = re.compile(r"^<!-- view: (?P<name>\w+)(?P<args>(?: \w+)*) -->$", re.M)


def _measured(rep: Report, key: str) -> list:
    return [("md", "#### Measured\n\n" + stage_facts.stage_summary(rep, key)), ("html", tables.matrix_html(rep, key))]


def _compile_time(rep: Report, key: str) -> list:
    first = [r for r in rep.records if r["stage"] == key and r.get("first_step_s")]
    return (
        [("md", "First step, compilation included: " + "; ".join(compile_time_text(r) for r in first) + ".")]
        if first
        else []
    )


def _recommended(rep: Report, key: str) -> list:
    # The whole block (switches, memory, energy, loss) lives in the summary's Recommendations; here, its sentence.
    best = recommended(rep)
    return [("md", prose.recommended_line(rep, best) if best else batch_sweep_view.recommended_md(rep))]


VIEWS = {
    "measured": _measured,
    "losses": lambda rep, key: [charts.plot_losses(rep, key)],
    "top_kernels": lambda rep, key: [("html", profile_view.top_kernels_html(profiles.stage_profile(rep, key)))],
    "switch": lambda rep, key: [("md", tables.switch_md(rep, key))],
    "memory_layers": lambda rep, key, against: [
        ("md", evidence_view.memory_layers_md(rep, key, against)),
        ("html", evidence_view.memory_layers_html(rep, key, against)),
    ],
    "seq_sweep": lambda rep, key: [("html", evidence_view.seq_sweep_html(rep)), evidence_view.plot_seq_sweep(rep)],
    "sdpa_backends": lambda rep, key: [("html", frontier_view.sdpa_html(rep))],
    "gemm": lambda rep, key: [("md", gemm_sweep_view.gemm_md(rep)), gemm_sweep_view.plot_gemm(rep)],
    "gemm_kernels": lambda rep, key: [("html", gemm_sweep_view.gemm_kernels_html(rep))],
    "compile_time": _compile_time,
    "compile_vocab": lambda rep, key: [("html", evidence_view.compile_vocab_html(rep))],
    "versus": lambda rep, key, *against: [("html", frontier_view.versus_html(rep, key, against))],
    "ce_filter": lambda rep, key: [("html", frontier_view.ce_filter_html(rep))],
    "batch_sweep": lambda rep, key: [("html", batch_sweep_view.sweep_html(rep)), batch_sweep_view.plot_sweep(rep)],
    "recommended": _recommended,
    "recommended_kernels": lambda rep, key: [("html", batch_sweep_view.recommended_profile_html(rep))],
    "recipe": lambda rep, key: [("html", frontier_view.recipe_html(rep))],
    "ablation": lambda rep, key: [("html", ablation_view.ablation_html(rep))],
    "ddp_scaling": lambda rep, key: [("html", evidence_view.ddp_curve_html(rep)), ddp_charts.plot_ddp_scaling(rep)],
    "size_sweep": lambda rep, key: [("html", size_sweep_view.size_html(rep)), size_sweep_view.plot_size(rep)],
    "size_crossover": lambda rep, key: [("md", size_sweep_view.crossover_md(rep))],
    "size_batch": lambda rep, key: [("md", size_sweep_view.batch_md(rep))],
}


def text_of(key: str) -> str:
    return chapters.CHAPTERS[key].text.read_text()


def plan(text: str) -> list[tuple]:
    """The chapter's text cut at its view markers: ("md", text) and ("view", name, arguments), in order.
    A view the registry does not have is an error that names the views it has."""
    out, at = [], 0
    for m in MARKER.finditer(text):
        if m.group("name") not in VIEWS:
            raise ValueError(f"unknown view {m.group('name')!r} (views: {', '.join(VIEWS)})")
        out += [("md", text[at : m.start()].strip()), ("view", m.group("name"), tuple(m.group("args").split()))]
        at = m.end()
    return [p for p in out + [("md", text[at:].strip())] if p != ("md", "")]


# A stretch of a chapter's text between these lines is in the HTML report only: the PDF, which a reader
# reads through, says in one line where it is (per-step loss curves, kernel tables).
HTML_ONLY = re.compile(r"^<!-- html-only -->$(?P<body>.*?)^<!-- /html-only -->$", re.M | re.S)
HEADING = re.compile(r"^#### (.+)$", re.M)


def in_the_html(titles: list[str]) -> str:
    """The PDF's line where a chapter's stretches for the HTML only were: what they are, and where."""
    return (
        '<p class="print-only note">In the HTML report (report.html, beside this PDF): '
        + "; ".join(html.escape(t) for t in titles)
        + ".</p>"
    )


def regions(text: str) -> list[tuple[bool, str]]:
    """The chapter's text in stretches, each (in the HTML only?, text), in order."""
    out, at = [], 0
    for m in HTML_ONLY.finditer(text):
        out += [(False, text[at : m.start()]), (True, m.group("body"))]
        at = m.end()
    return [(hidden, t) for hidden, t in out + [(False, text[at:])] if t.strip()]


def parts(rep: Report, key: str, brief: bool = False) -> list[tuple[bool, object]]:
    """Everything the chapter shows, in order, each (in the HTML only?, part): its prose and its views'
    output (a view that draws a figure with nothing in it returns None, which is left out). `brief`: the
    PDF keeps the heading and the measured view alone (aside)."""
    out = []
    for hidden, text in regions(text_of(key)):
        for p in plan(text):
            if brief and not hidden and p[0] == "md" and not out:  # the heading stays; its introduction goes
                title, _, intro = p[1].partition("\n")
                # ... but for the stage's one line on what it changes, so the PDF still says what the lever is
                what = f"\n\nWhat it changes: {stages.get(key).lever}." if key in stages.STAGES else ""
                out += [(False, ("md", title + what)), (True, ("md", intro))]
                continue
            hide = hidden or (brief and p[:2] != ("view", "measured"))
            out += [(hide, x) for x in ([p] if p[0] == "md" else VIEWS[p[1]](rep, key, *p[2]))]
    return [(hidden, p) for hidden, p in out if p is not None]


def aside(rep: Report, key: str) -> bool:
    """Whether a stage's chapter is a lever the recommendation does not use: the PDF keeps its heading and its
    measured figures (one page per lever that matters); its evidence stays in the HTML."""
    best = recommended(rep)
    return (
        best is not None
        and key in stages.STAGES
        and not stages.get(key).multi_gpu
        and key != rep.stage_order[0]
        and key not in decide.lineage(best["stage"])
    )


def _as_html(part) -> str:
    """A part as HTML of its own: Markdown rendered, a figure as an embedded PNG (the report stays one file)."""
    import base64
    import io

    if isinstance(part, tuple):
        if part[0] == "md":
            import mistune  # nbconvert's own Markdown renderer

            return mistune.html(part[1])
        return part[1]
    buf = io.BytesIO()
    part.savefig(buf, format="png", bbox_inches="tight")
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def nothing_measured(rep: Report, key: str) -> str | None:
    """Why a stage's chapter timed nothing (not applicable here, out of memory, cut off before it), or None where
    it timed something or is no stage's chapter."""
    if key not in stages.STAGES:
        return None
    rows = rep.df[rep.df["stage"] == key]
    if rows["status"].isin(record.TIMED).any():
        return None
    reasons = [str(r) for r in rows["reason"] if isinstance(r, str) and r]
    return reasons[0] if reasons else "no run reached it"


def print_heading_only(shown: list, why: str) -> list:
    """A chapter that timed nothing, for the PDF: its heading and one line saying why; the rest in the HTML."""
    (_, first), rest = shown[0], shown[1:]
    title, _, intro = first[1].partition("\n")
    note = (
        f'<p class="print-only note">Nothing measured here: {html.escape(why)}. The chapter is in the HTML report.</p>'
    )
    return [(False, ("md", title)), (False, ("html", note)), (True, ("md", intro))] + [(True, p) for _, p in rest]


def opening_length(shown: list) -> int:
    """How many parts a brief chapter's opening holds: its heading, through its first table."""
    tables = [i for i, (hidden, p) in enumerate(shown) if not hidden and isinstance(p, tuple) and p[0] == "html"]
    return tables[0] + 1 if tables else 0


def opening(shown: list) -> str | None:
    """A brief chapter's heading, its one line and its measured text and table as one block the PDF keeps on one
    page (class keep-together): the heading had stood alone at a page's foot. Its introduction stays in the block,
    for the HTML only, so the HTML reads in the same order."""
    n = opening_length(shown)
    if not n:
        return None
    inner = "".join(f'<div class="html-only">{_as_html(p)}</div>' if hidden else _as_html(p) for hidden, p in shown[:n])
    # the id nbconvert gives a Markdown heading, so the chapter stays linkable like the others
    inner = re.sub(
        r"<h3>([^<]*)</h3>", lambda m: f'<h3 id="{m.group(1).replace(" ", "-")}">{m.group(1)}</h3>', inner, 1
    )
    return f'<div class="keep-together">{inner}</div>'


def show(rep: Report, key: str) -> None:
    """Display the chapter in a notebook: text as Markdown, tables as HTML, each figure where it belongs; a
    stretch for the HTML only as one block the PDF leaves out, with a line there saying where it is. A chapter
    that timed nothing is its heading and that line in the PDF (nothing_measured)."""
    import matplotlib.pyplot as plt
    from IPython.display import HTML, Markdown, display

    why = nothing_measured(rep, key)
    brief = not why and aside(rep, key)
    shown = parts(rep, key, brief=brief)
    if why:
        shown = print_heading_only(shown, why)
    if brief and (head := opening(shown)):
        display(HTML(head))
        n = opening_length(shown)
        for _, p in shown[:n]:
            if not isinstance(p, tuple):
                plt.close(p)
        shown = shown[n:]
    for hidden, run in itertools.groupby(shown, key=lambda x: x[0]):
        run = [p for _, p in run]
        if hidden:  # consecutive stretches for the HTML only make one block
            display(HTML('<div class="html-only">' + "\n".join(_as_html(p) for p in run) + "</div>"))
        for p in run:
            if not hidden:
                display((Markdown(p[1]) if p[0] == "md" else HTML(p[1])) if isinstance(p, tuple) else p)
            if not isinstance(p, tuple):
                plt.close(p)
    titles = [
        t for hidden, p in shown if hidden and isinstance(p, tuple) and p[0] == "md" for t in HEADING.findall(p[1])
    ]
    if brief:
        titles.insert(0, "this lever's introduction (the recommendation does not use it)")
    if titles and not why:  # a chapter that timed nothing already said where it is
        display(HTML(in_the_html(titles)))
