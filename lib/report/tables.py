"""*How the report reads*, its tables: the experimental matrix, the environment, each chapter's
code switch and the appendix, the title and the failures, as HTML or Markdown."""

from __future__ import annotations

import html
from collections import Counter

import pandas as pd

from lib.core import chapters, provenance, stages
from lib.report import formats as fmt
from lib.report import interconnect_view
from lib.report.loader import CV_LIMIT, Report, cut_short, gib, manifest, pct, short, times, tok
from lib.results import decide, store


def status_cell(row) -> str:
    s = row["status"]
    if s == "ok":
        return "ok"
    label = {"oom": "OOM", "not_applicable": "not applicable", "diverged": "DIVERGED", "error": "ERROR"}.get(s, s)
    return f'<span class="bad" title="{html.escape(str(row["reason"] or ""))}">{label}</span>'


def _processes_note(values: list[float] | None) -> str:
    """Under a matrix row's tokens/s, where several processes timed it: that it is their median (decide.table), and
    their range."""
    if not values or len(values) < 2:
        return ""
    # the range on a line of its own: beside the words, it made tok/s so wide that the matrix ran past the PDF's margin
    return f"<br><small>median of {len(values)} processes,<br>{tok(min(values))}–{tok(max(values))}</small>"


def matrix_html(rep: Report, stage: str | None = None) -> str:
    """The experimental matrix (stage x batch), or one stage's rows of it. A row that has no
    timing says why in the step-time cell (OOM, not applicable, error) so it cannot be missed."""
    df = rep.df if stage is None else rep.df[rep.df["stage"] == stage]
    processes = decide.throughputs(rep.decisions)  # a row timed in several processes shows their median beside it
    rows = []
    for _, r in df.iterrows():
        ran = r["status"] in ("ok", "diverged")
        loss = ""
        if ran and not pd.isna(r["final_loss"]):
            loss = fmt.loss(r["final_loss"])
            if not pd.isna(r["loss_delta"]) and r["stage"] != rep.stage_order[0]:
                flag = "" if r["loss_within_tolerance"] else ' <span class="bad">beyond tol.</span>'
                gate = "" if pd.isna(r["loss_gap"]) else f"<br>gate {fmt.loss(r['loss_gap'])}"
                if r.get("loss_verdict") == "within noise":  # beyond the tolerance, inside the measured drift
                    gate += " within noise"
                delta = round(r["loss_delta"], 3) or 0.0  # never "-0.000"
                loss += f"<br><small>{fmt.loss(delta, 3, '+')} vs {r['loss_ref']}{gate}{flag}</small>"
        if ran:
            step = f"{fmt.ms(r['median_ms'])}<br><small>{fmt.ms(r['p10_ms'])}–{fmt.ms(r['p90_ms'])}</small>"
            if r["status"] == "diverged":
                step += '<br><span class="bad">DIVERGED</span>'
        else:
            step = status_cell(r)
        cv_txt = pct(r["cv"]) if ran else ""
        of = "" if r["peak_precision"] == "bf16" else f"<br><small>{pct(r['mfu'])} of {r['peak_precision']}</small>"
        mfu = "n/a" if pd.isna(r["mfu_bf16"]) else pct(r["mfu_bf16"]) + of
        if ran and rep.on_gpu and r["cv"] > CV_LIMIT:
            cv_txt = f'<span class="warn">{cv_txt}</span>'
        rows.append(
            {
                "Stage": r["stage_title"],
                "B": r["batch_size"],
                "ms/step<br><small>p10–p90</small>": step,
                "CV": cv_txt,
                "tok/s": (tok(r["tokens_per_s"]) + _processes_note(processes.get((r["stage"], r["batch_size"]))))
                if ran
                else "",
                "× FP32": times(r["speedup_vs_baseline"]),
                "× prev.": times(r["speedup_vs_previous"]),
                "MFU<br><small>bf16 peak</small>": mfu if ran else "",
                # an out-of-memory row's memory is what the process held when the allocation failed
                "tensors<br><small>peak</small> GiB": _memory(r, "mem_tensors_bytes"),
                "allocator<br><small>peak</small> GiB": _memory(r, "mem_allocator_bytes"),
                "device<br><small>after steps</small> GiB": _memory(r, "mem_device_bytes"),
                "first step<br>s": fmt.duration(fs, 1) if ran and not pd.isna(fs := r.get("first_step_s")) else "",
                "final loss<br><small>Δ vs ref.</small>": loss,
            }
        )
    return pd.DataFrame(rows).to_html(index=False, escape=False, classes="matrix", border=0)


def _memory(r, key: str) -> str:
    """A memory cell in GiB; an out-of-memory row's says it is what the process held when its allocation failed."""
    return gib(r[key]) + ("<br><small>at failure</small>" if r["status"] == "oom" and not pd.isna(r[key]) else "")


