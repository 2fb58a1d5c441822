"""*How the frontier reads*: the SDPA backends forced one by one (flash chapter), cut-cross-
entropy's default gradient filter against its exact form (fused cross-entropy chapter), and the
recommendation measured as it would be trained, at GPT-2's global batch against the canonical
trainer (batch-sweep chapter; the leave-one-out beside it is lib/report/ablation_view.py). From the
report folder's records only."""

from __future__ import annotations


from lib.core import config, stages
from lib.core.kernel_categories import CATEGORIES
from lib.report import formats as fmt
from lib.report.evidence_view import none, ok, table
from lib.report.fidelity_view import repeats_rule
from lib.report.loader import Report, gib, recommended, short
from lib.results import decide, recipe_decision

# This project's aim for a profile (about 54 % MFU of the H100's bf16 dense peak), shown as a distance.
TARGET_TOKENS_PER_S = {"h100": 620_000}


def sdpa_html(rep: Report) -> str:
    forced = rep.evidence["sdpa"]
    if not forced:
        return none("The SDPA backends were not measured one by one for this report.")
    batch = forced[0]["batch_size"]
    default = rep.rec("flash", batch)
    rows = []
    if ok(default):
        rows.append(
            {
                "SDPA backend": f"PyTorch's choice ({default.get('sdpa_backend') or 'unknown'})",
                "ms/step": fmt.ms(default["median_ms"]),
                "tok/s": fmt.tok(default["tokens_per_s"]),
                "× PyTorch's choice": "1.00×",
                "allocator GiB": gib(default.get("mem_allocator_bytes")),
            }
        )
    for r in forced:
        name = r.get("variant", "").removeprefix("SDPA ")
        if not ok(r):
            rows.append(
                {
                    "SDPA backend": f"{name} (forced)",
                    "ms/step": r["status"].upper().replace("_", " "),
                    "tok/s": short(r.get("reason")),
                    "× PyTorch's choice": "",
                    "allocator GiB": "",
                }
            )
            continue
        rows.append(
            {
                "SDPA backend": f"{name} (forced)",
                "ms/step": fmt.ms(r["median_ms"]),
                "tok/s": fmt.tok(r["tokens_per_s"]),
                "× PyTorch's choice": fmt.times(r["tokens_per_s"] / default["tokens_per_s"]) if ok(default) else "",
                "allocator GiB": gib(r.get("mem_allocator_bytes")),
            }
        )
    return table(rows) + (
        f'<p class="note">The flash stage at B={batch}, one process each; the backend that ran is '
        "read off the dispatched op of one forward.</p>"
    )


def ce_filter_html(rep: Report) -> str:
    if not config.runs_evidence(rep.params, "ce_filter"):
        return none("cut-cross-entropy's default gradient filter is measured at DEPTH=full only (page 1 says so).")
    filtered = [r for r in rep.evidence["variants"] if r.get("variant") == "default gradient filter"]
    if not filtered:
        return none("cut-cross-entropy's default gradient filter was not measured for this report.")
    f = filtered[0]
    exact, ref = rep.rec("fused_ce", f["batch_size"]), rep.rec(decide.previous_stage("fused_ce"), f["batch_size"])
    rows = []
    for label, r in (
        ("exact (filter_eps=None, the stage)", exact),
        ("library default (filter_eps='high')", f),
        ("plain cross-entropy (torch.compile, the stage it is added to)", ref),
    ):
        if not r:
            continue
        ran = ok(r)
        rows.append(
            {
                "loss": label,
                "B": r["batch_size"],
                "tok/s": fmt.tok(r["tokens_per_s"]) if ran else r["status"].upper(),
                "final loss": fmt.loss(r["final_loss"]) if ran and r.get("final_loss") is not None else "",
                "allocator GiB": gib(r.get("mem_allocator_bytes")),
            }
        )
    return table(rows) + (
        '<p class="note">Same batches, same initial weights; the final loss is the mean of the last '
        f"{rep.params.run.final_loss_window} training steps.</p>"
    )


