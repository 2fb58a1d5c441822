"""*How the size sweep reads*: per model preset, the configuration without FP8 against each FP8
form (lib/run/size_sweep.py measured them), where the step time goes, and the crossover: the
smallest size from which an FP8 form is faster beyond the report's measured noise, at that size
and every larger one. Every sentence is computed from the records."""

from __future__ import annotations

import html

import numpy as np

from lib.core import config, stages
from lib.report import formats as fmt
from lib.report.charts import save, style
from lib.report.evidence_view import none, table
from lib.report.loader import Report, gib, recommended, tok
from lib.results import profiles, size_sweep

WITHOUT_FP8 = size_sweep.WITHOUT_FP8
# where a size's band comes from, when not from its own repeated points (size_sweep.decided's "source")
SOURCE = {
    "own": "",
    "floor": " (the report's noise floor)",
    "sweep": " (the sweep's widest: no point of it was repeated)",
}


def points(rep: Report) -> dict[str, dict[str, list[dict]]]:
    """{preset: {variant: its records, one per process}}, presets smallest first, without FP8 first."""
    return size_sweep.points(rep.evidence["size"])


def label(preset: str, recs: dict) -> str:
    """gpt2-xl (1.56B, d=1600): the preset with the parameter count its processes counted."""
    n = next((r.get("n_params") for rs in recs.values() for r in rs if r.get("n_params")), None)
    shape = config.presets().get(preset, {})
    size = fmt.params(n)
    width = f"d={shape['n_embd']}" if shape else ""
    return f"{preset} ({', '.join(x for x in (size, width) if x)})"


def decided(rep: Report) -> dict:
    """The size sweep as decided once (lib/results/size_sweep.py decided: each size's band, where it comes from, each
    FP8 form's crossover); empty where it was not measured."""
    return rep.decided["size_sweep"] or {"bands": {}, "source": {}, "crossover": {}}


def bands(rep: Report) -> tuple[dict[str, float | None], float | None]:
    """({preset: the band its ratios must leave to count (size_sweep.bands, decided once)}, the report's noise
    floor)."""
    return decided(rep)["bands"], rep.decided["noise_floor"]


def speedups(rep: Report) -> dict[str, list[tuple[str, float | None, str | None]]]:
    """{FP8 form: [(preset, its speed-up over the same preset without FP8, or None, and why not)]} (size_sweep)."""
    return size_sweep.speedups(rep.evidence["size"])


def crossover_md(rep: Report) -> str:
    """One sentence per FP8 form: from which size it pays on this device, with the ratios it rests on."""
    series, (band, floor) = speedups(rep), bands(rep)
    if not points(rep):
        return "Nothing to compare: the size sweep was not measured for this report (above)."
    if not any(s is not None for pts in series.values() for _, s, _ in pts):
        why = next((w for pts in series.values() for _, _, w in pts if w), "")
        return "No FP8 form ran at any size on this device" + (f" ({html.escape(why)})." if why else ".")
    if all(b is None for b in band.values()):
        lines = [
            "An FP8 form *pays* at a size when its tokens/s exceed the same size's without-FP8 point; this "
            "report measured no process-to-process noise, so a small difference may be noise."
        ]
    else:
        source = decided(rep)["source"]
        each = ", ".join(f"{p} {fmt.pct(b)}" + SOURCE[source[p]] for p, b in band.items() if b is not None)
        lines = [
            f"An FP8 form *pays* at a size when its median tokens/s exceed the same size's without-FP8 median by "
            f"more than that size's measured noise, a process-to-process range (fastest minus slowest process, "
            f"over the median): {each}. A size whose points ran in two or more processes is judged by the widest "
            "range among them, any other by the widest range of the sweep, and none by less than the report's "
            "noise floor" + (f" ({fmt.pct(floor)})." if floor is not None else ".")
        ]
    for form, pts in series.items():
        c = decided(rep)["crossover"][form]
        ratio = ", ".join(f"{p} {fmt.times(s)}" for p, s in c["ratios"].items())
        if not c["ratios"]:
            why = next((w for _, _, w in pts if w), "")
            lines.append(f"* **{html.escape(form)}**: not measured at any size ({html.escape(why)}).")
            continue
        sizes = list(c["ratios"])
        if c["from"] == sizes[0]:
            verdict = f"pays at every size measured, from {c['from']} on"
        elif c["from"] == sizes[-1]:
            verdict = (
                f"pays at **{c['from']}**, the largest size measured and the only one at which it pays: the "
                "crossover on this device, at this batch"
            )
        elif c["from"]:
            verdict = f"pays from **{c['from']}** on: the crossover on this device, at this batch"
        elif c["wins"]:
            verdict = f"pays at {', '.join(c['wins'])} but not at every larger size, so no crossover can be stated"
        else:
            largest = list(c["ratios"])[-1]
            kinds = [f"slower beyond the noise at {', '.join(c['losses'])}"] if c["losses"] else []
            kinds += [f"within the noise at {', '.join(c['ties'])}"] if c["ties"] else []
            verdict = (
                f"does not pay at any size measured ({'; '.join(kinds)}): no crossover up to {largest} "
                "on this device at this batch"
            )
        gaps = f"; not measured at {', '.join(c['unmeasured'])}" if c["unmeasured"] else ""
        lines.append(
            f"* **{html.escape(form)}** {verdict} (tokens/s over without FP8: {ratio}{gaps})."
            + _apart(rep, form, c["wins"])
            + _memory(rep, form)
        )
    return "\n".join(lines)


