"""One report across GPUs: the same stages side by side. A ratio between GPUs is taken at a batch
size they all measured, or its cells name their batch; every speed-up names its basis; DDP stands
against the same GPU's best single-GPU configuration; and a difference is put down to the hardware
only where it exceeds both reports' measured process-to-process spread and the software and the
measurement method are the same (version skew is flagged, never hidden)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from lib.core import config, stages
from lib.core.paths import ROOT
from lib.report import charts, claims, fidelity_view, loader
from lib.results import decide

SKEW_KEYS = [
    ("torch", "PyTorch"),
    ("cuda", "CUDA"),
    ("cublas", "cuBLAS(Lt)"),
    ("cudnn", "cuDNN"),
    ("driver", "Driver"),
    ("python", "Python"),
]
METHOD = "measurement method"


class CompareError(ValueError):
    pass


def load_all(names: list[str], reports_root=None) -> dict[str, loader.Report]:
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
            out[name] = loader.load(d)
        except ValueError as e:  # results of another schema version
            raise CompareError(f"report {name!r} cannot be compared: {e}") from None
    return out


def skew(reps: dict[str, loader.Report]) -> pd.DataFrame:
    rows = []
    for key, label in SKEW_KEYS:
        values = {name: str(rep.env.get(key)) for name, rep in reps.items()}
        rows.append({"component": label, **values, "differs": len(set(values.values())) > 1})
    # How the step was built and timed (lib/record.METHOD): reports of different methods do not compare.
    values = {name: str(rep.params.get("method", 1)) for name, rep in reps.items()}
    rows.append({"component": METHOD, **values, "differs": len(set(values.values())) > 1})
    return pd.DataFrame(rows)


def skew_warnings(reps) -> list[str]:
    """In words, what differs between the reports beside the hardware: software versions, and the
    measurement method (lib/record.METHOD), under which numbers do not compare at all."""
    t = skew(reps)
    soft = list(t[t["differs"] & (t["component"] != METHOD)]["component"])
    out = []
    if soft:
        out.append(
            f"Version skew: the GPUs were measured with different {', '.join(soft)}. Part of any difference "
            "below may come from the software, not the hardware."
        )
    if t[t["component"] == METHOD]["differs"].any():
        methods = ", ".join(f"{n}: {rep.params.get('method', 1)}" for n, rep in reps.items())
        out.append(
            f"Different measurement methods ({methods}): the step was built or timed another way, so the "
            "numbers below do not compare like with like."
        )
    return out


def skew_html(reps) -> str:
    t = skew(reps)
    names = list(reps)
    head = "".join(f"<th>{n}</th>" for n in names)
    body = ""
    for r in t.itertuples(index=False):
        cells = "".join(f"<td>{html.escape(r[names.index(n) + 1])}</td>" for n in names)
        flag = '<span class="bad">differs</span>' if r.differs else '<span class="ok">same</span>'
        body += f"<tr><th>{r.component}</th>{cells}<td>{flag}</td></tr>"
    devices = "".join(f"<td>{html.escape(rep.env['device']['name'])}</td>" for rep in reps.values())
    table = (
        f'<table class="kv"><tr><th></th>{head}<th></th></tr><tr><th>Device</th>{devices}<td></td></tr>{body}</table>'
    )
    warnings = skew_warnings(reps)
    return table + (
        "".join(f'<p class="bad">{w}</p>' for w in warnings)
        if warnings
        else "<p>No version skew: every GPU ran the same software stack and measurement method.</p>"
    )


def _fp32_best(rep):
    """The GPU's fastest baseline (FP32) record over its batch sizes (B=64 may not fit in FP32
    where it fits later), or None."""
    ok = rep.df[(rep.df["stage"] == rep.stage_order[0]) & (rep.df["status"] == "ok")]
    return ok.loc[ok["tokens_per_s"].idxmax()] if not ok.empty else None


def stage_table(reps: dict[str, loader.Report]) -> pd.DataFrame:
    """Per single-GPU stage and GPU: best tokens/s over batch sizes and its batch, that over the
    GPU's own best FP32 tokens/s (_fp32_best), MFU against the GPU's dense BF16 peak and against
    the peak of the stage's own precision, and allocator memory at that batch. The multi-GPU
    stage is ddp_table's: its throughput over a single-GPU figure is no per-GPU speed-up."""
    rows = []
    order = [k for k in stages.single_gpu(stages.ORDER) if any(k in rep.stage_order for rep in reps.values())]
    base = {name: _fp32_best(rep) for name, rep in reps.items()}
    for key in order:
        row = {"stage": stages.get(key).title}
        for name, rep in reps.items():
            ok = rep.df[(rep.df["stage"] == key) & (rep.df["status"] == "ok")]
            best = ok.loc[ok["tokens_per_s"].idxmax()] if not ok.empty else None
            row.update(_cells(name, best, base[name], rep.params.get("peak_tflops")))
        rows.append(row)
    # Each report's recommended configuration, which its batch sweep may have found beyond the matrix.
    row = {"stage": RECOMMENDED}
    for name, rep in reps.items():
        rec = loader.recommended(rep)
        if rec is not None:  # the median over its processes, as its own report quotes it
            scale = rec["processes"]["median"] / rec["tokens_per_s"]
            rec = {
                **rec,
                "tokens_per_s": rec["processes"]["median"],
                **{k: rec[k] * scale for k in ("achieved_tflops", "mfu") if rec.get(k) is not None},
            }
        row.update(_cells(name, pd.Series(rec) if rec is not None else None, base[name], rep.params.get("peak_tflops")))
    rows.append(row)
    return pd.DataFrame(rows)


