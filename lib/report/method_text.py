"""The report's method section, in words: the model, how each configuration is isolated and timed,
MFU, memory, the divergence check, the parity test, the cross-check and the repeats, the kernel profile and
energy, each computed from the report's params and records."""

from __future__ import annotations

import re

from lib.core import data, stages
from lib.report import fidelity_view, long_view, sequential_view, tables
from lib.report.loader import Report
from lib.results import stats


def method_md(rep: Report) -> str:
    r, m = rep.params.run, rep.params.model
    peaks = rep.params.peak_tflops
    peak_txt = (
        ", ".join(f"{k} {v:g}" for k, v in peaks.items()) + " TFLOP/s"
        if peaks
        else "none for this device, so MFU is n/a"
    )
    timer = (
        "CUDA events around each step"
        if rep.on_gpu
        else "`time.perf_counter` around each step, after a device synchronize"
    )
    drift_from = f", between two processes of {rep.loss_noise_from}" if rep.loss_noise_from else ""
    return f"""
* **Stages**: {tables.stages_md(rep)}
* **Model**: GPT-2, {m.n_layer} layers, {m.n_head} heads, d={m.n_embd}, T={r.seq_len},
  vocabulary {m.vocab_size} (padded to {m.padded_vocab_size} in the vocab stage); AdamW
  (lr {r.learning_rate:g}, β=(0.9, 0.95), weight decay {r.weight_decay:g}), gradient clipping at {r.grad_clip:g}.
* **Isolation**: every (stage, batch) configuration runs in a fresh Python process, so memory peaks,
  allocator state and library workspaces never carry over. A process that compiles a shape an earlier one
  compiled loads inductor's kernels from its on-disk cache (a shorter first step); its timed steps run the
  same kernels. The model is initialised from seed
  {r.seed} on the CPU and every stage sees the same batches in the same order.
* **Initial weights**: {_init_note(rep)}
* **Timing**: {r.warmup_steps} warm-up steps (not counted), then {r.timed_steps} timed steps, {timer}.
  All batches are on the device before timing starts. We report the median, p10 and p90 of the step
  time and the coefficient of variation (CV = standard deviation / mean); tokens/s = B·T / median.
* **MFU** = FLOPs per token × tokens/s ÷ peak, with FLOPs per token = 6N + 12·L·d·T (N without
  position embeddings), against the bf16 dense peak for every stage, and beside it the peak of the precision
  the stage's MFU is quoted against (below). Peaks: {peak_txt}.
* **Peak by stage**: {_by_stage(rep, "peak")}; an FP8 form whose attention and other GEMMs stay in bf16 is quoted
  against the bf16 peak.
* **Compilation**: the first step of every configuration (which pays for `torch.compile`, cuBLAS
  heuristics and allocator growth) is timed on its own and reported as "first step"; it is a warm-up step.
* **Memory**, three layers: *tensors* = `max_memory_allocated` (live tensors at their peak),
  *allocator* = `max_memory_reserved` (what PyTorch's caching allocator held), *device* = memory in use
  on the device after the timed steps as `nvidia-smi` would show it (adds the CUDA context and library
  workspaces), and, in records that have it, the device's *peak* over the warm-up steps (NVML, sampled
  every 5 ms). On a CPU only the process's peak resident memory is known.
* **Divergence check**: every step after warm-up is compared with the stage's reference at the same batch
  size (same seed, same batches): a stage passes when the {stats.LOSS_GATE_WINDOW}-step moving average
  of the loss difference never leaves ±{r.loss_tolerance:g} nats; a gap beyond it by less than the drift of the
  same statistic between two processes of one configuration ({rep.loss_noise:.3f} nats here{drift_from}) is *within noise*, so
  the check catches only a departure larger than {r.loss_tolerance + rep.loss_noise:.3f} nats: it tells a diverging or broken
  stage from a working one, not a lever's effect on quality from run-to-run noise (the quality test decides that).
* **Loss references**: {_by_stage(rep, "reference")}. A divergence check's gap that one step's loss makes (the rest of
  the curve within half the tolerance) is reported as a *single-step spike* at that step; it fails the check all the
  same. "Final loss" is the mean of the last {r.final_loss_window} steps. The loss is computed as nanoGPT computes it, over every column
  of the logits (the padded ones included; they are never targets).
{{fidelity}}* **Kernel profile**: after the timed steps, one more training step under `torch.profiler`; device
  kernel time (on a CPU, operators' self time) grouped into GEMM, attention, cross-entropy,
  normalisation/elementwise, optimizer and other by launching aten op, else kernel name, with today's rules
  (`lib/core/kernel_categories.py`, applied when the report is drawn); shares are of busy kernel time, not step time.
* **Energy**: {_energy_method(rep)}
* **Failures are results**: an out-of-memory configuration is an OOM row, a NaN loss a DIVERGED row,
  a stage the device cannot run a "not applicable" row.
""".replace("{fidelity}", _fidelity_method(rep) + long_view.method_md(rep))


