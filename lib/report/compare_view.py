"""*How the comparison across GPUs reads*: compare.py's tables as HTML (version skew, best throughput
per stage, the same batch size judged against the spread between machines and what may be put down to the
hardware, the sittings behind that spread, lever effects, each GPU's decisions, DDP), and each claim's verdict per
GPU."""

from __future__ import annotations

import html
import pandas as pd

from lib.core import config, record, stages
from lib.report import claims_view, loader
from lib.report import formats as fmt
from lib.report.claims_view import CSS, NOT_APPLICABLE
from lib.results import machine_spread
from lib.report.compare import (
    code_changes,
    ddp_table,
    decisions_table,
    fp32_best,
    lever_effects,
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
            where = f"B={int(r[f'{n} B'])}"
            cells += (
                f"<td>{fmt.tok(tok)} <small>{where}</small></td><td>{loader.times(r[f'{n} × own FP32'])}</td>"
                f"<td>{loader.pct(r[f'{n} MFU bf16'])}</td>"
                f"<td>{loader.pct(r[f'{n} MFU own'])} <small>{r[f'{n} precision'] or ''}</small></td>"
                f"<td>{fmt.gib(r[f'{n} GiB'] * fmt.GiB, 1)}</td>"
            )
        body += f"<tr><td>{r['stage']}</td>{cells}</tr>"
    return f'<table class="matrix"><tr><th></th>{head}</tr><tr><th>Stage</th>{sub}</tr>{body}</table>'


def same_batch_html(reps) -> str:
    t = same_batch_table(reps)
    if t.empty:
        return '<p class="note">No stage was timed at a batch size common to every report.</p>'
    names = list(reps)
    head = "".join(f"<th>{n} tok/s</th>" for n in names) + "".join(f"<th>{n} / {names[0]}</th>" for n in names[1:])
    word = {True: " <small>within spread</small>", False: "", None: " <small>not judged</small>"}
    body = "".join(
        f"<tr><td>{r['stage']}</td><td>{r['B']}</td>"
        + "".join(f"<td>{fmt.tok(r[f'{n} tok/s'])}</td>" for n in names)
        + "".join(f"<td>{loader.times(r[f'{n} / {names[0]}'])}{word[r[f'{n} within']]}</td>" for n in names[1:])
        + "</tr>"
        for r in t.to_dict("records")
    )
    return (
        f'<table class="matrix keep-together"><thead><tr><th>Stage</th><th>B</th>{head}</tr></thead><tbody>{body}'
        '</tbody></table><p class="note">Each cell is the configuration as its report\'s matrix shows it: the median '
        "over the processes that timed it where several did, else its one process.</p>" + attribution_html(reps)
    )


def kind_name(kind: dict) -> str:
    return str(kind.get("device") or "unknown GPU").removeprefix("NVIDIA ")


def spread_words(kinds: list[dict]) -> str:
    """Each GPU kind's spread between machines with what it rests on: 'H200 3.4 %, the widest over 4 sittings and 46
    configurations'."""
    out = []
    for k in {kind_name(k): k for k in kinds}.values():
        n = len(k["sittings"])
        if k["spread"] is None:
            out.append(
                f"{kind_name(k)}: " + ("one sitting" if n < 2 else f"no configuration timed in two of {n} sittings")
            )
        else:
            out.append(
                f"{kind_name(k)} {loader.pct(k['spread'])}, the widest over {len(k['paired'])} sittings and "
                f"{k['configurations']} configurations"
            )
    return "; ".join(out)


def verdict_words(j: dict) -> str:
    """A judged ratio (comparison.compute's) in a few words: within or beyond the band it must clear, and what that is."""
    if j["within"] is None:
        return "not judged, no spread measured"
    side = "within" if j["within"] else "beyond"
    if j["basis"] == "machines":
        return f"{side} the {loader.pct(j['band'])} spread between machines" + (
            " of both kinds combined" if j.get("kinds", 1) > 1 else " of one kind"
        )
    unmeasured = " and ".join(kind_name({"device": d}) for d in dict.fromkeys(j["unmeasured"]))
    return f"{side} the {loader.pct(j['band'])} measured, the spread between machines of {unmeasured} not measured" + (
        "" if j["within"] else ", so not shown to be the hardware's"
    )


def attribution_html(reps) -> str:
    """Per GPU against the first, in words: how many same-batch ratios lie beyond the spread they must clear
    (comparison.compute), and whether those may be called the hardware's: only beyond the spread between machines of
    both kinds, with the same software, measurement method and measuring code."""
    t, names = same_batch_table(reps), list(reps)
    if t.empty:
        return ""
    kinds, floor = reps.decided["spreads"], reps.decided["floors"]
    out = []
    for n in names[1:]:
        pair = {m: reps[m] for m in (names[0], n)}
        j = reps.decided["pairs"][n]["band"]
        skewed = skew_warnings(pair)
        floors = ", ".join(f"{m} {loader.pct(floor[m], 2)}" for m in pair)
        beyond = sum(v is False for v in t[f"{n} within"])
        text = (
            f"{n} against {names[0]} at the same batch size: {beyond} of {len(t)} stages lie beyond the "
            f"{loader.pct(j['band'])} they must clear"
            if j["band"] is not None
            else f"{n} against {names[0]}: not judged"
        )
        text += (
            f" (between machines of one kind, from this repository's sittings: {spread_words([kinds[m] for m in pair])}; "
            f"between processes within each report: {floors})."
        )
        if beyond and not skewed and j["basis"] == "machines":
            text += (
                " With the same software, measurement method and measuring code, those differences are the hardware's."
            )
        elif beyond and j["basis"] != "machines":
            text += " Without the spread between machines, none is shown to be the hardware's."
        out.append(" ".join([text, *skewed]))
    return "".join(f"<p>{html.escape(p, quote=False)}</p>" for p in out)


def sittings_html(reps) -> str:
    """Each GPU kind's sittings behind its spread between machines, and the configuration that sets it."""
    body = ""
    for k in {kind_name(k): k for k in reps.decided["spreads"].values()}.values():
        w = k["widest"]
        at = (
            f"{stages.get(w['stage']).title} B={w['batch']}"
            + (f" ({w['variant']})" if w["variant"] else "")
            + ": "
            + ", ".join(f"{s} {fmt.tok(v)}" for s, v in w["medians"].items())
            if w
            else "no configuration timed in two sittings"
        )
        machines = len([m for m in k["machines"] if m != "unrecorded"])
        body += (
            f"<tr><td>{html.escape(kind_name(k))}</td><td>{', '.join(k['paired'] or k['sittings']) or 'none'}"
            f"<br><small>{machines} machines recorded</small></td>"
            f"<td>{k['configurations']}</td><td>{loader.pct(k['spread'])}</td><td>{html.escape(at)}</td>"
            f"<td>{k['unsteady']}</td></tr>"
        )
    return (
        '<table class="matrix"><thead><tr><th>GPU</th><th>sittings (report folders)</th><th>configurations in two '
        "or more</th><th>spread</th><th>widest at (tok/s, median over a sitting's processes)</th><th>processes "
        f"left out</th></tr></thead><tbody>{body}</tbody></table>"
        '<p class="note">A sitting is one report folder (reports/ and reports/archive/) measured on that GPU model; a '
        "configuration is the same in two sittings where its fingerprint is (workload, software, stage, batch). Its "
        "spread is the range of the sittings' medians over their median; the GPU's, the widest of them. A process "
        f"whose step times vary by more than {loader.pct(machine_spread.UNSTEADY_CV, 0)} (coefficient of variation) is left "
        "out, and counted.</p>"
    )


def _untimed_html(rep, title: str) -> str:
    """What a report recorded for a row with no timing: not in it, not applicable, OOM, error..."""
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
                f"<td>{fmt.tok(r[f'{n} tokens_per_s'])} <small>{r['gpus']} × B={int(r[f'{n} per_gpu_batch'])}, "
                f"{_title(r[f'{n} stage'])}</small></td>"
                f"<td>{loader.times(r[f'{n} speedup'])} <small>over "
                + (
                    html.escape(one["source"].split(",")[0])  # its configuration; the report says the rest
                    if one.get("source")
                    else f"one GPU's {_title(one['stage'])} B={one['per_gpu_batch']}"
                )
                + f" ({fmt.tok(one['tokens_per_s'])} tok/s)</small>{other}</td>"
                f"<td>{loader.pct(r[f'{n} efficiency'])}</td>"
            )
        body += f"<tr><td>{r['gpus']} GPUs</td>{cells}</tr>"
    head = "".join(f'<th colspan="3">{n}</th>' for n in names)
    sub = "".join(
        "<th>tok/s (GPUs × per-GPU B)</th><th>over the same GPU's best single-GPU configuration</th><th>efficiency</th>"
        for _ in names
    )
    return f'<table class="matrix"><tr><th></th>{head}</tr><tr><th>GPUs</th>{sub}</tr>{body}</table>'


