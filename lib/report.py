"""*How the report reads*: tables, charts, findings and recommendations, all computed from the
result records of one report folder. Notebooks call these and display what they return; no
number in a report is typed by hand."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import data, kernel_profile, results, stages
from .paths import resolve

GiB = 2**30
CV_LIMIT = 0.02  # step-time spread above this on a GPU is called out


@dataclass
class Report:
    dir: Path
    params: dict
    env: dict
    records: list
    df: pd.DataFrame
    loss_noise: float = 0.0  # results.loss_noise: run-to-run drift of the loss gate's statistic

    @property
    def stage_order(self) -> list[str]:
        return self.params["stages"]

    @property
    def on_gpu(self) -> bool:
        return self.params["backend"] in ("cuda", "rocm")

    def rec(self, stage: str, batch: int) -> dict | None:
        return next((r for r in self.records if r["stage"] == stage and r["batch_size"] == batch), None)

    def ok(self) -> pd.DataFrame:
        return self.df[self.df["status"].isin(["ok", "diverged"])]


def load(report_dir) -> Report:
    d = resolve(report_dir)
    params = json.loads((d / "params.json").read_text())
    env = json.loads((d / "environment.json").read_text())
    records = [kernel_profile.current(r) for r in results.load_records(d / "results")]
    order = params["stages"]
    # DDP runs at whatever batch the best single-GPU configuration had (the sweep's, maybe).
    records = [r for r in records if r["stage"] in order
               and (r["batch_size"] in params["run"]["batch_sizes"] or stages.is_multi_gpu(r["stage"]))]
    noise = results.loss_noise(results.decision_records(d / "results"))
    df = results.table(records, order, params["run"]["loss_tolerance"], noise)
    return Report(d, params, env, records, df, noise)


# ---------------------------------------------------------------- formatting helpers

def _gib(v) -> str:
    return "n/a" if v is None or pd.isna(v) else f"{v / GiB:.2f}"


def _x(v) -> str:
    return "" if v is None or pd.isna(v) else f"{v:.2f}×"


def _pct(v, digits=1) -> str:
    return "n/a" if v is None or pd.isna(v) else f"{v * 100:.{digits}f} %"


def _tok(v) -> str:
    return "" if v is None or pd.isna(v) else f"{v:,.0f}"


def _status_cell(row) -> str:
    s = row["status"]
    if s == "ok":
        return "ok"
    label = {"oom": "OOM", "not_applicable": "not applicable", "diverged": "DIVERGED",
             "error": "ERROR"}.get(s, s)
    return f'<span class="bad" title="{html.escape(str(row["reason"] or ""))}">{label}</span>'


def matrix_html(rep: Report, stage: str | None = None) -> str:
    """The experimental matrix (stage x batch), or one stage's rows of it. A row that has no
    timing says why in the step-time cell (OOM, not applicable, error) so it cannot be missed."""
    df = rep.df if stage is None else rep.df[rep.df["stage"] == stage]
    rows = []
    for _, r in df.iterrows():
        ran = r["status"] in ("ok", "diverged")
        loss = ""
        if ran and not pd.isna(r["final_loss"]):
            loss = f"{r['final_loss']:.3f}"
            if not pd.isna(r["loss_delta"]) and r["stage"] != rep.stage_order[0]:
                flag = "" if r["loss_within_tolerance"] else ' <span class="bad">beyond tol.</span>'
                gate = "" if pd.isna(r["loss_gap"]) else f"<br>gate {r['loss_gap']:.3f}"
                loss += f"<br><small>{r['loss_delta']:+.3f} vs {r['loss_ref']}{gate}{flag}</small>"
        if ran:
            step = f"{r['median_ms']:.1f}<br><small>{r['p10_ms']:.1f}–{r['p90_ms']:.1f}</small>"
            if r["status"] == "diverged":
                step += '<br><span class="bad">DIVERGED</span>'
        else:
            step = _status_cell(r)
        cv_txt = _pct(r["cv"]) if ran else ""
        if ran and rep.on_gpu and r["cv"] > CV_LIMIT:
            cv_txt = f'<span class="warn">{cv_txt}</span>'
        rows.append({
            "Stage": r["stage_title"], "B": r["batch_size"],
            "ms/step<br><small>p10–p90</small>": step, "CV": cv_txt,
            "tok/s": _tok(r["tokens_per_s"]) if ran else "",
            "× FP32": _x(r["speedup_vs_baseline"]), "× prev.": _x(r["speedup_vs_previous"]),
            "MFU": (f"{_pct(r['mfu'])}<br><small>{r['peak_precision']}</small>" if ran and not pd.isna(r["mfu"])
                    else ("n/a" if ran else "")),
            "tensors<br>GiB": _gib(r["mem_tensors_bytes"]), "allocator<br>GiB": _gib(r["mem_allocator_bytes"]),
            "device<br>GiB": _gib(r["mem_device_bytes"]),
            "final loss<br><small>Δ vs ref.</small>": loss,
        })
    return pd.DataFrame(rows).to_html(index=False, escape=False, classes="matrix", border=0)


def environment_html(rep: Report) -> str:
    e, dev = rep.env, rep.env["device"]
    manifest = _manifest()
    rows = [("Device", dev.get("name")), ("Backend", dev["backend"]),
            ("Profile", f"{rep.params['name']}: {rep.params.get('description', '')}")]
    if dev["backend"] in ("cuda", "rocm"):
        cap = dev.get("capability")
        rows += [("Compute capability", f"{cap[0]}.{cap[1]}" if cap else None),
                 ("SMs", dev.get("sm_count")), ("Device memory", f"{dev.get('memory_bytes', 0) / GiB:.1f} GiB"),
                 ("GPUs on host", dev.get("count")), ("Driver", e.get("driver")),
                 ("CUDA (torch build)", e.get("cuda") or e.get("hip")), ("cuBLAS(Lt)", e.get("cublas")),
                 ("cuDNN", e.get("cudnn")), ("Max SM / memory clock", _clocks(e)),
                 ("Power limit", f"{e['power_limit_w']:.0f} W" if e.get("power_limit_w") else None)]
    else:
        rows += [("CPU cores / torch threads", f"{e.get('cpu_cores')} / {e.get('threads')}")]
    rows += [("PyTorch", e.get("torch")), ("Python", e.get("python")), ("NumPy", e.get("numpy")),
             ("OS", e.get("os")), ("Tokenizer", manifest.get("tokenizer")),
             ("Corpus", f"{manifest.get('corpus')}, {manifest.get('tokens', 0):,} tokens, "
                        f"sha256 {manifest.get('corpus_sha256', '?')[:16]}…"),
             ("Peak FLOP/s source", rep.params.get("peak_source"))]
    if rep.params.get("override"):
        rows.append(("Profile override", f'<span class="bad">{html.escape(rep.params["override"])}</span>'))
    body = "".join(f"<tr><th>{k}</th><td>{'' if v is None else v}</td></tr>" for k, v in rows if v is not None)
    return f'<table class="kv">{body}</table>'


def _clocks(e):
    if e.get("sm_clock_max_mhz"):
        return f"{e['sm_clock_max_mhz']} / {e.get('mem_clock_max_mhz')} MHz"
    return None


def _manifest() -> dict:
    try:
        return json.loads((data.DATA_DIR / "manifest.json").read_text())
    except FileNotFoundError:
        return {}


def method_md(rep: Report) -> str:
    r, m = rep.params["run"], rep.params["model"]
    peaks = rep.params.get("peak_tflops")
    peak_txt = (", ".join(f"{k} {v:g}" for k, v in peaks.items()) + " TFLOP/s" if peaks
                else "none for this device, so MFU is n/a")
    timer = "CUDA events around each step" if rep.on_gpu else "`time.perf_counter` around each step, after a device synchronize"
    return f"""