# How things are measured, for the reader who checks (the HTML): the PDF keeps the rules that decide
# (stages, timing, MFU, the divergence check, the parity test, the cross-check, repeats, batch size).
# The bullets the PDF keeps (its one page of environment and method); the rest are the HTML report's.
BRIEF = ("Model", "Timing", "MFU", "Divergence check", "Parity test", "Long test", "Batch size")


def split(method: str) -> tuple[str, str]:
    """(the BRIEF bullets, the others) of method_md's text."""
    items = re.split(r"\n(?=\* \*\*)", method.strip())
    brief = [i for i in items if any(i.startswith(f"* **{k}**") for k in BRIEF)]
    return "\n".join(brief), "\n".join(i for i in items if i not in brief)


def _fidelity_method(rep: Report) -> str:
    """The method of the parity run, the cross-check and the repeats, or why the report has none."""
    ev = rep.params.evidence
    if ev.parity_steps is None:  # a report's params.json from before the parity run (measurement method 1)
        return (
            f"* **Measurement method {rep.params.method}**: this report was measured before the one "
            "training-step core, the canonical loss path (its loss copied the logits to fp32 and sliced off "
            "the padding), the plain-loop cross-check, the repeats and the parity run existed; its figures "
            "carry none of them.\n"
        )
    length = (
        f"for the horizon, within {ev.parity_steps} steps and {ev.parity_passes:g} passes over the training text "
        "(the held-out loss reads what the passes do to both sides alike)"
    )
    return f"""* **Parity test**, the rule fixed before any number: {sequential_view.rule(ev, rep.params.run.seq_len, rep.on_gpu)}. Each run trains {length}, at {_test_batch(ev)} (each run's record names its batch).
* **Parity runs**: the FP8 classifier is set against the loss-only forward: built on the FP8 lm_head's stage, it
  replaces that lm_head, so the matrix's × prev. sets it over the FP8 lm_head and page 1 over the loss-only forward.
  nanoGPT's learning-rate shape (linear warm-up over the first quarter, cosine decay to a tenth),
  each side accumulating micro-batches of the largest batch the matrix timed it at that divides the test's batch
  (the same update); the
  held-out loss is read on {ev.held_out_batches} batches from the last {int(data.HELD_OUT * 100)} % of the corpus, which no run trains on.{_shared_batch(ev)}{_series(rep)}
* **Cross-check**: a plain training loop in nanoGPT's form (`lib/train/plain_loop.py`: its own model, only the
  data shared) runs beside the harness at the flash and vocab stages and at the configuration recommended
  when it ran (table below). Its figure is the wall time of its timed steps over their number, the host running ahead of
  the device as in nanoGPT's loop; it also times each step after `torch.cuda.synchronize()`, as
  build-nanogpt does.
* **Repeats and noise**: the recommended configuration, its runner-up and {fidelity_view.claim_repeats_rule(ev)}
  run in a second fresh process{fidelity_view.repeats_rule(ev)} (the section "Process-to-process spread" below says which);
  {fidelity_view.noise_sentence(rep)}
* **Batch size**, the tie rule fixed before any number: {fidelity_view.batch_tie_rule(ev)}
"""