def claims_html(reps) -> str:
    """Each claim's verdict per GPU, as each report's decisions.json judged it; a claim about chips none of the GPUs
    is, not applicable (as each report says it), with the command that would measure it."""
    tables = {name: rep.decided["claims"]["verdicts"] for name, rep in reps.items()}
    # every report judged the one params/claims.yaml: the first's rows and sources name the claims for all
    first, sources = next(iter(tables.values())), next(iter(reps.values())).decided["claims"]
    families = {config.profile_family(rep.params.name) for rep in reps.values()}
    head = "".join(f"<th>{n}</th>" for n in reps)
    body = ""
    for i, r in enumerate(first):
        if families & set(r["families"]):
            cells = "".join(
                f"<td>{claims_view.breakable(claims_view.measured_text(t[i]) or '—')}<br>"
                f'<small class="{CSS[t[i]["verdict"]]}">{t[i]["verdict"]}</small></td>'
                for t in tables.values()
            )
        else:
            why = f"no report compared here is of its hardware; {r['elsewhere']}"
            cells = (
                f'<td colspan="{len(reps)}">{claims_view.breakable(why)}<br>'
                f'<small class="{CSS[NOT_APPLICABLE]}">{NOT_APPLICABLE}</small></td>'
            )
        body += (
            f"<tr><td>{claims_view.breakable(r['claim'])} <small>[{r['source']}]</small><br>"
            f"<small>{claims_view.breakable(r['check'])}</small></td>{cells}</tr>"
        )
    return (
        f'<table class="claims"><thead><tr><th>Claim [source]</th>{head}</tr></thead><tbody>{body}</tbody></table>'
        f'<p class="note">Sources: {claims_view.sources_html(sources)}.</p>'
    )