* **Model**: GPT-2, {m['n_layer']} layers, {m['n_head']} heads, d={m['n_embd']}, T={r['seq_len']},
  vocabulary {m['vocab_size']} (padded to {m['padded_vocab_size']} in the vocab stage); AdamW
  (lr {r['learning_rate']:g}, β=(0.9, 0.95), weight decay {r['weight_decay']:g}), gradient clipping at {r['grad_clip']:g}.
* **Isolation**: every (stage, batch) configuration runs in a fresh Python process, so memory peaks,
  allocator state and library workspaces never carry over. A process that compiles a shape an earlier one
  compiled loads inductor's kernels from its on-disk cache (a shorter first step); its timed steps run the
  same kernels. The model is initialised from seed
  {r['seed']} on the CPU and every stage sees the same batches in the same order.
* **Initial weights**: {_init_note(rep)}
* **Timing**: {r['warmup_steps']} warm-up steps (not counted), then {r['timed_steps']} timed steps, {timer}.
  All batches are on the device before timing starts. We report the median, p10 and p90 of the step
  time and the coefficient of variation (CV = standard deviation / mean); tokens/s = B·T / median.
* **MFU** = FLOPs per token × tokens/s ÷ peak, with FLOPs per token = 6N + 12·L·d·T (N without
  position embeddings). Each stage is compared with the peak of the precision its GEMMs run in
  (FP32 → fp32, TF32 → tf32, the BF16 stages → bf16 dense; the FP8 stage too is quoted against the
  bf16 dense peak, the bar a recommendation has to clear). Peaks: {peak_txt}.
* **Compilation**: the first step of every configuration (which pays for `torch.compile`, cuBLAS
  heuristics and allocator growth) is timed on its own and reported as "first step"; it is a warm-up step.