RECOMMENDED = "Recommended configuration"


def _cells(name: str, best, base, peaks: dict | None) -> dict:
    """One GPU's cells of a stage-table row, from the record of its best configuration (None: no
    timing). The record's `mfu` is against its own precision's peak (stats.fill_mfu); the BF16
    column divides the same achieved TFLOP/s by the BF16 dense peak, so every stage compares."""
    cols = ("tok/s", "B", "stage", "× own FP32", "MFU bf16", "MFU own", "precision", "GiB")
    if best is None:
        return {f"{name} {c}": np.nan for c in cols}
    bf16, achieved = (peaks or {}).get("bf16"), best.get("achieved_tflops")
    mem = best.get("mem_allocator_bytes")
    return {
        f"{name} tok/s": best["tokens_per_s"],
        f"{name} B": int(best["batch_size"]),
        f"{name} stage": best.get("stage_title"),
        f"{name} × own FP32": best["tokens_per_s"] / base["tokens_per_s"] if base is not None else np.nan,
        f"{name} MFU bf16": achieved / bf16 if bf16 and not pd.isna(achieved) else np.nan,
        f"{name} MFU own": best.get("mfu"),
        f"{name} precision": best.get("peak_precision"),
        f"{name} GiB": mem / loader.GiB if not pd.isna(mem) else np.nan,
    }


def stage_html(reps) -> str:
    t = stage_table(reps)
    names = list(reps)
    head = "".join(f'<th colspan="5">{n}</th>' for n in names)
    sub = ""
    for n in names:
        base = _fp32_best(reps[n])
        basis = f"B={int(base['batch_size'])}" if base is not None else "not timed"
        sub += (
            f"<th>tok/s (B)</th><th>× own FP32 at {basis}</th><th>MFU of BF16 dense peak</th>"
            "<th>MFU of own precision's peak</th><th>alloc. GiB</th>"
        )
    body = ""
    for r in t.to_dict("records"):
        cells = ""
        for n in names:
            tok = r[f"{n} tok/s"]
            if pd.isna(tok):
                cells += f'<td colspan="5">{_untimed_html(reps[n], r["stage"])}</td>'
                continue
            where = f"B={int(r[f'{n} B'])}" if r["stage"] != RECOMMENDED else f"{r[f'{n} stage']}, B={int(r[f'{n} B'])}"
            cells += (
                f"<td>{tok:,.0f} <small>{where}</small></td><td>{loader.times(r[f'{n} × own FP32'])}</td>"
                f"<td>{loader.pct(r[f'{n} MFU bf16'])}</td>"
                f"<td>{loader.pct(r[f'{n} MFU own'])} <small>{r[f'{n} precision'] or ''}</small></td>"
                f"<td>{r[f'{n} GiB']:.1f}</td>"
            )
        body += f"<tr><td>{r['stage']}</td>{cells}</tr>"
    return f'<table class="matrix"><tr><th></th>{head}</tr><tr><th>Stage</th>{sub}</tr>{body}</table>'


