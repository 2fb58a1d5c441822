"""One report across GPUs: the same stages side by side, each GPU against its own FP32
baseline, and the software versions that differ between them (version skew distorts
cross-GPU comparisons, so it is flagged, never hidden)."""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from . import claims, config, report, report_charts, results, stages
from .paths import ROOT

SKEW_KEYS = [("torch", "PyTorch"), ("cuda", "CUDA"), ("cublas", "cuBLAS(Lt)"), ("cudnn", "cuDNN"),
             ("driver", "Driver"), ("python", "Python")]


class CompareError(ValueError):
    pass


def load_all(names: list[str], reports_root=None) -> dict[str, report.Report]:
    """Every named report, or a CompareError naming the first one that is missing or unreadable."""
    root = Path(reports_root) if reports_root else ROOT / "reports"
    if len(names) < 2:
        raise CompareError(f"compare needs at least two reports, got {len(names)}: {' '.join(names) or '(none)'}")
    if len(set(names)) != len(names):
        raise CompareError(f"a report is named twice: {' '.join(names)}")
    out = {}
    for name in names:
        config.check_name(name)
        d = root / name
        if not (d / "params.json").exists() or not (d / "results").is_dir():
            have = sorted(p.name for p in root.iterdir() if (p / "params.json").exists()) if root.exists() else []
            raise CompareError(f"no report for {name!r} in {root} (reports there: {', '.join(have) or 'none'})")
        try:
            out[name] = report.load(d)
        except ValueError as e:  # results of another schema version
            raise CompareError(f"report {name!r} cannot be compared: {e}") from None
    return out


def skew(reps: dict[str, report.Report]) -> pd.DataFrame:
    rows = []
    for key, label in SKEW_KEYS:
        values = {name: str(rep.env.get(key)) for name, rep in reps.items()}
        rows.append({"component": label, **values, "differs": len(set(values.values())) > 1})
    # How the step was built and timed (lib/results.METHOD): reports of different methods do not compare.
    values = {name: str(rep.params.get("method", 1)) for name, rep in reps.items()}
    rows.append({"component": "measurement method", **values, "differs": len(set(values.values())) > 1})
    return pd.DataFrame(rows)


def skew_html(reps) -> str:
    t = skew(reps)
    names = list(reps)
    head = "".join(f"<th>{n}</th>" for n in names)
    body = ""
    for r in t.itertuples(index=False):
        cells = "".join(f"<td>{html.escape(getattr(r, n) if n.isidentifier() else r[names.index(n) + 1])}</td>"
                        for n in names)
        flag = '<span class="bad">differs</span>' if r.differs else '<span class="ok">same</span>'
        body += f"<tr><th>{r.component}</th>{cells}<td>{flag}</td></tr>"
    devices = "".join(f"<td>{html.escape(rep.env['device']['name'])}</td>" for rep in reps.values())
    table = (f'<table class="kv"><tr><th></th>{head}<th></th></tr><tr><th>Device</th>{devices}<td></td></tr>'
             f"{body}</table>")
    if t["differs"].any():
        table += ('<p class="bad">Version skew: the GPUs were measured with different software '
                  f'({", ".join(t[t["differs"]]["component"])}). Part of any difference below may come from '
                  "the software, not the hardware.</p>")
    else:
        table += '<p>No version skew: every GPU ran the same software stack, so differences are the hardware\'s.</p>'
    return table


def stage_table(reps: dict[str, report.Report]) -> pd.DataFrame:
    """Per stage and GPU: best tokens/s over batch sizes, its batch, that over the GPU's own best
    FP32 tokens/s, MFU and allocator memory at that batch."""
    rows = []
    order = [k for k in stages.ORDER if any(k in rep.stage_order for rep in reps.values())]
    base_best = {}
    for name, rep in reps.items():  # best FP32 throughput: B=64 may not fit in FP32 where it fits later
        ok = rep.df[(rep.df["stage"] == rep.stage_order[0]) & (rep.df["status"] == "ok")]
        base_best[name] = ok["tokens_per_s"].max() if not ok.empty else np.nan
    for key in order:
        row = {"stage": stages.get(key).title}
        for name, rep in reps.items():
            ok = rep.df[(rep.df["stage"] == key) & (rep.df["status"] == "ok")]
            best = ok.loc[ok["tokens_per_s"].idxmax()] if not ok.empty else None
            row.update(_cells(name, best, base_best[name]))
        rows.append(row)
    # Each report's recommended configuration, which its batch sweep may have found beyond the matrix.
    row = {"stage": RECOMMENDED}
    for name, rep in reps.items():
        rec = report.recommended(rep)
        row.update(_cells(name, pd.Series(rec) if rec is not None else None, base_best[name]))
    rows.append(row)
    return pd.DataFrame(rows)