* **Memory**, three layers: *tensors* = `max_memory_allocated` (live tensors at their peak),
  *allocator* = `max_memory_reserved` (what PyTorch's caching allocator held), *device* = memory in use
  on the device after the timed steps as `nvidia-smi` would show it (adds the CUDA context and library
  workspaces). On a CPU only the process's peak resident memory is known.
* **Loss gate**: every step after warm-up is compared with the stage's reference at the same batch
  size (same seed, same batches): a stage passes when the {results.LOSS_GATE_WINDOW}-step moving average
  of the loss difference never leaves ±{r['loss_tolerance']:g} nats. References: the FP32 baseline
  for TF32, BF16, flash and vocab; the vocab stage (BF16 autocast, flash attention, padded vocabulary:
  the configuration they are added to) for fused AdamW, torch.compile and FP8. "Final loss" is the mean
  of the last {r['final_loss_window']} steps. The loss is computed as nanoGPT computes it, over every column
  of the logits (the padded ones included; they are never targets).
* **Parity run**: the recommended configuration and its reference stage train
  {rep.params['evidence']['parity_steps']} steps at the recommended batch size with nanoGPT's learning-rate
  shape (linear warm-up over the first quarter, cosine decay to a tenth), the reference accumulating
  gradients over micro-batches where it does not fit at once. They are judged by the same gate, then by their
  loss on the held-out last {int(data.HELD_OUT * 100)} % of the corpus, which no run trains on. The reference
  runs twice (GPU kernels with atomics are not bitwise repeatable, so two runs drift apart: the loss noise);
  the lever passes when its loss never leaves the envelope of the reference's runs by more than the
  tolerance, and its held-out loss not their range.
* **Cross-check**: a plain training loop in nanoGPT's form (`lib/plain_loop.py`: its own model, only the
  data shared) runs beside the harness at the flash and vocab stages and at the recommended configuration
  (table below). Its figure is the wall time of its timed steps over their number, the host running ahead of
  the device as in nanoGPT's loop; it also times each step after `torch.cuda.synchronize()`, as
  build-nanogpt does.
* **Repeats and noise**: the recommended configuration, its runner-up and both sides of every timing claim
  run in {rep.params['evidence']['repeats']} fresh processes (table below); {{noise}}