def _apart(rep: Report, form: str, wins: list[str]) -> str:
    """For each win timed in several processes on both sides: by how much its slowest process beat
    the fastest without FP8 (a win that survives the harshest pairing of its processes)."""
    out = []
    for preset in wins:
        if found := size_sweep.apart(points(rep)[preset], form):
            gap, slowest, fastest = found
            out.append(
                f" At {preset} its slowest process is {fmt.pct(gap, sign='+')} against the fastest without FP8"
                f" ({tok(slowest)} against {tok(fastest)} tokens/s)."
            )
    return "".join(out)


def _memory(rep: Report, form: str) -> str:
    """The form's allocator peak over the without-FP8 point's, size by size."""
    ratios = [f"{preset} {fmt.times(x)}" for preset, x in size_sweep.memory_ratios(rep.evidence["size"], form)]
    return f" Allocator peak against without FP8: {', '.join(ratios)}." if ratios else ""


def batch_md(rep: Report) -> str:
    """What the one batch size means for the report's own model: where its recommendation runs, and each
    FP8 form's stage in the matrix at its batch sizes beside the sweep's point (a lever's worth depends
    on the batch as well as the size). A sweep point slower than its stage at a larger batch is flagged."""
    pts, best, own = points(rep), recommended(rep), config.preset_of(rep.params)
    if not pts:
        return "Nothing to set beside the stage matrix: the size sweep was not measured for this report."
    if own not in pts or best is None:
        return ""
    recs = pts[own]
    b = next(iter(recs.values()))[0]["batch_size"]
    here = size_sweep.ran(recs.get(WITHOUT_FP8, []))
    lines = [
        f"Every size runs at B={b}, one batch for all of them; this report's own model, {own}, is recommended at "
        f"B={best['batch_size']} ({tok(best['processes']['median'])} tokens/s, median of its processes)"
        + (f", against {tok(np.median(here))} tokens/s here without FP8" if here else "")
        + f": at B={b} it runs far below its operating point, and a ratio here is not the lever's worth at the "
        "recommended batch."
    ]
    titles = {s.title: s for s in stages.STAGES.values()}
    for form, rs in recs.items():
        stage = titles.get(form)
        if form == WITHOUT_FP8 or stage is None or not size_sweep.ran(rs):
            continue
        m = size_sweep.beside_matrix(rep.records, stage.key, stage.base, rs, b)
        if m is None:
            continue
        ratios = ", ".join(f"{fmt.times(ratio)} at B={x}" for x, ratio in m["ratios"])
        line = (
            f"* **{html.escape(form)}**: the stage matrix measures {html.escape(stage.title)} over "
            f"{html.escape(stages.get(stage.base).title)} at {ratios}."
        )
        if m["longer_than"]:
            x, shorter = m["longer_than"]
            line += (
                f" Its B={b} step here ({fmt.ms(m['ms'])} ms; added to the recommendation without FP8) is longer than "
                f"the stage's at B={x} ({fmt.ms(shorter)} ms; added to {stages.get(stage.base).title}), with "
                f"{b}/{x} of the tokens: not the GEMMs' work, then, but something the sweep does not show "
                f"(it profiles only the points without FP8), so its {own} ratio says little about FP8's GEMMs."
            )
        lines.append(line)
    return "\n".join(lines)


