"""*How the comparison across GPUs reads*: compare.py's tables as HTML (version skew, best throughput
per stage, the same batch size with what may be put down to the hardware, lever effects, DDP), the
throughput chart, the title, and each claim's verdict per GPU."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from lib.core import config, record, stages
from lib.report import charts, claims, fidelity_view, loader
from lib.report.claim_judge import CSS, NOT_APPLICABLE
from lib.results import parity
from lib.report.compare import (
    RECOMMENDED,
    code_changes,
    ddp_table,
    decisions_table,
    fp32_best,
    lever_effects,
    pair_noise,
    parity_tests,
    same_batch_table,
    skew,
    skew_warnings,
    stage_table,
)


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
    methods = sorted({int(rep.params.method) for rep in reps.values()})
    table += (
        '<p class="note">'
        + "; ".join(f"Measurement method {m}: {record.METHODS.get(m, 'not known to this code')}" for m in methods)
        + ".</p>"
    )
    warnings = skew_warnings(reps)
    commits, files = code_changes(reps)
    if len(commits) > 1 and files == []:
        table += "<p>The code commits differ, but git changes no file of the measuring code between them.</p>"
    return table + (
        "".join(f'<p class="bad">{w}</p>' for w in warnings)
        if warnings
        else "<p>No version skew: every GPU ran the same software stack and measurement method.</p>"
    )


def stage_html(reps) -> str:
    t = stage_table(reps)
    names = list(reps)
    head = "".join(f'<th colspan="5">{n}</th>' for n in names)
    sub = ""
    for n in names:
        base = fp32_best(reps[n])
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
        f'<table class="matrix"><thead><tr><th>Stage</th><th>B</th>{head}</tr></thead><tbody>{body}</tbody></table>'
        '<p class="note">Each cell is the configuration as its report\'s matrix shows it: the median over the '
        "processes that timed it where several did, else its one process.</p>" + attribution_html(reps)
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
        # the parity rule decides adoption, not speed: it takes no part in whether a speed difference is the hardware's
        noise = pair_noise(reps, names[0], n)
        skewed = [w for w in skew_warnings(pair) if not w.startswith("Different parity tests")]
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
                text += (
                    "with the same software and measurement method, those differences are the hardware's, as far as "
                    "one machine of each kind shows it: the spread between machines of one kind is not in these "
                    "reports"
                ) + (f"; the other {len(t) - beyond} are within noise." if beyond < len(t) else ".")
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


NOT_MEASURED_CELL = '<span class="note">not measured</span>'  # a lever one report did not time


def lever_html(reps) -> str:
    t, names = lever_effects(reps), list(reps)
    body = ""
    for stage, r in t.iterrows():
        common = not pd.isna(r["B"])
        cells = "".join(
            "<td>"
            + (loader.times(r[n]) or NOT_MEASURED_CELL)
            + ("" if common or pd.isna(r[n]) else f" <small>B={int(r[f'{n} B'])}</small>")
            + "</td>"
            for n in names
        )
        body += f"<tr><td>{stage}</td><td>{int(r['B']) if common else 'each its own'}</td>{cells}</tr>"
    head = "".join(f"<th>{n}</th>" for n in names)
    return (
        f'<table class="matrix"><thead><tr><th>Stage (over the stage it is added to)</th><th>B</th>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


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
                f"<td>{loader.times(r[f'{n} speedup'])} <small>over "
                + (
                    html.escape(one["source"].split(",")[0])  # its configuration; the report says the rest
                    if one.get("source")
                    else f"one GPU's {_title(one['stage'])} B={one['per_gpu_batch']}"
                )
                + f" ({one['tokens_per_s']:,.0f} tok/s)</small>{other}</td>"
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


def claims_html(reps) -> str:
    """Each claim's verdict per GPU; a claim about chips none of the GPUs is, not applicable (as each report
    says it), with the command that would measure it."""
    tables = {name: claims.for_report(rep) for name, rep in reps.items()}
    first, by_id = next(iter(tables.values())), {c["id"]: c for c in claims.load()["claims"]}
    families = {config.profile_family(rep.params.name) for rep in reps.values()}
    head = "".join(f"<th>{n}</th>" for n in reps)
    body = ""
    for i, r in enumerate(first.itertuples()):
        if families & set(by_id[r.id]["families"]):
            cells = "".join(
                f"<td>{claims.breakable(t.iloc[i]['measured'] or '—')}<br>"
                f'<small class="{CSS[t.iloc[i]["verdict"]]}">{t.iloc[i]["verdict"]}</small></td>'
                for t in tables.values()
            )
        else:
            why = f"no report compared here is of its hardware; {claims.elsewhere(by_id[r.id])}"
            cells = (
                f'<td colspan="{len(reps)}">{claims.breakable(why)}<br>'
                f'<small class="{CSS[NOT_APPLICABLE]}">{NOT_APPLICABLE}</small></td>'
            )
        body += (
            f"<tr><td>{claims.breakable(r.claim)} <small>[{r.source}]</small><br><small>{claims.breakable(r.check)}</small>"
            f"</td>{cells}</tr>"
        )
    return (
        f'<table class="claims"><thead><tr><th>Claim [source]</th>{head}</tr></thead><tbody>{body}</tbody></table>'
        f'<p class="note">Sources: {claims.sources_html()}.</p>'
    )


def decisions_html(reps) -> str:
    """Each GPU's decision on every lever, with its report's reason, and in words where the GPUs differ."""
    t, names = decisions_table(reps), list(reps)
    if t.empty:
        return ""
    word = {True: '<span class="ok">adopted</span>', False: '<span class="warn">kept out</span>', None: "—"}
    body = ""
    for r in t.to_dict("records"):
        cells = "".join(
            f"<td>{word[r[f'{n} adopted']]}"
            + ("" if r[f"{n} adopted"] else f"<br><small>{html.escape(r[f'{n} why'])}</small>")
            + "</td>"
            for n in names
        )
        body += f"<tr><td>{html.escape(r['stage'])}</td>{cells}</tr>"
    head = "".join(f"<th>{n}</th>" for n in names)
    differ = [r["stage"] for r in t.to_dict("records") if r["differs"]]
    note = (
        f"The GPUs decide differently on {', '.join(differ)}: each cell gives its report's reason."
        if differ
        else "Every lever measured on more than one GPU is decided alike; where a reason differs, each cell gives "
        "its own (a lever kept out on both GPUs may rest on different tests)."
    )
    tests = [parity_contrast(r["key"], parity_tests(reps, r["key"])) for r in t.to_dict("records") if r["differs"]]
    note += "".join(" " + t for t in tests if t)
    return f'<table class="claims"><thead><tr><th>Lever</th>{head}</tr></thead><tbody>{body}</tbody></table><p>{html.escape(note, quote=False)}</p>'


def parity_contrast(key: str, tests: dict[str, dict]) -> str:
    """Where GPUs decide a lever differently and a parity test decided on one of them: the tests side by side, so
    the reader sees whether the lever or the test differed."""
    if not tests or (len(tests) < 2 and all(c["ok"] for c in tests.values())):
        return ""

    def one(n: str, c: dict) -> str:
        noise = f"{c['noise_sd']:.4f} nats" if c.get("noise_sd") is not None else "not measured"
        if c["verdict"] == parity.UNDECIDED and c["seeds_run"] < c["wanted"]:
            said = f"undecided, stopped after {c['seeds_run']} of {c['wanted']} seeds"
        else:
            said = f"{c['verdict']} over {c['seeds_run']} seeds"
        return f"{n} at B={c['batch_size']}, {c['steps']} steps, its own noise {noise} per paired difference: {said}"

    differ = len({(c["batch_size"], c["steps"]) for c in tests.values()}) > 1
    return (
        f"{stages.get(key).title}, its parity test on each GPU (one rule; each GPU tests it at the batch size its own sweep chose): "
        + "; ".join(one(n, c) for n, c in tests.items())
        + "."
        + (
            " The tests differ in batch size and length, and each noise rests on a few repeat pairs: the split is "
            "the tests', not shown to be the hardware's."
            if differ
            else ""
        )
    )