* **Kernel profile**: after the timed steps, one more training step under `torch.profiler`; device
  kernel time (on a CPU, operators' self time) grouped into GEMM, attention, cross-entropy,
  normalisation/elementwise, optimizer and other by kernel name (`lib/kernel_profile.py`; when a report
  is re-rendered, its top kernels are re-read with the current rules).
* **Energy**: {_energy_method(rep)}
* **Failures are results**: an out-of-memory configuration is an OOM row, a NaN loss a DIVERGED row,
  a stage the device cannot run a "not applicable" row.
""".replace("{noise}", _noise_sentence(rep))


def _noise_sentence(rep: Report) -> str:
    from . import fidelity_view

    return fidelity_view.noise_sentence(rep)


def _energy_method(rep: Report) -> str:
    found = [r["energy"] for r in rep.records if isinstance(r.get("energy"), dict)]
    measured = [e for e in found if e.get("energy_j")]
    if measured:
        return (f"GPU energy over the timed steps from {measured[0]['method']}, divided by the tokens trained "
                "in them (joules per token); average power = energy / elapsed time. Whole-board energy, "
                "as NVML reports it.")
    if found:
        return f"not measured on this device: {found[0].get('unavailable')}."
    return "not recorded for these results."


def _init_note(rep: Report) -> str:
    """Whether every stage really started from the same weights (checksums recorded per run)."""
    sums = {r["stage"]: r.get("init_checksum") for r in rep.records if r["status"] in ("ok", "diverged", "oom")}
    if not sums or any(v is None for v in sums.values()):
        return ("not verified for this report: its results were measured before the initial-weight checksum "
                "was recorded (and before a fix that gives the padded-vocabulary stage the same initial "
                "weights as the others), so the vocab stage's loss difference includes initialisation noise.")
    if len(set(sums.values())) == 1:
        return f"identical for every stage (checksum {next(iter(sums.values()))} over the real vocabulary)."
    groups = {}
    for stage, v in sums.items():
        groups.setdefault(v, []).append(stage)
    return ("**differ between stages**: " + "; ".join(", ".join(g) for g in groups.values())
            + ": their loss differences include initialisation noise.")


# ---------------------------------------------------------------- findings

def _speedups(rep: Report, stage: str, col: str) -> pd.Series:
    rows = rep.ok()[rep.ok()["stage"] == stage]
    return rows.set_index("batch_size")[col].dropna()


def _range(values, fmt="{:.2f}×") -> str:
    values = list(values)
    if not values:
        return "n/a"
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def efficiency_reference(r) -> str:
    """What a DDP row's scaling efficiency divides by, in words, with the figures."""
    single = "" if pd.isna(r.get("single_gpu_tokens_per_s")) else f"{r['single_gpu_tokens_per_s']:,.0f} tokens/s"
    if not pd.isna(r.get("one_rank_tokens_per_s")):
        return (f"one rank of the same DDP job ({r['one_rank_tokens_per_s']:,.0f} tokens/s"
                + (f"; the single-GPU row: {single})" if single else ")"))
    return f"one GPU at the same setting ({single or 'n/a'})"


def _ddp_finding(st, r) -> str:
    """DDP runs once, at the best single-GPU setting, so it is judged against that setting on
    one GPU rather than against the previous stage at the same batch size."""
    base = stages.get(r["base_stage"]).title if r.get("base_stage") in stages.STAGES else "the best setting"
    text = (f"**{st.title}** ({st.lever}): {int(r['world_size'])} GPUs × B={r['batch_size']} ({base}), "
            f"{r['tokens_per_s']:,.0f} tokens/s in all")
    if not pd.isna(r["scaling_efficiency"]):
        text += (f", {r['world_size'] * r['scaling_efficiency']:.2f}× {efficiency_reference(r)}: "
                 f"scaling efficiency {r['scaling_efficiency'] * 100:.1f} %")
    if not pd.isna(r.get("allreduce_share")):
        text += f"; the gradient all-reduce costs {r['allreduce_share'] * 100:.1f} % of the step"
    return text + "."


def findings(rep: Report) -> list[str]:
    """Key findings, each with its number, from the table alone."""
    out = []
    order = rep.stage_order
    ok = rep.ok()
    if ok.empty:
        return ["No configuration completed; see the matrix for each row's status."]
    clean = ok[ok["status"] == "ok"]
    if clean.empty:
        return ["No configuration completed with a finite loss; see the matrix for each row's status."]
    from . import fidelity_view  # imported here: it builds on this module

    rec = recommended(rep)
    if rec is not None:
        out.append(recommended_line(rep, rec))
    for line in (fidelity_view.crosscheck_finding(rep), fidelity_view.parity_md(rep) if rec else None):
        if line:
            out.append(line)
    one_gpu = clean[~clean["stage"].map(stages.is_multi_gpu)]  # several GPUs' aggregate: its own line below
    pool = one_gpu if not one_gpu.empty else clean
    best = pool.loc[pool["tokens_per_s"].idxmax()]
    base = clean[clean["stage"] == order[0]]
    line = (f"Fastest in the stage matrix: {best['stage_title']} at B={best['batch_size']}, "
            f"{best['tokens_per_s']:,.0f} tokens/s ({best['median_ms']:.1f} ms/step")
    if not pd.isna(best["mfu"]):
        line += f", MFU {best['mfu'] * 100:.1f} % of the {best['peak_precision']} peak"
    line += ")"
    if not base.empty:
        b0 = base.loc[base["tokens_per_s"].idxmax()]
        line += (f", {best['tokens_per_s'] / b0['tokens_per_s']:.2f}× the best FP32 baseline "
                 f"({b0['tokens_per_s']:,.0f} tokens/s at B={b0['batch_size']}).")
    out.append(line)
    for key in order[1:]:
        st = stages.get(key)
        prev = _speedups(rep, key, "speedup_vs_previous")
        if st.multi_gpu and not ok[ok["stage"] == key].empty:
            out.append(_ddp_finding(st, ok[ok["stage"] == key].iloc[0]))
            continue
        if prev.empty:
            status = [x.replace("_", " ").replace("oom", "OOM") for x in rep.df[rep.df["stage"] == key]["status"].unique()]
            out.append(f"**{st.title}**: no measurement ({', '.join(status) or 'the stage did not run'}).")
            continue
        text = f"**{st.title}** ({st.lever}): {_range(prev.values)} the previous stage's speed{_noise_note(rep, key)}"
        diverged = rep.df[(rep.df["stage"] == key) & (rep.df["status"] == "diverged")]["batch_size"].tolist()
        if diverged:
            text += f"; **the loss diverged (NaN) at B={', '.join(map(str, diverged))}**"
        mem = _memory_change(rep, key)
        if mem:
            text += f"; {mem}"
        gate = _loss_gate_text(rep, key)
        if gate:
            text += "; " + gate
        out.append(text + ".")
    failed = rep.df[~rep.df["status"].isin(["ok", "diverged"])]
    if not failed.empty:
        items = ", ".join(f"{r.stage_title} B={r.batch_size}: {r.status.replace('_', ' ').replace('oom', 'OOM')}"
                          for r in failed.itertuples())
        out.append(f"**Rows without a timing**: {items}.")
    if rep.on_gpu:
        out.append(_stability(rep))
    else:
        out.append("This is the CPU embedded default (a tiny GPT): it proves the pipeline end to end; "
                   "its timings say nothing about any GPU.")
    return out


def _stability(rep: Report) -> str:
    """Step-time CV over every timed process of the report: matrix, sweep, repeats, variants."""
    from . import evidence  # imported here: the evidence loader sits above this module

    ev = evidence.load(rep.dir)
    timed = [r for r in rep.records + ev["sweep"] + ev["repeats"] + ev["variants"]
             if r.get("status") == "ok" and r.get("cv") is not None and not stages.is_multi_gpu(r.get("stage"))]
    noisy = [r for r in timed if r["cv"] > CV_LIMIT]
    if not noisy:
        return (f"Step times are stable: every timed GPU process has CV ≤ {CV_LIMIT * 100:.0f} % "
                f"(largest {max(r['cv'] for r in timed) * 100:.2f} %).")
    return (f"Step-time CV above {CV_LIMIT * 100:.0f} % in {len(noisy)} of {len(timed)} timed processes: " + ", ".join(
        f"{r['stage_title']} B={r['batch_size']}{' (' + r['variant'] + ')' if r.get('variant') else ''} "
        f"{r['cv'] * 100:.1f} %" for r in noisy) + "; the medians are robust to such outliers.")


def _memory_change(rep: Report, key: str) -> str | None:
    """Allocator-level (or, on CPU, process-level) memory against the previous stage, at the
    largest batch size both completed."""
    order = rep.stage_order
    i = order.index(key)
    col = "mem_allocator_bytes" if rep.on_gpu else "mem_device_bytes"
    ok = rep.ok()
    cur = ok[ok["stage"] == key].set_index("batch_size")[col].dropna()
    prev = ok[ok["stage"] == order[i - 1]].set_index("batch_size")[col].dropna()
    common = sorted(set(cur.index) & set(prev.index))
    if not common:
        return None
    b = common[-1]
    change = cur[b] / prev[b] - 1
    layer = "allocator memory" if rep.on_gpu else "process peak memory"
    return f"{layer} {change * 100:+.1f} % at B={b} ({_gib(prev[b])} → {_gib(cur[b])} GiB)"


def _loss_gate_text(rep: Report, key: str) -> str | None:
    """The loss gate's verdict on one stage, naming the batch sizes it could judge."""
    rows = rep.df[(rep.df["stage"] == key) & rep.df["loss_gap"].notna()]
    if rows.empty:
        return None
    tol, ref = rep.params["run"]["loss_tolerance"], stages.get(stages.get(key).reference).title
    noise = rep.loss_noise
    parts = []
    for verdict in ("beyond", "within noise", "within"):
        hit = rows[rows["loss_verdict"] == verdict]
        if hit.empty:
            continue
        at = ", ".join(f"B={b} {g:.3f}" for b, g in zip(hit["batch_size"], hit["loss_gap"]))
        label = {"beyond": "**beyond** tolerance of", "within noise": "beyond the tolerance but within noise of",
                 "within": "within tolerance of"}[verdict]
        parts.append(f"loss {label} {ref} (largest 5-step-average gap after warm-up: {at}; tolerance {tol:g} nats"
                     + (f", run-to-run noise {noise:.3f}" if verdict != "within" else "") + ")")
    return "; ".join(parts)


def recommendations(rep: Report) -> list[str]:
    """Keep a lever when it made the step faster without breaking loss parity."""
    out, keep = [], []
    tol = rep.params["run"]["loss_tolerance"]
    for key in rep.stage_order[1:]:
        st = stages.get(key)
        prev = _speedups(rep, key, "speedup_vs_previous")
        delta = rep.df[rep.df["stage"] == key]["loss_gap"].dropna()
        multi = rep.ok()[rep.ok()["stage"] == key] if st.multi_gpu else None
        if multi is not None and not multi.empty:  # judged against one GPU at its own setting, not the stage before
            r = multi.iloc[0]
            eff = "" if pd.isna(r["scaling_efficiency"]) else f" at {r['scaling_efficiency'] * 100:.1f} % scaling efficiency"
            out.append(f"**{st.title}**: adopt to train faster with more GPUs: {int(r['world_size'])} GPUs give "
                       f"{r['tokens_per_s']:,.0f} tokens/s{eff}.")
            continue
        if prev.empty:
            out.append(f"**{st.title}**: not measured here, no recommendation.")
            continue
        med = float(np.median(prev.values))
        if (rep.df[rep.df["stage"] == key]["status"] == "diverged").any():
            out.append(f"**{st.title}**: do not adopt as is: its loss diverged (NaN).")
        elif (rep.df[rep.df["stage"] == key]["loss_verdict"] == "beyond").any():
            out.append(f"**{st.title}**: do not adopt as is: the loss moved {delta.max():.3f} nats from "
                       f"{stages.get(st.reference).title} (5-step average).")
        elif _noise_note(rep, key):
            out.append(f"**{st.title}**: neutral on this device (median {med:.2f}×, within noise); adopt only for "
                       "its other effects" + (" (memory)." if key in ("bf16", "flash") else "."))
        elif med >= 1.02:
            keep.append(st.title)
            out.append(f"**{st.title}**: adopt (median {med:.2f}× over the previous stage, loss within tolerance).")
        elif med > 0.98:
            out.append(f"**{st.title}**: neutral on this device (median {med:.2f}×); adopt only for its other effects"
                       + (" (memory)." if key in ("bf16", "flash") else "."))
        else:
            out.append(f"**{st.title}**: slower here (median {med:.2f}×); investigate before adopting.")
    best = recommended(rep)
    if best is not None:
        out.insert(0, recommended_line(rep, best) + f" Allocator peak {_gib(best.get('mem_allocator_bytes'))} GiB.")
    return out


def recommended_line(rep: Report, best: dict) -> str:
    """The recommendation in one sentence: its median over processes, their range, its MFU at
    that median, and why it was preferred over a faster-looking batch size."""
    p = best["processes"]
    line = f"**Recommended configuration: {best['stage_title']} at B={best['batch_size']}**, {p['median']:,.0f} tokens/s"
    if p["n"] > 1:
        line += f" (median of {p['n']} processes, range {p['lo']:,.0f}–{p['hi']:,.0f})"
    if best.get("mfu") is not None:
        line += f", MFU {best['mfu'] * p['median'] / best['tokens_per_s'] * 100:.1f} % of the {best['peak_precision']} peak"
    line += "; the fastest measured setting whose loss held"
    if best.get("chosen_over"):
        c = best["chosen_over"]
        line += (f"; preferred to B={c['batch_size']}, whose throughput is within noise of it, for its smaller "
                 "memory footprint")
    return line + "."


def _noise_note(rep: Report, key: str) -> str:
    """' (within noise)' when every batch size's lever effect lies inside the measured noise."""
    from . import fidelity_view

    i = rep.stage_order.index(key)
    if stages.is_multi_gpu(key) or i == 0:
        return ""
    prev = rep.stage_order[i - 1]
    batches = rep.ok()[rep.ok()["stage"] == key]["batch_size"].tolist()
    verdicts = [fidelity_view.within_noise(rep, (key, b), (prev, b)) for b in batches]
    verdicts = [v for v in verdicts if v is not None]
    return " (within noise)" if verdicts and all(verdicts) else ""


def recommended(rep: Report) -> dict | None:
    """The recommended configuration (results.best_config) over the matrix, the batch sweep,
    the repeats and the parity runs."""
    return results.best_config(results.decision_records(rep.dir / "results"), rep.params)


def stage_summary(rep: Report, key: str) -> str:
    """One paragraph of measured facts for a stage chapter."""
    st = stages.get(key)
    rows = rep.df[rep.df["stage"] == key]
    if rows.empty:
        return f"No results for {st.title}."
    if not rows["status"].isin(["ok", "diverged"]).any():
        return f"{st.title} has no timing on this device: " + "; ".join(
            f"B={r.batch_size}: {r.status.replace('_', ' ')} ({r.reason})" for r in rows.itertuples())
    parts = []
    prev = _speedups(rep, key, "speedup_vs_previous")
    if key != rep.stage_order[0] and not prev.empty:  # DDP runs at a batch of its own: no previous stage there
        base = _speedups(rep, key, "speedup_vs_baseline")
        parts.append(f"Against the previous stage the step is {_range(prev.values)} as fast "
                     f"({_range(base.values)} against FP32) across batch sizes {', '.join(map(str, prev.index))}.")
        mem = _memory_change(rep, key)
        if mem:
            parts.append(f"Memory: {mem}.")
    ok = rows[rows["status"].isin(["ok", "diverged"])]
    best = ok.loc[ok["tokens_per_s"].idxmax()]
    parts.append(f"Best throughput {best['tokens_per_s']:,.0f} tokens/s at B={best['batch_size']}"
                 + (f" (MFU {best['mfu'] * 100:.1f} % of the {best['peak_precision']} peak)." if not pd.isna(best["mfu"]) else "."))
    if st.multi_gpu:
        r = ok.iloc[0]
        eff = "n/a" if pd.isna(r["scaling_efficiency"]) else f"{r['scaling_efficiency'] * 100:.1f} %"
        parts.append(f"{int(r['world_size'])} GPUs at B={r['batch_size']} per GPU: {r['tokens_per_s']:,.0f} tokens/s "
                     f"in all, {r['per_gpu_tokens_per_s']:,.0f} per GPU; **scaling efficiency {eff}** against "
                     f"{efficiency_reference(r)}; the gradient all-reduce costs **{r['allreduce_share'] * 100:.1f} %** of "
                     "the step (step time with and without gradient synchronisation).")
    from . import fidelity_view

    for c in fidelity_view.crosscheck_rows(rep):
        if c["stage"] == key and c["difference"] is not None:
            parts.append(f"A plain nanoGPT-form loop at B={c['batch_size']}: {c['plain_ms']:.1f} ms/step against the "
                         f"harness's {c['harness_ms']:.1f} ms ({c['difference'] * 100:+.1f} %).")
    sdpa = ok["sdpa_backend"].dropna().unique()
    if len(sdpa):
        parts.append(f"SDPA backend that ran: **{', '.join(sdpa)}** (read from the dispatched operators).")
    for r in rows.itertuples():
        if r.status not in ("ok",):
            parts.append(f"B={r.batch_size}: **{r.status.replace('_', ' ')}** — {_short(r.reason)}")
    return " ".join(parts)


def _short(reason) -> str:
    """The first two sentences of a failure message (CUDA's OOM text runs on for lines)."""
    text = str(reason or "")
    parts = text.split(". ")
    return ". ".join(parts[:2]).rstrip(".") + "."


def switch_md(key: str) -> str:
    """A chapter's "the switch" block, from its stage entry."""
    return f"#### The switch\n\n```python\n{stages.get(key).switch}\n```"


def appendix_md(rep: Report) -> str:
    blocks = []
    for key in rep.stage_order:
        st = stages.get(key)
        blocks.append(f"**{st.title}** — {st.lever}\n\n```python\n{st.switch}\n```")
    return "\n\n".join(blocks)


# ---------------------------------------------------------------- charts

def _style():
    import matplotlib.pyplot as plt
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.axisbelow": True})
    return plt


def _save(fig, rep: Report, name: str):
    out = rep.dir / "figures"
    out.mkdir(exist_ok=True)
    fig.savefig(out / f"{name}.png", bbox_inches="tight")
    return fig


def _titles(rep):
    return [stages.get(k).title for k in rep.stage_order]


def plot_throughput(rep: Report):
    plt = _style()
    batches = rep.params["run"]["batch_sizes"]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(batches)
    x = np.arange(len(rep.stage_order))
    for j, b in enumerate(batches):
        for i, key in enumerate(rep.stage_order):
            r = rep.df[(rep.df["stage"] == key) & (rep.df["batch_size"] == b)]
            xpos = x[i] + (j - (len(batches) - 1) / 2) * width
            if r.empty or r["status"].iloc[0] not in ("ok", "diverged"):
                label = "n/a" if r.empty else {"oom": "OOM", "not_applicable": "n/a"}.get(r["status"].iloc[0], "err")
                ax.text(xpos, 0, label, ha="center", va="bottom", fontsize=7, color="firebrick", rotation=90)
                continue
            ax.bar(xpos, r["tokens_per_s"].iloc[0], width, color=f"C{j}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{j}") for j in range(len(batches))]
    ax.legend(handles, [f"B={b}" for b in batches], frameon=False, ncol=len(batches))
    ax.set_xticks(x, _titles(rep), fontsize=8)
    ax.set_ylabel("tokens / s (median step)")
    ax.set_title("Throughput by stage and batch size")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    return _save(fig, rep, "throughput")


