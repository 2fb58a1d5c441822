"""The report's method section, in words: the model, how each configuration is isolated and timed,
MFU, memory, the divergence check, the parity test, the cross-check and the repeats, the kernel profile and
energy, each computed from the report's params and records."""

from __future__ import annotations

import re

from lib.core import data, stages
from lib.core.paths import NOTEBOOKS
from lib.report import formats as fmt
from lib.report import fidelity_view, long_view, sequential_view, tables
from lib.report.loader import Report
from lib.results import stats

TEXT = NOTEBOOKS / "text" / "method.md"  # the section's words; the facts are filled in here


def method_md(rep: Report) -> str:
    """notebooks/text/method.md with the report's facts filled in."""
    r, m, ev = rep.params.run, rep.params.model, rep.params.evidence
    peaks = rep.params.peak_tflops
    facts = {
        "stages": tables.stages_md(rep),
        **{k: getattr(m, k) for k in ("n_layer", "n_head", "n_embd", "vocab_size", "padded_vocab_size")},
        **{k: getattr(r, k) for k in ("seq_len", "seed", "warmup_steps", "timed_steps", "final_loss_window")},
        **{k: fmt.setting(getattr(r, k)) for k in ("learning_rate", "weight_decay", "grad_clip", "loss_tolerance")},
        "init_note": _init_note(rep),
        "timer": "CUDA events around each step"
        if rep.on_gpu
        else "`time.perf_counter` around each step, after a device synchronize",
        # the recipe and the canonical trainer train GPT-2's whole batch a step (many micro-batches): fewer steps
        "recipe_steps": "; the recipe and the canonical trainer at the global batch: {warmup} + {timed} steps, each "
        "the whole batch".format(**steps)
        if (steps := (rep.decided.get("recipe") or {}).get("recipe_steps"))
        else "",
        "peaks": ", ".join(f"{k} {fmt.setting(v)}" for k, v in peaks.items()) + " TFLOP/s"
        if peaks
        else "none for this device, so MFU is n/a",
        "peak_by_stage": _by_stage(rep, "peak"),
        "gate_window": stats.LOSS_GATE_WINDOW,
        "loss_noise": fmt.loss(rep.loss_noise),
        "drift_from": f", between two processes of {rep.loss_noise_from}" if rep.loss_noise_from else "",
        "gate_reach": fmt.loss(r.loss_tolerance + rep.loss_noise),
        "loss_references": _by_stage(rep, "reference"),
        "parity_rule": sequential_view.rule(ev, r.seq_len, rep.on_gpu),
        "parity_steps": ev.parity_steps,
        "parity_passes": fmt.setting(ev.parity_passes),
        "test_batch": _test_batch(ev),
        "held_out_batches": ev.held_out_batches,
        "held_out_pct": int(data.HELD_OUT * 100),
        "shared_batch": _shared_batch(ev),
        "series": _series(rep),
        "claim_repeats": fidelity_view.claim_repeats_rule(ev),
        "repeats": fidelity_view.repeats_rule(ev),
        "noise": fidelity_view.noise_sentence(rep),
        "batch_tie": fidelity_view.batch_tie_rule(ev),
        "long_test": long_view.method_md(rep),
        "energy": _energy_method(rep),
    }
    return "\n" + TEXT.read_text(encoding="utf-8").format_map(facts)


# How things are measured, for the reader who checks (the HTML): the PDF keeps the rules that decide
# (stages, timing, MFU, the divergence check, the parity test, the cross-check, repeats, batch size).
# The bullets the PDF keeps (its one page of environment and method); the rest are the HTML report's.
BRIEF = ("Model", "Timing", "MFU", "Divergence check", "Parity test", "Long test", "Batch size")


def split(method: str) -> tuple[str, str]:
    """(the BRIEF bullets, the others) of method_md's text."""
    items = re.split(r"\n(?=\* \*\*)", method.strip())
    brief = [i for i in items if any(i.startswith(f"* **{k}**") for k in BRIEF)]
    return "\n".join(brief), "\n".join(i for i in items if i not in brief)


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