def pair_noise(reps, a: str, b: str) -> float | None:
    """The larger of two reports' noise floors (their largest process-to-process range of tokens/s
    over the median, fidelity_view.noise); None where either ran no configuration twice."""
    floors = [fidelity_view.noise(reps[n])[1] for n in (a, b)]
    return None if None in floors else max(floors)


def same_batch_table(reps: dict[str, loader.Report]) -> pd.DataFrame:
    """Per single-GPU stage: tokens/s of every GPU at the largest batch size they all measured
    with a timing, each GPU against the first one, and whether that ratio lies within the larger
    noise floor of the two reports (None: not measured). The best-over-batches table lets a GPU
    with more memory win by a larger batch; this one holds the batch fixed."""
    names, rows = list(reps), []
    noise = {n: pair_noise(reps, names[0], n) for n in names[1:]}
    for key in [k for k in stages.single_gpu(stages.ORDER) if all(k in rep.stage_order for rep in reps.values())]:
        timed = [reps[n].df[(reps[n].df["stage"] == key) & (reps[n].df["status"] == "ok")] for n in names]
        common = set.intersection(*(set(t["batch_size"]) for t in timed))
        if not common:
            continue
        b = max(common)
        tok = dict(zip(names, [float(t[t["batch_size"] == b]["tokens_per_s"].iloc[0]) for t in timed]))
        ratio = {n: tok[n] / tok[names[0]] for n in names[1:]}
        rows.append(
            {
                "stage": stages.get(key).title,
                "B": int(b),
                **{f"{n} tok/s": v for n, v in tok.items()},
                **{f"{n} / {names[0]}": v for n, v in ratio.items()},
                **{
                    f"{n} within noise": None if noise[n] is None else bool(abs(ratio[n] - 1) <= noise[n])
                    for n in names[1:]
                },
            }
        )
    return pd.DataFrame(rows)


def same_batch_html(reps) -> str:
    t = same_batch_table(reps)
    if t.empty:
        return '<p class="note">No stage was timed at a batch size common to every report.</p>'
    names = list(reps)
    head = "".join(f"<th>{n} tok/s</th>" for n in names) + "".join(f"<th>{n} / {names[0]}</th>" for n in names[1:])
    body = "".join(
        f"<tr><td>{r['stage']}</td><td>{r['B']}</td>"
        + "".join(f"<td>{r[f'{n} tok/s']:,.0f}</td>" for n in names)
        + "".join(
            f"<td>{loader.times(r[f'{n} / {names[0]}'])}"
            + (" <small>within noise</small>" if r[f"{n} within noise"] else "")
            + "</td>"
            for n in names[1:]
        )
        + "</tr>"
        for r in t.to_dict("records")
    )
    return (
        f'<table class="matrix"><tr><th>Stage</th><th>B</th>{head}</tr>{body}</table>'
        '<p class="note">Each cell is the stage matrix\'s record (its first process), as every table of a '
        "report's matrix shows it; a recommended row above is the median over its processes.</p>"
        + attribution_html(reps)
    )