def plot_memory(rep: Report):
    plt = _style()
    layers = ([("mem_tensors_bytes", "tensors (max allocated)"), ("mem_allocator_bytes", "allocator (max reserved)"),
               ("mem_device_bytes", "device (nvidia-smi)")] if rep.on_gpu
              else [("mem_device_bytes", "process peak RSS")])
    batches = rep.params["run"]["batch_sizes"]
    fig, axes = plt.subplots(1, len(batches), figsize=(9, 3.2), sharey=True, squeeze=False)
    x = np.arange(len(rep.stage_order))
    width = 0.8 / len(layers)
    for ax, b in zip(axes[0], batches):
        for j, (col, label) in enumerate(layers):
            vals = []
            for key in rep.stage_order:
                rec = rep.rec(key, b)
                v = rec.get(col) if rec and rec["status"] in ("ok", "diverged") else None
                vals.append(np.nan if v is None else v / GiB)
            ax.bar(x + (j - (len(layers) - 1) / 2) * width, vals, width, color=f"C{j}", label=label)
        for i, key in enumerate(rep.stage_order):
            rec = rep.rec(key, b)
            if rec and rec["status"] not in ("ok", "diverged"):
                ax.text(x[i], 0, {"oom": "OOM"}.get(rec["status"], "n/a"), ha="center", va="bottom",
                        fontsize=7, color="firebrick", rotation=90)
        ax.set_title(f"B={b}", fontsize=9)
        ax.set_xticks(x, [k for k in rep.stage_order], fontsize=7)
    axes[0][0].set_ylabel("GiB")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, fontsize=7,
               bbox_to_anchor=(0.5, -0.08))
    fig.suptitle("Peak memory by stage, three layers", fontsize=10)
    fig.tight_layout()
    return _save(fig, rep, "memory")