RECOMMENDED = "Recommended configuration"


def _cells(name: str, best, fp32_best: float) -> dict:
    """One GPU's cells of a stage-table row, from the record of its best configuration (None: no timing)."""
    if best is None:
        return {f"{name} tok/s": np.nan, f"{name} B": None, f"{name} stage": None, f"{name} × own FP32": np.nan,
                f"{name} MFU": np.nan, f"{name} GiB": np.nan}
    gpus = int(best["world_size"]) if not pd.isna(best.get("world_size")) else 1
    batch = f"{int(best['batch_size'])}" + (f" × {gpus} GPUs" if gpus > 1 else "")
    return {f"{name} tok/s": best["tokens_per_s"], f"{name} B": batch, f"{name} stage": best.get("stage_title"),
            f"{name} × own FP32": best["tokens_per_s"] / fp32_best, f"{name} MFU": best.get("mfu"),
            f"{name} GiB": best["mem_allocator_bytes"] / report.GiB
            if best.get("mem_allocator_bytes") is not None else np.nan}


def stage_html(reps) -> str:
    t = stage_table(reps)
    names = list(reps)
    head = "".join(f'<th colspan="4">{n}</th>' for n in names)
    sub = "".join("<th>tok/s (B)</th><th>× own best FP32</th><th>MFU</th><th>alloc. GiB</th>" for _ in names)
    body = ""
    for r in t.to_dict("records"):
        cells = ""
        for n in names:
            tok = r[f"{n} tok/s"]
            if pd.isna(tok):
                cells += f'<td colspan="4">{_untimed_html(reps[n], r["stage"])}</td>'
                continue
            where = f"B={r[f'{n} B']}" if r["stage"] != RECOMMENDED else f"{r[f'{n} stage']}, B={r[f'{n} B']}"
            cells += (f"<td>{tok:,.0f} <small>{where}</small></td><td>{report.times(r[f'{n} × own FP32'])}</td>"
                      f"<td>{report.pct(r[f'{n} MFU'])}</td><td>{r[f'{n} GiB']:.1f}</td>")
        body += f"<tr><td>{r['stage']}</td>{cells}</tr>"
    return f'<table class="matrix"><tr><th></th>{head}</tr><tr><th>Stage</th>{sub}</tr>{body}</table>'


def same_batch_table(reps: dict[str, report.Report]) -> pd.DataFrame:
    """Per single-GPU stage: tokens/s of every GPU at the largest batch size they all measured
    with a timing, and each GPU against the first one. The best-over-batches table lets a GPU with
    more memory win by a larger batch; this one holds the batch fixed."""
    names, rows = list(reps), []
    for key in [k for k in stages.single_gpu(stages.ORDER) if all(k in rep.stage_order for rep in reps.values())]:
        timed = [reps[n].df[(reps[n].df["stage"] == key) & (reps[n].df["status"] == "ok")] for n in names]
        common = set.intersection(*(set(t["batch_size"]) for t in timed))
        if not common:
            continue
        b = max(common)
        tok = [float(t[t["batch_size"] == b]["tokens_per_s"].iloc[0]) for t in timed]
        rows.append({"stage": stages.get(key).title, "B": int(b),
                     **{f"{n} tok/s": v for n, v in zip(names, tok)},
                     **{f"{n} / {names[0]}": v / tok[0] for n, v in zip(names[1:], tok[1:])}})
    return pd.DataFrame(rows)