def attribution_html(reps) -> str:
    """Per GPU against the first, in words: how many same-batch differences exceed the larger noise
    floor of the two reports, and whether those may be called the hardware's: only with noise
    measured in both, a difference beyond it, and the same software and measurement method."""
    t, names = same_batch_table(reps), list(reps)
    if t.empty:
        return ""
    out = []
    for n in names[1:]:
        pair = {m: reps[m] for m in (names[0], n)}
        noise, skewed = pair_noise(reps, names[0], n), skew_warnings(pair)
        if noise is None:
            unmeasured = [m for m in pair if fidelity_view.noise(reps[m])[1] is None]
            text = (
                f"{n} against {names[0]}: no configuration of {' or '.join(unmeasured)} ran in more than one "
                "process, so no difference here can be told from noise."
            )
        else:
            beyond = sum(not v for v in t[f"{n} within noise"])
            floors = ", ".join(f"{m} {loader.pct(fidelity_view.noise(reps[m])[1], 2)}" for m in pair)
            text = (
                f"{n} against {names[0]} at the same batch size: {beyond} of {len(t)} stages differ by more "
                f"than the larger process-to-process spread of the two reports ({floors}); "
            )
            if not beyond:
                text += "every difference is within noise."
            elif skewed:
                text += f"the other {len(t) - beyond} are within noise." if beyond < len(t) else "none is within noise."
            else:
                text += "with the same software and measurement method, those differences are the hardware's" + (
                    f"; the other {len(t) - beyond} are within noise." if beyond < len(t) else "."
                )
        out.append(" ".join([text, *skewed]))
    return "".join(f"<p>{html.escape(p, quote=False)}</p>" for p in out)


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
    """What each single-GPU lever buys per GPU, indexed by stage: its speed-up over the stage it is
    added to at the same batch (decide.lever_effect), at the largest batch size every GPU timed
    it at (column B). Where the GPUs share no batch, each GPU's at its own largest, named in
    `<gpu> B` (as it is in every row)."""
    rows = []
    for key in [k for k in stages.single_gpu(stages.ORDER[1:]) if any(k in rep.stage_order for rep in reps.values())]:
        values = {n: decide.lever_effect(rep.df, key)["values"] for n, rep in reps.items() if key in rep.stage_order}
        values = {n: v for n, v in values.items() if len(v)}
        common = set.intersection(*(set(v.index) for v in values.values())) if values else set()
        b = max(common) if common else None
        row = {"stage": stages.get(key).title, "B": b}
        for n in reps:
            at = (b if b is not None else max(values[n].index)) if n in values else None
            row.update({n: float(values[n][at]) if at is not None else np.nan, f"{n} B": at})
        rows.append(row)
    return pd.DataFrame(rows).set_index("stage")


def lever_html(reps) -> str:
    t, names = lever_effects(reps), list(reps)
    body = ""
    for stage, r in t.iterrows():
        common = not pd.isna(r["B"])
        cells = "".join(
            f"<td>{loader.times(r[n])}"
            + ("" if common or pd.isna(r[n]) else f" <small>B={int(r[f'{n} B'])}</small>")
            + "</td>"
            for n in names
        )
        body += f"<tr><td>{stage}</td><td>{int(r['B']) if common else 'each its own'}</td>{cells}</tr>"
    head = "".join(f"<th>{n}</th>" for n in names)
    return (
        f'<table class="matrix"><tr><th>Stage (over the stage it is added to)</th><th>B</th>{head}</tr>{body}</table>'
    )


def ddp_table(reps) -> pd.DataFrame:
    """One row per GPU count any report timed DDP at, per GPU: the job's tokens/s, its per-GPU batch
    and stage, its speed-up over the same GPU's best single-GPU configuration and the scaling
    efficiency (loader.scaling_curve), and that configuration (`one`, its basis). Never a median
    over GPU counts, never a division by a single-GPU FP32 figure."""
    curves = {n: loader.scaling_curve(rep) for n, rep in reps.items()}
    rows = []
    for g in sorted({p["gpus"] for c in curves.values() for p in c if p["gpus"] > 1}):
        row = {"gpus": g}
        for n, c in curves.items():
            p = next((p for p in c if p["gpus"] == g), None)
            row.update(
                {
                    f"{n} {k}": p[k] if p else None
                    for k in ("tokens_per_s", "per_gpu_batch", "stage", "speedup", "efficiency", "same_config")
                }
            )
            row[f"{n} one"] = c[0] if c else None
        rows.append(row)
    return pd.DataFrame(rows)


def _title(key) -> str:
    return stages.get(key).title if key in stages.STAGES else "unrecorded stage"