def plot_spread(rep: Report):
    """Each configuration's timed steps relative to its own median, so a 60 ms and a 700 ms
    configuration share one readable axis."""
    plt = _style()
    data_, labels = [], []
    for r in _sorted(rep):
        if r["status"] in ("ok", "diverged") and r.get("step_ms"):
            t = np.asarray(r["step_ms"])
            data_.append((t / np.median(t) - 1) * 100)
            labels.append(f"{r['stage']}\nB={r['batch_size']}")
    fig, ax = plt.subplots(figsize=(9, 3.2))
    if data_:
        ax.boxplot(data_, whis=(10, 90), showfliers=True, flierprops={"markersize": 2})
        ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_ylabel("step time vs its median (%)")
    ax.set_title("Step-time spread per configuration (box: quartiles, whiskers: p10–p90, dots: outliers)")
    return _save(fig, rep, "step_spread")


def _sorted(rep: Report):
    order = {k: i for i, k in enumerate(rep.stage_order)}
    return sorted(rep.records, key=lambda r: (order[r["stage"]], r["batch_size"]))


def _plot_multi_gpu_losses(rep: Report, stage: str):
    """Rank 0's loss per step next to the single-GPU configuration it replicates, at its batch:
    rank 0 trains on the same batches, but each update uses every rank's gradients."""
    plt = _style()
    fig, ax = plt.subplots(figsize=(6, 2.9))
    rec = next((r for r in rep.records if r["stage"] == stage and r.get("losses")), None)
    base = rec and next((r for r in results.decision_records(rep.dir / "results")
                         if r["stage"] == rec.get("base_stage") and r["batch_size"] == rec["batch_size"]
                         and r.get("variant") in (None, "batch sweep") and r.get("losses")), None)
    if rec is None:
        ax.text(0.5, 0.5, "no multi-GPU loss curve", ha="center", va="center", transform=ax.transAxes, fontsize=8)
    else:
        ax.plot(rec["losses"], color="C3", lw=1.0, label=f"rank 0 of {rec['world_size']} GPUs, B={rec['batch_size']} each")
        if base:
            ax.plot(base["losses"], color="C0", lw=1.0, label=f"{base['stage_title']} on one GPU, B={base['batch_size']}")
        ax.axvline(rep.params["run"]["warmup_steps"] - 0.5, color="grey", lw=0.6, ls=":")
        ax.legend(frameon=False, fontsize=7)
    ax.set_xlabel("step (dotted: end of warm-up)")
    ax.set_ylabel("training loss (nats)")
    fig.tight_layout()
    return _save(fig, rep, f"losses_{stage}")