def same_batch_html(reps) -> str:
    t = same_batch_table(reps)
    if t.empty:
        return '<p class="note">No stage was timed at a batch size common to every report.</p>'
    names = list(reps)
    head = "".join(f"<th>{n} tok/s</th>" for n in names) + "".join(f"<th>{n} / {names[0]}</th>" for n in names[1:])
    body = "".join(
        f"<tr><td>{r['stage']}</td><td>{r['B']}</td>" + "".join(f"<td>{r[f'{n} tok/s']:,.0f}</td>" for n in names)
        + "".join(f"<td>{report.times(r[f'{n} / {names[0]}'])}</td>" for n in names[1:]) + "</tr>"
        for r in t.to_dict("records"))
    return f'<table class="matrix"><tr><th>Stage</th><th>B</th>{head}</tr>{body}</table>'


def _untimed_html(rep, title: str) -> str:
    """What a report recorded for a row with no timing: not in it, not applicable, OOM, error..."""
    if title == RECOMMENDED:
        return '<span class="bad">none verified</span>'
    key = next(k for k in stages.ORDER if stages.get(k).title == title)
    if key not in rep.stage_order:
        return '<span class="note">not in this report</span>'
    found = list(rep.df[rep.df["stage"] == key]["status"].dropna().unique())
    if found == ["not_applicable"]:
        return '<span class="note">not applicable</span>'
    words = [st.replace("_", " ").replace("oom", "OOM") for st in found]
    return f'<span class="bad">{", ".join(words) or "no timing"}</span>'


def lever_effects(reps) -> pd.DataFrame:
    """Each lever's speed-up over the previous stage, per GPU (median over batch sizes)."""
    rows = []
    for name, rep in reps.items():
        for key in rep.stage_order[1:]:
            median = results.lever_effect(rep.df, key)["median"]  # the same figure the report shows
            rows.append({"gpu": name, "stage": _lever_label(key), "speedup": np.nan if median is None else median})
    order = [k for k in stages.ORDER[1:] if any(k in rep.stage_order for rep in reps.values())]
    return pd.DataFrame(rows).pivot(index="stage", columns="gpu", values="speedup").reindex(
        [_lever_label(k) for k in order])


def _lever_label(key: str) -> str:
    return stages.get(key).title + (" (over the same job on one GPU)" if stages.is_multi_gpu(key) else "")


def lever_html(reps) -> str:
    t = lever_effects(reps).map(report.times).reset_index()
    t.columns.name = None
    return t.rename(columns={"stage": "Stage (over the previous one)"}).to_html(index=False, classes="matrix", border=0)


def plot_throughput(reps, out_dir: Path):
    plt = report_charts.style()
    t = stage_table(reps)
    names = list(reps)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    x = np.arange(len(t))
    width = 0.8 / len(names)
    for j, n in enumerate(names):
        ax.bar(x + (j - (len(names) - 1) / 2) * width, t[f"{n} tok/s"].fillna(0), width, label=n, color=f"C{j}")
    ax.set_xticks(x, t["stage"], fontsize=7, rotation=25, ha="right")
    ax.set_ylabel("best tokens / s over batch sizes")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.legend(frameon=False)
    ax.set_title("Throughput by stage, per GPU")
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / "throughput.png", bbox_inches="tight")
    return fig


def title_md(reps) -> str:
    devices = " vs ".join(f"**{rep.env['device']['name']}** ({name})" for name, rep in reps.items())
    return (f"# GPT-2 training step across GPUs\n\n{devices}\n\nEach GPU's numbers come from its own report "
            "(`reports/<gpu>/`), measured by this tool on that GPU with the same workload, seed and data; "
            "speed-ups are against each GPU's own FP32 baseline.")


def claims_html(reps) -> str:

    tables = {name: claims.table(rep.df, rep.params["name"], rep.params["backend"],
                                 gemm=rep.evidence["gemm"]) for name, rep in reps.items()}
    first = next(iter(tables.values()))
    head = "".join(f"<th>{n}</th>" for n in reps)
    body = ""
    for i, claim in enumerate(first["claim"]):
        cells = "".join(f"<td>{html.escape(t.iloc[i]['measured'] or '—')}<br>"
                        f'<small class="{claims.CSS[t.iloc[i]["verdict"]]}">{t.iloc[i]["verdict"]}</small></td>'
                        for t in tables.values())
        body += f"<tr><td>{html.escape(claim)}</td>{cells}</tr>"
    return f'<table class="claims"><tr><th>Claim</th>{head}</tr>{body}</table>'