def ddp_html(reps) -> str:
    t, names = ddp_table(reps), list(reps)
    title = stages.get("ddp").title
    if t.empty:
        states = "; ".join(f"{n}: {_untimed_html(rep, title)}" for n, rep in reps.items())
        return f'<p class="note">No report timed DDP on several GPUs ({states}).</p>'
    body = ""
    for r in t.to_dict("records"):
        cells = ""
        for n in names:
            one = r[f"{n} one"]
            if pd.isna(r[f"{n} tokens_per_s"]):
                why = (
                    '<span class="note">not measured on this GPU count</span>' if one else _untimed_html(reps[n], title)
                )
                cells += f'<td colspan="3">{why}</td>'
                continue
            other = "" if r[f"{n} same_config"] else " <small>(another configuration than the job's)</small>"
            cells += (
                f"<td>{r[f'{n} tokens_per_s']:,.0f} <small>{r['gpus']} × B={int(r[f'{n} per_gpu_batch'])}, "
                f"{_title(r[f'{n} stage'])}</small></td>"
                f"<td>{loader.times(r[f'{n} speedup'])} <small>over one GPU's {_title(one['stage'])} "
                f"B={one['per_gpu_batch']} ({one['tokens_per_s']:,.0f} tok/s)</small>{other}</td>"
                f"<td>{loader.pct(r[f'{n} efficiency'])}</td>"
            )
        body += f"<tr><td>{r['gpus']} GPUs</td>{cells}</tr>"
    head = "".join(f'<th colspan="3">{n}</th>' for n in names)
    sub = "".join(
        "<th>tok/s (GPUs × per-GPU B)</th><th>over the same GPU's best single-GPU configuration</th><th>efficiency</th>"
        for _ in names
    )
    return f'<table class="matrix"><tr><th></th>{head}</tr><tr><th>GPUs</th>{sub}</tr>{body}</table>'


def plot_throughput(reps, out_dir: Path):
    """Tokens/s per stage and GPU at the batch size they all measured (same_batch_table), named under each bar group."""
    plt = charts.style()
    t = same_batch_table(reps)
    names = list(reps)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    x = np.arange(len(t))
    width = 0.8 / len(names)
    for j, n in enumerate(names):
        ax.bar(x + (j - (len(names) - 1) / 2) * width, t[f"{n} tok/s"] if len(t) else [], width, label=n, color=f"C{j}")
    ax.set_xticks(
        x, [f"{s} (B={b})" for s, b in zip(t.get("stage", []), t.get("B", []))], fontsize=7, rotation=25, ha="right"
    )
    ax.set_ylabel("tokens / s at the same batch size")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.legend(frameon=False)
    ax.set_title("Throughput by stage, per GPU, at the largest batch size all GPUs measured")
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / "throughput.png", bbox_inches="tight")
    return fig


def title_md(reps) -> str:
    devices = " vs ".join(f"**{rep.env['device']['name']}** ({name})" for name, rep in reps.items())
    return (
        f"# GPT-2 training step across GPUs\n\n{devices}\n\nEach GPU's numbers come from its own report "
        "(`reports/<gpu>/`), measured by this tool on that GPU with the same workload, seed and data. "
        "Every speed-up names its basis: the stage and batch size measured, against which stage at which "
        "batch size."
    )


def claims_html(reps) -> str:
    """Each claim's verdict per GPU; a claim about chips none of the GPUs is, not measured, with the
    command that would measure it."""
    tables = {name: claims.for_report(rep) for name, rep in reps.items()}
    first, by_id = next(iter(tables.values())), {c["id"]: c for c in claims.load()["claims"]}
    families = {config.profile_family(rep.params["name"]) for rep in reps.values()}
    head = "".join(f"<th>{n}</th>" for n in reps)
    body = ""
    for i, r in enumerate(first.itertuples()):
        if families & set(by_id[r.id]["families"]):
            cells = "".join(
                f"<td>{html.escape(t.iloc[i]['measured'] or '—')}<br>"
                f'<small class="{claims.CSS[t.iloc[i]["verdict"]]}">{t.iloc[i]["verdict"]}</small></td>'
                for t in tables.values()
            )
        else:
            why = f"no report compared here is of its hardware; {claims.elsewhere(by_id[r.id])}"
            cells = (
                f'<td colspan="{len(reps)}">{html.escape(why)}<br>'
                f'<small class="{claims.CSS[claims.NOT_MEASURED]}">{claims.NOT_MEASURED}</small></td>'
            )
        body += (
            f"<tr><td>{html.escape(r.claim)} <small>[{r.source}]</small><br><small>{html.escape(r.check)}</small>"
            f"</td>{cells}</tr>"
        )
    return (
        f'<table class="claims"><tr><th>Claim [source]</th>{head}</tr>{body}</table>'
        f'<p class="note">Sources: {claims.sources_html()}.</p>'
    )