def plot_losses(rep: Report, stage: str | None = None):
    """Summary: every stage's loss per step. Chapter: this stage's loss minus its reference's
    (FP32, or the vocab stage for the later levers), step by step, with the tolerance band the
    final loss is judged against."""
    if stage is not None and stages.get(stage).multi_gpu:
        return _plot_multi_gpu_losses(rep, stage)
    plt = _style()
    batches = rep.params["run"]["batch_sizes"]
    tol = rep.params["run"]["loss_tolerance"]
    base_key = stages.get(stage).reference if stage not in (None, rep.stage_order[0]) else rep.stage_order[0]
    base_title = stages.get(base_key).title
    fig, axes = plt.subplots(1, len(batches), figsize=(9, 2.9), squeeze=False, sharey=True)
    for ax, b in zip(axes[0], batches):
        base = rep.rec(base_key, b)
        base_losses = np.asarray(base["losses"]) if base and base.get("losses") else None
        if stage is None or stage == base_key:
            keys = rep.stage_order if stage is None else [base_key]
            for key in keys:
                i = rep.stage_order.index(key)
                rec = rep.rec(key, b)
                if rec and rec.get("losses"):
                    ax.plot(rec["losses"], color=f"C{i}", lw=1.0, label=stages.get(key).title)
            later = [v for k in rep.stage_order for r in [rep.rec(k, b)] if r and r.get("losses")
                     for v in r["losses"][3:] if np.isfinite(v)]
            if later:  # the first steps (loss ~ ln V) would squash everything else
                ax.set_ylim(min(later) - 0.1, max(later) + 0.3)
            ylabel = "training loss (nats)"
        else:
            rec = rep.rec(stage, b)
            ax.axhspan(-tol, tol, color="C2", alpha=0.12, label=f"±{tol:g} nats tolerance")
            ax.axhline(0, color="grey", lw=0.6)
            if rec and rec.get("losses") and base_losses is not None:
                n = min(len(rec["losses"]), len(base_losses))
                ax.plot(np.asarray(rec["losses"][:n]) - base_losses[:n], color="C3", lw=1.0,
                        label=f"{stages.get(stage).title} − {base_title}")
            else:
                ax.text(0.5, 0.5, f"no {base_title} loss\nat this batch size" if rec and rec.get("losses")
                        else "no loss curve", ha="center", va="center", transform=ax.transAxes, fontsize=8)
                ax.set_xticks([])
            ylabel = f"loss − {base_key} loss (nats)"
        ax.axvline(rep.params["run"]["warmup_steps"] - 0.5, color="grey", lw=0.6, ls=":")
        ax.set_title(f"B={b}", fontsize=9)
        ax.set_xlabel("step (dotted: end of warm-up)")
    axes[0][0].set_ylabel(ylabel)
    handles, labels = [], []
    for ax in axes[0]:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, fontsize=7,
                   bbox_to_anchor=(0.5, -0.1))
    return _save(fig, rep, f"loss_{stage or 'all'}")


def title_md(rep: Report) -> str:
    dev = rep.env["device"]
    when = max((r.get("finished_at") or "" for r in rep.records), default="") or ""
    sub = (f"Profile **{rep.params['name']}** · device **{dev['name']}** ({dev['backend']}) · "
           f"PyTorch {rep.env.get('torch')}" + (f" · CUDA {rep.env['cuda']}" if rep.env.get("cuda") else ""))
    if when:
        sub += f" · measured {when[:10]}"
    return (f"# GPT-2 (124M-class) training step: what each optimisation lever buys\n\n{sub}\n\n"
            f"Each stage adds one lever to the one before ({' → '.join(_titles(rep))}) and is timed on the "
            "same model, seed and data at every batch size. Every number below was measured by this tool "
            "on the device named above.")


def failures_md(rep: Report, failures: list[str]) -> str:
    lines = [f"* notebook failed: `{f}`" for f in failures]
    lines += [f"* {r['stage_title']} B={r['batch_size']}: **error**: {_short(r.get('reason'))[:400]}"
              for r in rep.records if r["status"] == "error"]
    if not lines:
        return ""
    return "**Failures in this run** (the rest of the report is still valid):\n\n" + "\n".join(lines)