def timed_clocks(records: list[dict]) -> str | None:
    """What the clocks did while the steps were timed, over every record that sampled them (measure/clocks.py): the
    range of the per-configuration median SM clocks, how many configurations met a throttle reason and which, and
    the hottest sample. A power cap shows here; it is why compiled steps spread more than eager ones."""
    got = [c for r in records if (c := r.get("clocks") or {}).get("sm_mhz")]
    if not got:
        return None
    sm = [c["sm_mhz"]["median"] for c in got]
    reasons = Counter(t for c in got for t in c.get("throttle_reasons") or [])
    hot = max((c.get("temperature_c") or {}).get("max") or 0 for c in got)
    return (
        f"SM clock median {fmt.reading(min(sm))}–{fmt.reading(max(sm))} MHz over the stage matrix's {len(got)} configurations; "
        + (
            "throttled by " + ", ".join(f"{t} in {n}" for t, n in reasons.most_common())
            if reasons
            else "no throttle reason sampled"
        )
        + (f"; at most {fmt.reading(hot)} °C" if hot else "")
    )


def environment_html(rep: Report) -> str:
    e, dev = rep.env, rep.env["device"]
    corpus = manifest()
    rows = [
        ("Device", dev.get("name")),
        ("Backend", dev["backend"]),
        ("Profile", f"{rep.params.name}: {rep.params.description or ''}"),
    ]
    if dev["backend"] in ("cuda", "rocm"):
        cap = dev.get("capability")
        rows += [
            ("Compute capability", f"{cap[0]}.{cap[1]}" if cap else None),
            ("SMs", dev.get("sm_count")),
            ("Device memory", f"{gib(dev.get('memory_bytes', 0), 1)} GiB"),
            ("GPUs on host", dev.get("count")),
            ("GPU interconnect", interconnect_view.summary(e.get("interconnect"))),
            ("Driver", e.get("driver")),
            ("CUDA (torch build)", e.get("cuda") or e.get("hip")),
            ("cuBLAS(Lt)", e.get("cublas")),
            ("cuDNN", e.get("cudnn")),
            ("Max SM / memory clock", _clocks(e)),
            ("Power limit", f"{fmt.reading(e['power_limit_w'])} W" if e.get("power_limit_w") else None),
            ("During the timed steps", timed_clocks(rep.records)),
        ]
    else:
        rows += [("CPU cores / torch threads", f"{e.get('cpu_cores')} / {e.get('threads')}")]
    pk = e.get("packages") or {}
    rows += [
        ("PyTorch", e.get("torch")),
        ("Python", e.get("python")),
        ("NumPy", e.get("numpy")),
        (
            "Triton, torchao, cut-cross-entropy",
            ", ".join(pk.get(n) or "not installed" for n in ("triton", "torchao", "cut-cross-entropy")) if pk else None,
        ),
        ("OS", e.get("os")),
        ("Tokenizer", corpus.get("tokenizer")),
        (
            "Corpus",
            f"{corpus.get('corpus')}, {fmt.count(corpus.get('tokens', 0))} tokens, "
            f"sha256 {corpus.get('corpus_sha256', '?')[:16]}…",
        ),
        ("Peak FLOP/s source", rep.params.peak_source),
    ]
    if rep.params.override:
        rows.append(("Profile override", f'<span class="bad">{html.escape(rep.params.override)}</span>'))
    body = "".join(f"<tr><th>{k}</th><td>{'' if v is None else v}</td></tr>" for k, v in rows if v is not None)
    return f'<table class="kv">{body}</table>'


def _clocks(e):
    if e.get("sm_clock_max_mhz"):
        return f"{e['sm_clock_max_mhz']} / {e.get('mem_clock_max_mhz')} MHz"
    return None


def switch_md(rep: Report, key: str) -> str:
    """A chapter's "the switch" block, from its stage entry (switch)."""
    return f"#### The switch\n\n```python\n{switch(rep, key)}\n```"


def switch(rep: Report, key: str) -> str:
    """A stage's code; the DDP stage's with the options its records ran with (none before they were recorded)."""
    if not stages.is_multi_gpu(key):
        return stages.get(key).switch
    ran = [r for r in rep.records if r["stage"] == key and r["status"] == "ok"]
    return stages.ddp_switch(ran[0].get("ddp_options") or ()) if ran else stages.get(key).switch


def appendix_md(rep: Report) -> str:
    blocks = []
    for above, key in zip([None, *rep.stage_order], rep.stage_order):
        st = stages.get(key)
        added_to = (
            f" (added to {stages.get(st.base).title}, not to the stage above)" if st.base and st.base != above else ""
        )
        blocks.append(f"**{st.title}** — {st.lever}{added_to}\n\n```python\n{switch(rep, key)}\n```")
    return "\n\n".join(blocks)