def _test_batch(ev) -> str:
    """The batch a parity run trains at, as the report's params state the rule."""
    if getattr(ev, "parity_batch", None):
        return (
            f"B={ev.parity_batch}, fixed for every test and every GPU, before any sweep: only the stage whose test"
            " holds is swept, so a stage that cannot be recommended is never swept"
        )
    if getattr(ev, "parity_before_sweep", False):
        return (
            "the largest batch size the matrix timed the stage at, before any sweep: only the stage whose test holds"
            " is swept, so a stage that cannot be recommended is never swept"
        )
    when = "the report's first test began" if getattr(ev, "parity_chain_batch", False) else "it ran"
    return f"the batch size recommended when {when}"


def _shared_batch(ev) -> str:
    """The rule that puts a stage that takes over at the batch of the test before it, where the params state it."""
    if not getattr(ev, "parity_chain_batch", False) or getattr(ev, "parity_batch", None):
        return ""
    if getattr(ev, "parity_before_sweep", False):
        return (
            " A stage that takes over after a test that did not let its stage stand is tested at that test's batch,"
            " where the matrix timed it there: the tests of one report share a batch, and the sweep that follows the"
            " test that holds may recommend another."
        )
    return (
        " A stage that takes over after a test that did not let its stage stand is tested at that test's batch,"
        " where it was timed there, whatever batch the tie rule then recommends for it: the tests of one report share"
        " a batch."
    )


def _series(rep: Report) -> str:
    """How the parity runs shared processes, where the records say they did."""
    if not any(r.get("series") for r in rep.decisions if r.get("kind") == "parity"):
        return ""
    return (
        " The runs of one side in one round (the repeated seeds, then the others) share a process and its one"
        " compilation: each starts from its own seed's weights with an empty optimizer, as a process of its own"
        " would (each run's record names the process's first run). A side with FP8 GEMMs keeps a process a run:"
        " restarted that way, its runs did not reproduce their seeds on an H100."
    )


def _by_stage(rep: Report, fact: str) -> str:
    """One fact of every stage in the report, grouped by value, from the stage registry: which
    peak each stage's MFU is quoted against, or which stage its loss is held against."""
    groups: dict = {}
    for key in stages.single_gpu(rep.stage_order):
        st = stages.get(key)
        if fact == "reference" and st.reference == key:
            continue
        groups.setdefault(getattr(st, fact), []).append(st.title)
    name = (lambda v: f"{v} peak") if fact == "peak" else (lambda v: stages.get(v).title)
    verb = " for " if fact == "reference" else ": "
    return "; ".join(f"{name(v)}{verb}{', '.join(titles)}" for v, titles in groups.items()) or "none"


def _energy_method(rep: Report) -> str:
    found = [r["energy"] for r in rep.records if isinstance(r.get("energy"), dict)]
    measured = [e for e in found if e.get("energy_j")]
    if measured:
        return (
            f"GPU energy over the timed steps from {measured[0]['method']}, divided by the tokens trained "
            "in them (joules per token); average power = energy / elapsed time. Whole-board energy, "
            "as NVML reports it."
        )
    if found:
        return f"not measured on this device: {found[0].get('unavailable')}."
    return "not recorded for these results."


def _init_note(rep: Report) -> str:
    """Whether every stage really started from the same weights (checksums recorded per run)."""
    sums = {r["stage"]: r.get("init_checksum") for r in rep.records if r["status"] in ("ok", "diverged", "oom")}
    if not sums or any(v is None for v in sums.values()):
        return (
            "not verified for this report: its results were measured before the initial-weight checksum "
            "was recorded (and before a fix that gives the padded-vocabulary stage the same initial "
            "weights as the others), so the vocab stage's loss difference includes initialisation noise."
        )
    if len(set(sums.values())) == 1:
        return f"identical for every stage (checksum {next(iter(sums.values()))} over the real vocabulary)."
    groups = {}
    for stage, v in sums.items():
        groups.setdefault(v, []).append(stage)
    return (
        "**differ between stages**: "
        + "; ".join(", ".join(g) for g in groups.values())
        + ": their loss differences include initialisation noise."
    )