def decisions_html(reps) -> str:
    """Each GPU's decision on every lever, with its report's reason, and in words where the GPUs differ."""
    t, names = decisions_table(reps), list(reps)
    if t.empty:
        return ""

    def cell(decision: str | None, why: str) -> str:
        if decision is None:
            return "<td>—</td>"
        label, colour = fmt.DECISIONS[decision]
        return f"<td><strong style='color:{colour}'>{label}</strong><br><small>{html.escape(why)}</small></td>"

    body = ""
    for r in t.to_dict("records"):
        cells = "".join(cell(r[f"{n} decision"], r[f"{n} why"]) for n in names)
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
        seeds = len(c["seeds"])  # the seeds its verdict rests on
        said = (
            f"undecided, stopped by its trend after {seeds} of {c['looks'][-1]} seeds"
            if c.get("futile") == "trend"
            else f"{c['verdict']} over {seeds} seeds"
        )
        return f"{n} at B={c['batch_size']}, {c['steps']} steps: {said}"

    differ = len({(c["batch_size"], c["steps"]) for c in tests.values()}) > 1
    return (
        f"{stages.get(key).title}, its parity test on each GPU (one rule): "
        + "; ".join(one(n, c) for n, c in tests.items())
        + "."
        + (
            " The tests differ in batch size and length: the split is the tests', not shown to be the hardware's."
            if differ
            else ""
        )
    )