# What the recipe's ratio sets side by side, said wherever the ratio is (a reviewer: the two sides were timed by
# different statistics; recipe_decision.recipe_sides now sets them side by side by their mean steps)
RECIPE_BASIS = (
    "tokens/s: each side's mean step, the harness's CUDA-event steps and the plain loop's wall clock, as nanoGPT's"
)
LABELS = {
    "recommended": "fastest verified configuration (this harness)",
    "baseline-harness": "canonical trainer's configuration (this harness)",
    "baseline": "canonical trainer's configuration (plain loop)",
}


def recipe_html(rep: Report) -> str:
    """The recipe's sides (recipe_decision.side_rows: the recommendation, the baseline configuration in this harness
    and in the plain loop, each at the global batch), tokens/s as median, min and max over its processes, each
    process's from its mean step (RECIPE_BASIS)."""
    rows = recipe_decision.side_rows(rep.decided["recipe"])
    if not rows:
        return none("The recipe at the global batch was not measured for this report.")
    base = next((r for r in rows if r["role"] == "baseline"), None)
    seq = rep.params.run.seq_len
    shown = [
        {
            "configuration": LABELS[r["role"]],
            "stage": stages.get(r["stage"]).title,
            "micro-batch × steps": f"{r['batch']} × {r['micro_steps']}",
            "tokens/step": fmt.count(r["batch"] * r["micro_steps"] * seq),
            "tok/s (median, min–max)": f"{fmt.tok(r['median'])} ({fmt.tok(r['min'])}–{fmt.tok(r['max'])}), {r['n']} processes",
            "× plain loop": fmt.times(r["median"] / base["median"], 3) if base else "",
        }
        for r in rows
    ]
    target = TARGET_TOKENS_PER_S.get(rep.params.name)
    note = (
        f"Every step is one optimizer update over {fmt.count(rep.params.evidence.global_batch_tokens)} tokens, "
        f"gradients accumulated over the micro-steps; {RECIPE_BASIS}; the processes of these rows alternate in "
        "the same sitting: two a side"
        f"{repeats_rule(rep.params.evidence)}."
    )
    best = next((r for r in rows if r["role"] == "recommended"), None)
    rec = recommended(rep)
    if best and rec and (rec["stage"], rec["batch_size"]) != (best["stage"], best["batch"]):
        steps = rep.params.evidence.global_batch_tokens / (rec["batch_size"] * seq)
        note += (
            f" The first row was measured for another configuration than the recommendation, B={rec['batch_size']} "
            f"({fmt.count(steps, 2)} micro-steps): it speaks for its own configuration only."
        )
    if target and best:
        note += (
            f" This project's aim for the device, {fmt.tok(target)} tok/s (about 54 % MFU of the bf16 dense peak), "
            f"is {fmt.times(target / best['median'])} the first row's median."
        )
    return table(shown, "matrix keep-together") + f'<p class="note">{note}</p>'  # two rows split 1 and 1 over pages


def versus_html(rep: Report, key: str, others: tuple[str, ...]) -> str:
    """`key` beside its rivals at each shared batch: tokens/s (median over processes), memory, profiled kernel time."""
    keys, tps = [k for k in (*others, key) if k in rep.stage_order], decide.throughputs(rep.decisions)
    batches = sorted({r["batch_size"] for r in rep.records if r["stage"] == key})
    rows = []
    for b in batches:
        base = decide.median_of(tps, keys[0], b, r0["tokens_per_s"]) if ok(r0 := rep.rec(keys[0], b)) else None
        for k in keys:
            r = rep.rec(k, b)
            if not ok(r):
                continue
            cats, t = (
                (r.get("kernel_profile") or {}).get("categories") or {},
                decide.median_of(tps, k, b, r["tokens_per_s"]),
            )
            rows.append(
                {
                    "stage": stages.get(k).title,
                    "B": b,
                    "tok/s": fmt.tok(t),
                    f"× {stages.get(keys[0]).title}": fmt.times(t / base) if base else "",
                    **{f"{c} ms": fmt.ms(cats[c]) if c in cats else "" for c in CATEGORIES},
                    "allocator GiB": gib(r.get("mem_allocator_bytes")),
                }
            )
    if not rows:
        return none(f"{stages.get(key).title} has no measurement to compare in this report.")
    return table(rows) + (
        '<p class="note">Kernel milliseconds of one profiled training step by category '
        "(lib/core/kernel_categories.py names the rules): where the step's time moved.</p>"
    )