def size_html(rep: Report) -> str:
    pts = points(rep)
    if not pts:
        return none(
            'The size sweep was not measured for this report: "make report GPU='
            f'{rep.params.name} CHAPTERS=size_sweep" measures it (after the batch-size sweep has chosen '
            "the recommendation it varies)."
        )
    best = recommended(rep)
    rows, reasons = [], []  # why a point did not run: numbered notes under the table
    for preset, recs in pts.items():
        for i, (variant, rs) in enumerate(recs.items()):
            r, f = rs[0], size_sweep.point_figures(rs)
            tps = f["tokens_per_s"]
            is_rec = bool(best) and r["stage"] == best["stage"] and not r.get("stage_overrides")
            if not tps and r.get("reason") and r["reason"] not in reasons:
                reasons.append(r["reason"])
            mark = f" ({reasons.index(r['reason']) + 1})" if not tps and r.get("reason") else ""
            spread = f"{len(tps)}: {tok(min(tps))}–{tok(max(tps))}" if len(tps) > 1 else (str(len(tps)) if tps else "")
            rows.append(
                {
                    "Model": label(preset, recs) if i == 0 else "",
                    "Configuration": html.escape(variant) + (" (recommended)" if is_rec else ""),
                    "ms/step": fmt.ms(f["ms"]) if tps else r["status"].upper().replace("_", " ") + mark,
                    "tok/s": tok(np.median(tps)) if tps else "",
                    "processes: range": spread,
                    "MFU (bf16 peak)": fmt.pct(f["mfu"]) if f["mfu"] is not None else "",
                    "allocator GiB": gib(f["mem"]) if f["mem"] is not None else "",
                    "GEMM share of GPU busy time": fmt.pct(f["gemm_share"], 0) if f["gemm_share"] is not None else "",
                }
            )
    b = next(iter(next(iter(pts.values())).values()))[0]
    walls = [r["wall_s"] for recs in pts.values() for rs in recs.values() for r in rs if r.get("wall_s")]
    note = (
        f"<p class='note'>Every point at B={b['batch_size']} × T={b['seq_len']}, {b['warmup_steps']} untimed and "
        f"{b['timed_steps']} timed steps; with several processes a point shows their median (of tokens/s, step "
        "time, MFU and GEMM share) and their largest allocator peak. Parameters as the model counts them (the "
        "position embeddings left out, as nanoGPT counts). The GEMM "
        "share is of one profiled step of the without-FP8 configuration. MFU counts 6N + 12·L·d·T FLOPs per token "
        "against the bf16 peak."
        + (
            f" The {len(walls)} processes took {_duration(sum(walls))} in all (each one's "
            "wall time, compilation included)."
            if walls
            else ""
        )
        + "</p>"
    )
    why = "".join(f"<p class='note'>({i}) {html.escape(t)}</p>" for i, t in enumerate(reasons, 1))
    return table(rows) + note + why


def _duration(seconds: float) -> str:
    return f"{fmt.duration(seconds / 60)} minutes" if seconds >= 90 else f"{fmt.duration(seconds)} s"


def plot_size(rep: Report):
    series = {k: [(p, s) for p, s, _ in v if s is not None] for k, v in speedups(rep).items()}
    series = {k: v for k, v in series.items() if v}
    shares = [
        (label(p, recs), profiles.gemm_share((recs.get(WITHOUT_FP8) or [None])[0])) for p, recs in points(rep).items()
    ]
    shares = [(p, s) for p, s in shares if s is not None]
    if not series and not shares:
        return None
    plt = style()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3))
    names = list(points(rep))
    band = bands(rep)[0]
    known = [(names.index(p), b) for p, b in band.items() if b is not None]
    if not series:
        a1.text(0.5, 0.5, "no FP8 form ran on this device", ha="center", va="center", transform=a1.transAxes)
    elif known:  # each size's band, as the crossover is judged: 1 ± its process-to-process range
        a1.errorbar(
            [x for x, _ in known],
            [1.0] * len(known),
            yerr=[b for _, b in known],
            fmt="none",
            ecolor="grey",
            elinewidth=6,
            alpha=0.3,
            label="noise band of each size (the text says which are borrowed)",
        )
    a1.axhline(1.0, color="grey", lw=0.7)
    for i, (form, pts) in enumerate(series.items()):
        a1.plot([names.index(p) for p, _ in pts], [s for _, s in pts], "o-", color=f"C{i}", label=form)
    a1.set_ylabel("tokens/s over without FP8")
    a1.set_title("FP8 speed-up against model size", fontsize=9)
    if shares:
        a2.bar(range(len(shares)), [s * 100 for _, s in shares], color="C0")
        a2.set_xticks(range(len(shares)), [p.split(" (")[0] for p, _ in shares], fontsize=7)
    a2.set_ylabel("GEMM share of busy time (%)")
    a2.set_title("Where the step goes (without FP8)", fontsize=9)
    a1.set_xticks(range(len(names)), names, fontsize=7)
    if a1.get_legend_handles_labels()[0]:  # nothing to name where no FP8 form ran (a CPU)
        a1.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    return save(fig, rep, "size_sweep")
