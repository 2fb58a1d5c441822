"""*How the size sweep reads*: per model preset, the configuration without FP8 against each FP8
form (lib/size_sweep.py measured them), where the step time goes, and the crossover: the
smallest size from which an FP8 form is faster beyond the report's measured noise, at that size
and every larger one. Every sentence is computed from the records."""
from __future__ import annotations

import html

import numpy as np

from . import config, results
from .evidence_view import OK, none, table
from .fidelity_view import noise
from .report import Report, gib, recommended
from .report_charts import save, style

WITHOUT_FP8 = "without FP8"  # the variant of each preset's reference point (lib/size_sweep.py writes it)


def _size(rec: dict) -> tuple:
    shape = config.presets().get(rec.get("model"), {})
    return (shape.get("n_layer", 0) * shape.get("n_embd", 0) ** 2, rec.get("model") or "")


def points(rep: Report) -> dict[str, dict[str, list[dict]]]:
    """{preset: {variant: its records, one per process}}, presets smallest first, without FP8 first."""
    out: dict[str, dict[str, list[dict]]] = {}
    for r in sorted(rep.evidence["size"], key=lambda r: (_size(r), r.get("variant") != WITHOUT_FP8)):
        out.setdefault(r.get("model") or "?", {}).setdefault(r.get("variant") or "?", []).append(r)
    return out


def _ran(recs: list[dict]) -> list[float]:
    return [r["tokens_per_s"] for r in recs if r["status"] in OK]


def label(preset: str, recs: dict) -> str:
    """gpt2-xl (1.56B, d=1600): the preset with the parameter count its processes counted."""
    n = next((r.get("n_params") for rs in recs.values() for r in rs if r.get("n_params")), None)
    shape = config.presets().get(preset, {})
    size = "" if n is None else (f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e7 else f"{n / 1e6:.2f}M")
    width = f"d={shape['n_embd']}" if shape else ""
    return f"{preset} ({', '.join(x for x in (size, width) if x)})"


def _spread(recs: dict[str, list[dict]]) -> float | None:
    return results.noise_floor({v: _ran(rs) for v, rs in recs.items()})


def bands(rep: Report) -> tuple[dict[str, float | None], float | None]:
    """({preset: the band its ratios must leave to count}, the report's noise floor). Noise depends on
    the step's length (short steps at a small batch spread wider between processes), so a preset
    whose points ran in several processes is judged by their widest range, any other by the widest
    range of the sweep; never by less than the report's floor. None where nothing was repeated."""
    _, floor = noise(rep)
    pts = points(rep)
    sweep = results.noise_floor({(p, v): _ran(rs) for p, vs in pts.items() for v, rs in vs.items()})
    out = {}
    for preset, recs in pts.items():
        own = _spread(recs)
        known = [x for x in (floor, own if own is not None else sweep) if x is not None]
        out[preset] = max(known) if known else None
    return out, floor


def speedups(rep: Report) -> dict[str, list[tuple[str, float | None, str | None]]]:
    """{FP8 form: [(preset, its median tokens/s over the same preset's without-FP8 median, or None,
    and why not when None)]}, presets smallest first."""
    out: dict[str, list] = {}
    for preset, recs in points(rep).items():
        base = _ran(recs.get(WITHOUT_FP8, []))
        for variant, rs in recs.items():
            if variant == WITHOUT_FP8:
                continue
            if _ran(rs) and base:
                out.setdefault(variant, []).append((preset, float(np.median(_ran(rs)) / np.median(base)), None))
            else:
                why = rs[0] if not _ran(rs) else (recs.get(WITHOUT_FP8) or [None])[0]
                text = (f"{why['status'].replace('_', ' ')}" + (f": {why['reason']}" if why.get("reason") else "")
                        if why else "its without-FP8 point was not measured")
                out.setdefault(variant, []).append((preset, None, text))
    return out


def crossover(series: list[tuple[str, float | None, str | None]], band: dict[str, float | None]) -> dict:
    """Where an FP8 form starts to pay: {"from": the smallest preset from which it is faster beyond
    its size's band (`band`: preset -> relative noise) at that size and every larger measured one, or
    None; "wins", "ties", "losses": the presets of each kind; "unmeasured"; "ratios"}. Without a
    measured band a ratio above 1 counts as a win, and the statement says the noise was not measured."""
    measured = [(p, s) for p, s, _ in series if s is not None]
    kind = {p: ("win" if s > 1 + (band.get(p) or 0.0) else "loss" if s < 1 - (band.get(p) or 0.0) else "tie")
            for p, s in measured}
    start = None
    for i, (p, _) in enumerate(measured):
        if all(kind[q] == "win" for q, _ in measured[i:]):
            start = p
            break
    return {"from": start, "wins": [p for p, _ in measured if kind[p] == "win"],
            "ties": [p for p, _ in measured if kind[p] == "tie"], "losses": [p for p, _ in measured if kind[p] == "loss"],
            "unmeasured": [p for p, s, _ in series if s is None], "ratios": dict(measured)}