def stages_md(rep: Report) -> str:
    """The ladder of stages, for the method section."""
    return (
        f"Each stage adds one lever to the one before ({' → '.join(rep.stage_titles)}; the HTML report's "
        "Appendix A names the stages added to an earlier one) and is timed on the same model, seed and data at every batch size."
    )


def provenance_md(rep: Report) -> str:
    """Page 1's account of where and how the records were measured: machines, commits, runs, what was
    superseded and what this depth left out."""
    mine, strays = store.every_record(rep.dir)
    recs = [{**rec, "_folder": path.parent.name} for path, rec in mine]
    machines, commits = Counter(provenance.machine_of(r) for r in recs), Counter(provenance.commit_of(r) for r in recs)
    if not any(r.get("provenance") for r in recs):
        return "**Where and how:** these records predate stamping: their machine and commit are not recorded."
    runs = [*((rep.run or {}).get("earlier_runs") or []), rep.run] if rep.run else []
    state, cut = (rep.run or {}).get("state"), cut_short(rep)
    stopped = sum(1 for r in runs if r.get("state") == "interrupted") - (state == "interrupted")
    text = (
        f"**Where and how:** {len(recs)} records from {len(machines)} machine{'s' if len(machines) > 1 else ''} ("
        + "; ".join(f'<span class="nowrap">{m}</span>: {n}' for m, n in machines.most_common())
        + ") by code "
        + "; ".join(f"{c}: {n}" for c, n in commits.most_common())
        + f", in {len(runs)} run{'s' if len(runs) != 1 else ''} of the measuring command"
        + (
            f" ({stopped} stopped by {'its' if stopped == 1 else 'their'} time budget or cut off, then resumed)"
            if stopped
            else ""
        )
        + "."
    )
    if cut:
        text += (
            f" **Incomplete:** the last run was not resumed ({cut}). What it had not reached is missing from this "
            "report or decided on part of its evidence, as the chapters say."
        )
    if len(machines) > 1:
        kinds = {
            m: sorted(
                {
                    r["_folder"].replace("results", "matrix")
                    for r in recs
                    if provenance.machine_of(r) == m and r.get("status") == "ok"
                }
            )
            for m in machines
        }
        text += (
            " **Several machines:** "
            + "; ".join(f"{m} timed {', '.join(k) or 'nothing'}" for m, k in kinds.items())
            + "."
        )
        spread = rep.decided["machine_spread"]
        text += (
            f" The spread between them, measured on {spread['shared']} configurations timed on more than one, is "
            f"{pct(spread['spread'], 1)}; every comparison is judged against at least that."
            if spread["machines"] > 1 and spread["spread"] is not None
            else " No configuration was timed on more than one, so their offset is unknown: a ratio that joins records of "
            "two machines (here the leave-one-out and the recipe against the matrix) is not judged against noise."
        )
    if strays:
        sources = Counter(f"{provenance.commit_of(r)[:7]} on {provenance.machine_of(r)}" for _, r in strays)
        text += (
            f" **Left out:** {len(strays)} record{'s' if len(strays) > 1 else ''} in results/ that no run of this "
            "report measured (" + "; ".join(f"code {s}: {n}" for s, n in sources.most_common()) + "), found in its "
            "folder, are kept there and take no part in it."
        )
    superseded = sorted((rep.dir / "superseded").rglob("*.json")) if (rep.dir / "superseded").is_dir() else []
    if superseded:
        text += f" {len(superseded)} superseded records are kept in superseded/ (re-measured, never deleted)."
    left = rep.params.not_run or []
    if left:
        undecided = [stages.get(k).title for k in rep.decided.get("left_to_full_depth") or []]
        role = (
            f"the quality tests decide what page 1 leaves not tested ({', '.join(undecided)}), the rest explain or "
            "add depth"
            if undecided
            else "each explains or adds depth; none decides a lever of this report"
        )
        text += (
            f" **Not measured at this depth** ({role}): "
            + "; ".join(_not_run_name(n) for n in left)
            + f". `make report GPU={rep.params.name} DEPTH=full` adds them."
        )
    return text


def _not_run_name(item: dict) -> str:
    """A short name of what the default depth left out: the stage's or chapter's title, the evidence's own words
    up to their explanation in brackets."""
    if item["kind"] == "stage":
        return stages.get(item["key"]).title
    if item["kind"] == "chapter":
        return chapters.CHAPTERS[item["key"]].title
    return (item.get("what") or item["key"]).split(" (")[0]


def failures_md(rep: Report, failures: list[str]) -> str:
    lines = [f"* notebook failed: `{f}`" for f in failures]
    lines += [
        f"* {r['stage_title']} B={r['batch_size']}: **error**: {short(r.get('reason'))[:400]}"
        for r in rep.records
        if r["status"] == "error"
    ]
    if not lines:
        return ""
    return "**Failures in this run** (the rest of the report is still valid):\n\n" + "\n".join(lines)