def crossover_md(rep: Report) -> str:
    """One sentence per FP8 form: from which size it pays on this device, with the ratios it rests on."""
    series, (band, floor) = speedups(rep), bands(rep)
    if not series:
        return "The size sweep has no FP8 form to compare on this device."
    if all(b is None for b in band.values()):
        lines = ["An FP8 form *pays* at a size when its tokens/s exceed the same size's without-FP8 point; this "
                 "report measured no process-to-process noise, so a small difference may be noise."]
    else:
        each = ", ".join(f"{p} ±{b * 100:.1f} %" for p, b in band.items() if b is not None)
        lines = [f"An FP8 form *pays* at a size when its tokens/s exceed the same size's without-FP8 point by more "
                 f"than that size's measured noise: {each}. A size whose points ran in two or more processes is "
                 "judged by their widest range, any other by the widest range of the "
                 "sweep, and none by less than the report's noise floor"
                 + (f" (±{floor * 100:.1f} %)." if floor is not None else ".")]
    for form, pts in series.items():
        c = crossover(pts, band)
        ratio = ", ".join(f"{p} {s:.2f}×" for p, s in c["ratios"].items())
        if not c["ratios"]:
            why = next((w for _, _, w in pts if w), "")
            lines.append(f"* **{html.escape(form)}**: not measured at any size ({html.escape(why)}).")
            continue
        if c["from"] == next(iter(c["ratios"])):
            verdict = f"pays at every size measured, from {c['from']} on"
        elif c["from"]:
            verdict = f"pays from **{c['from']}** on: the crossover on this device"
        elif c["wins"]:
            verdict = f"pays at {', '.join(c['wins'])} but not at every larger size, so no crossover can be stated"
        else:
            largest = list(c["ratios"])[-1]
            kinds = [f"slower beyond the noise at {', '.join(c['losses'])}"] if c["losses"] else []
            kinds += [f"within the noise at {', '.join(c['ties'])}"] if c["ties"] else []
            verdict = (f"does not pay at any size measured ({'; '.join(kinds)}): no crossover up to {largest} "
                       "on this device")
        gaps = f"; not measured at {', '.join(c['unmeasured'])}" if c["unmeasured"] else ""
        lines.append(f"* **{html.escape(form)}** {verdict} (tokens/s over without FP8: {ratio}{gaps}).")
    return "\n".join(lines)


def gemm_share(rec: dict | None) -> float | None:
    prof = (rec or {}).get("kernel_profile") or {}
    busy = prof.get("busy_ms")
    return prof["categories"].get("GEMM", 0.0) / busy if busy and prof.get("categories") else None


def size_html(rep: Report) -> str:
    pts = points(rep)
    if not pts:
        return none("The size sweep was not measured for this report: `make report GPU="
                    f"{rep.params['name']} CHAPTERS=size_sweep` measures it (after the batch-size sweep has chosen "
                    "the recommendation it varies).")
    best = recommended(rep)
    rows, reasons = [], []  # why a point did not run: numbered notes under the table
    for preset, recs in pts.items():
        for i, (variant, rs) in enumerate(recs.items()):
            r, tps = rs[0], _ran(rs)
            is_rec = bool(best) and r["stage"] == best["stage"] and not r.get("stage_overrides")
            shares = [x for x in map(gemm_share, rs) if x is not None]
            if not tps and r.get("reason") and r["reason"] not in reasons:
                reasons.append(r["reason"])
            mark = f" ({reasons.index(r['reason']) + 1})" if not tps and r.get("reason") else ""
            ms = [x["median_ms"] for x in rs if x["status"] in OK]
            mfu = [x["mfu"] for x in rs if x["status"] in OK and x.get("mfu") is not None]
            mem = [x.get("mem_allocator_bytes") for x in rs if x["status"] in OK and x.get("mem_allocator_bytes")]
            spread = f" ({min(tps):,.0f}–{max(tps):,.0f}, {len(tps)} processes)" if len(tps) > 1 else ""
            rows.append({"Model": label(preset, recs) if i == 0 else "", "Configuration": html.escape(variant) + (" (recommended)" if is_rec else ""),
                         "ms/step": f"{np.median(ms):.1f}" if tps else r["status"].upper().replace("_", " ") + mark,
                         "tok/s": f"{np.median(tps):,.0f}{spread}" if tps else "",
                         "MFU (bf16 peak)": f"{np.median(mfu) * 100:.1f} %" if mfu else "",
                         "allocator GiB": gib(max(mem)) if mem else "",
                         "GEMM share of GPU busy time": f"{np.median(shares) * 100:.0f} %" if shares else ""})
    b = next(iter(next(iter(pts.values())).values()))[0]
    note = (f"<p class='note'>Every point at B={b['batch_size']} × T={b['seq_len']}, {b['warmup_steps']} untimed and "
            f"{b['timed_steps']} timed steps, one process each unless the tokens/s cell gives a range (the median "
            "of the processes, and of their step times, MFU and GEMM shares; the largest allocator peak). The GEMM "
            "share is of one profiled step of the without-FP8 configuration. MFU counts 6N + 12·L·d·T FLOPs per token "
            f"against the bf16 peak. The {sum(len(rs) for recs in pts.values() for rs in recs.values())} processes "
            f"took {sum(r.get('wall_s') or 0 for recs in pts.values() for rs in recs.values() for r in rs) / 60:.0f} "
            "minutes in all (each one's wall time, compilation included).</p>")
    why = "".join(f"<p class='note'>({i}) {html.escape(t)}</p>" for i, t in enumerate(reasons, 1))
    return table(rows) + note + why


def plot_size(rep: Report):
    series = {k: [(p, s) for p, s, _ in v if s is not None] for k, v in speedups(rep).items()}
    series = {k: v for k, v in series.items() if v}
    shares = [(label(p, recs), gemm_share((recs.get(WITHOUT_FP8) or [None])[0])) for p, recs in points(rep).items()]
    shares = [(p, s) for p, s in shares if s is not None]
    if not series and not shares:
        return None
    plt = style()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3))
    names = list(points(rep))
    band = bands(rep)[0]
    known = [(names.index(p), b) for p, b in band.items() if b is not None]
    if known:
        xs, bs = [x for x, _ in known], [b for _, b in known]
        a1.fill_between(xs, [1 - b for b in bs], [1 + b for b in bs], color="grey", alpha=0.15, lw=0,
                        label="measured noise at that size")
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
    a1.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    return save(fig, rep, "size_sweep")
