"""The executive summary's first box, what a team lead acts on in a minute (at most five lines:
turn on, skip, the recommendation, what it buys, what was not measured), and the report's terms,
defined once before the findings use them. Every line is read from the report's own records."""

from __future__ import annotations

import html
import re

import pandas as pd

from lib.core import record, stages
from lib.report import ablation_view, fidelity_view, frontier_view, parity_view, size_sweep_view
from lib.report.loader import ADOPT_ABOVE, Report, mfu_bf16, recommended, signed_pct, span, widest
from lib.results import decide, parity

MAX_LINES = 5

GLOSSARY = (
    "**Terms.** *B*: sequences per micro-batch, each of T tokens. *MFU* (model FLOPs utilisation): the model's "
    "training FLOPs per second (6N + 12·L·d·T per token) over the GPU's datasheet dense peak; quoted against the "
    "bf16 peak for every stage, and against the stage's own precision beside it. *CV*: coefficient of variation "
    "of the timed steps (standard deviation ÷ mean). *Allocator*: PyTorch's caching allocator, which reserves "
    "device memory beyond the live tensors. *SDPA*: PyTorch's fused attention, "
    "`torch.nn.functional.scaled_dot_product_attention`. *nats*: the unit of the cross-entropy loss "
    "(natural logarithm). *Within noise*: closer than the spread measured between fresh processes."
)


def _turn_on(rep: Report) -> str | None:
    """The levers of the leave-one-out (around the recommendation when it was measured) that pay
    beyond noise, largest first, or without which the batch does not fit; its batch and processes named."""
    full, rows = ablation_view.ablation_rows(rep)
    gains = sorted((r for r in rows if r["worth"] is not None and r["worth"] > 0), key=lambda r: -r["worth"])
    paying = [r for r in gains if _pays(r)]
    unjudged = [r for r in gains if r.get("within_noise") is None]  # timed on another machine: offset not measured
    fits = [r["lever"] for r in rows if r["record"].get("status") == record.Status.OOM]
    predicted = [r["lever"] for r in rows if record.is_predicted_oom(r["record"])]  # from the matrix, not run
    # levers whose leave-one-out has no record (a run cut off before it): named, never silently dropped
    unmeasured = [r["lever"] for r in rows if r["record"].get("status") == ablation_view.NOT_MEASURED]
    if not paying and not fits and not predicted and not unjudged:
        return f"**Turn on:** not decided: no leave-one-out record for {', '.join(unmeasured)}." if unmeasured else None
    batch, n = full["batch_size"], full.get("processes", {}).get("n", 1)

    def worth(r):  # where the stage that adds the lever was neutral in the matrix, say so beside its worth here
        key = ablation_view.row_stage(rep, r)
        effect = decide.lever_effect(rep.df, key) if key else None
        neutral = (
            effect is not None
            and not effect["values"].empty
            and (fidelity_view.noise_note(rep, key) or effect["median"] < ADOPT_ABOVE)
        )
        name, needs = lever_parts(r["lever"])
        return (
            f"{name} {signed_pct(r['worth'])}"
            + (f", neutral in the stage matrix at {effect['median']:.2f}×" if neutral else "")
            + needs
        )

    # One sentence per kind of lever, items apart by semicolons: page 1 nests no parentheses (issue 33).
    parts = [f"{'; '.join(worth(r) for r in paying)}." if paying else ""]
    if unjudged:
        parts.append(
            "Not judged against noise, because the rows without them were timed on another machine than the row "
            "with every lever and the offset between the machines was not measured: "
            + "; ".join(worth(r) for r in unjudged)
            + "."
        )
    # "Needed as well" and the levers after the colon: "without any one of these" read as the paying levers before it
    if fits:
        parts.append(
            f"Needed as well, since B={batch} does not fit without any one of them: {'; '.join(map(plain_lever, fits))}."
        )
    if predicted:
        parts.append(
            f"{plain_lever(predicted[0])} is needed as well: the matrix predicts B={batch} would not fit without it, "
            "so it was not run."
            if len(predicted) == 1
            else f"Needed as well, since the matrix predicts B={batch} would not fit without any one of them, so they "
            f"were not run: {'; '.join(map(plain_lever, predicted))}."
        )
    # Levers the recommendation keeps whose worth is within noise, or unjudged and not paying: named, so page 1
    # lists every switch its code has
    within = [r for r in rows if r["worth"] is not None and r.get("within_noise") is True]
    unjudged_loss = [r for r in rows if r["worth"] is not None and r["worth"] <= 0 and r.get("within_noise") is None]
    for words, quiet in (("Within noise", within), ("Not paying, and not judged against noise", unjudged_loss)):
        if quiet:
            parts.append(
                f"{words}, kept as the recommendation has them: " + "; ".join(quiet_item(r) for r in quiet) + "."
            )
    apart = ablation_view.ablation_calls_apart(full, rows)
    parts.append(
        f"Each figure is what {in_sentence(plain_lever(stages.get(full['stage']).title))} at B={batch} gives over the same without "
        f"that lever alone, leave-one-out: {'one process' if n == 1 else f'the median of {n} processes'} with all "
        "levers" + (f", timed {apart}" if apart else "") + "."
    )
    if unmeasured:
        parts.append(f"Worth not measured, no leave-one-out record: {', '.join(map(plain_lever, unmeasured))}.")
    return "**Turn on:** " + " ".join(p for p in parts if p)


def lever_parts(name: str) -> tuple[str, str]:
    """A lever's name without parentheses, for page 1, and what was left out with it: 'FP8 lm_head (torchao)' reads
    'FP8 lm_head by torchao', and a leave-one-out row's 'padded vocabulary (and FP8 lm_head (torchao), which needs
    it)' reads 'padded vocabulary' with ', with FP8 lm_head by torchao removed too, since that lever needs it' (its figure goes
    between the two)."""
    m = re.match(r"^(.*?) \(and (.*), which needs it\)$", name)
    base, needs = m.groups() if m else (name, "")

    def by(title: str) -> str:
        return re.sub(r"^([^()]*) \(([^()]+)\)$", r"\1 by \2", title)

    return by(base), (f", with {by(needs)} removed too, since that lever needs it" if needs else "")


def plain_lever(name: str) -> str:
    return "".join(lever_parts(name))


def in_sentence(name: str) -> str:
    """A stage title inside a sentence: 'Loss-only forward' reads 'loss-only forward'; 'FP8 lm_head' stays."""
    return name[0].lower() + name[1:] if name[1:2].islower() else name


def quiet_item(row: dict) -> str:
    name, needs = lever_parts(row["lever"])
    return f"{name} {signed_pct(row['worth'])}{needs}"


def _pays(row: dict) -> bool:
    """A leave-one-out row whose lever pays beyond the measured noise."""
    return row["worth"] is not None and row["worth"] > 0 and row.get("within_noise") is False


def _paying(rep: Report) -> set[str]:
    """The stages whose lever the leave-one-out at the recommendation finds paying beyond noise (the Turn-on line)."""
    return {ablation_view.row_stage(rep, r) for r in ablation_view.ablation_rows(rep)[1] if _pays(r)}


def _undecided_and_faster(rep: Report, key: str, effect: dict) -> bool:
    """A lever faster than the stage before it beyond noise whose parity test could decide neither way: not
    adopted, yet not a lever to skip (a longer test may let it in)."""
    test = parity_view.rejected(rep).get(key) or {}
    faster = not effect["values"].empty and effect["median"] > 1 and not fidelity_view.noise_note(rep, key)
    return test.get("verdict") == parity.UNDECIDED and test.get("protocol") != "earlier" and faster


def _skip(rep: Report) -> str | None:
    """Levers measured slower beyond noise, or whose loss did not hold; not one the leave-one-out at the
    recommendation finds paying (the Turn-on line names it, with its matrix figure beside it). A faster lever
    whose parity test stopped undecided is named apart, under Not yet, with its speed: page 1 put it beside the
    slower levers as if it were one."""
    out, later, pays, paying = [], [], size_sweep_view.pays_from(rep), _paying(rep)
    for key in stages.single_gpu(rep.stage_order)[1:]:
        st, effect = stages.get(key), decide.lever_effect(rep.df, key)
        if key in paying and key not in parity_view.rejected(rep):
            continue
        speed = (
            f"{span(effect['values'].values)} of {stages.get(effect['previous']).title}"
            if not effect["values"].empty
            else ""
        )
        # "title: reason", never "title (reason)": titles carry brackets of their own, and page 1 nests none
        if why := parity_view.loss_reason(rep, key):
            if _undecided_and_faster(rep, key, effect):
                later.append(f"{st.title}: {speed} in the matrix, but its {why}")
            else:
                out.append(f"{st.title}: {why}")
        elif not effect["values"].empty and effect["median"] < 1 and not fidelity_view.noise_note(rep, key):
            larger = f", the size sweep: {pays[st.title]}" if st.title in pays else ""
            out.append(f"{st.title}: {speed}{larger}")
    parts = [f"**Skip here:** {'; '.join(out)}." if out else "", f"**Not yet:** {'; '.join(later)}." if later else ""]
    return " ".join(p for p in parts if p) or None


def _recommended(rep: Report, best: dict) -> str:
    p = best["processes"]
    mfu = mfu_bf16(rep, best.get("mfu"), best.get("peak_precision"))
    return (
        f"**Recommended:** {best['stage_title']} at B={best['batch_size']}: {p['median']:,.0f} tokens/s"
        + (f" (median of {p['n']} processes)" if p["n"] > 1 else "")
        + (f", MFU {mfu * p['median'] / best['tokens_per_s'] * 100:.1f} % of the bf16 peak" if mfu else "")
        + (f", allocator peak {best['mem_allocator_bytes'] / 2**30:.1f} GiB" if best.get("mem_allocator_bytes") else "")
        + "."
    )


def _buys(rep: Report, best: dict) -> str | None:
    """Against the canonical trainer at GPT-2's batch where the recipe was measured, else against
    the FP32 baseline at the recommendation's batch size (the basis named either way)."""
    rows = {r["role"]: r for r in frontier_view.recipe_rows(rep)}
    mine, plain = rows.get("recommended"), rows.get("baseline")
    if mine and plain:
        b = rep.params.evidence.baseline
        # its uncertainty: the ratio's range over every pair of the two sides' processes
        span = (
            f"; {mine['min'] / plain['max']:.3f}× to {mine['max'] / plain['min']:.3f}× over every pair of their processes"
            if mine["n"] > 1 and plain["n"] > 1
            else ""
        )
        return (
            f"**What it buys:** at {frontier_view.micro_steps_text(mine)}, "
            f"{mine['median'] / plain['median']:.3f}× the canonical trainer "
            f"({stages.get(b.stage).title} at B={b.batch_size} in a plain nanoGPT-form loop) at GPT-2's "
            f"{rep.params.evidence.global_batch_tokens:,}-token batch, measured in the same sitting "
            f"({mine['median']:,.0f} against {plain['median']:,.0f} tokens/s{span}; the harness by its median step, "
            "the plain loop by its wall-clock mean)." + _recipe_batch(rep, best, mine)
        )
    base = rep.rec(rep.stage_order[0], best["batch_size"])
    if base and base.get("status") == record.Status.OK:
        return (
            f"**What it buys:** {best['processes']['median'] / base['tokens_per_s']:.2f}× "
            f"{stages.get(rep.stage_order[0]).title} at the same B={best['batch_size']}."
        )
    return None


def _recipe_batch(rep: Report, best: dict, mine: dict) -> str:
    """Why the recipe's micro-batch is not the recommendation's, where it is not (a reviewer: page 1 recommended B=96
    and priced B=128 × 4 without saying why)."""
    if mine["batch"] == best["batch_size"] or rep.params.micro_steps(best["batch_size"]):
        return ""
    return (
        f" B={best['batch_size']} does not divide that batch, so the recipe trains the fastest verified micro-batch "
        f"that does, B={mine['batch']}."
    )


def _all_gpus(rep: Report) -> str | None:
    """On a host of several GPUs, what DDP gave there: the most GPUs measured, and the scaling efficiency against the
    one-GPU figure its record names (the recipe in the same sitting)."""
    multi = rep.ok()[rep.ok()["stage"].map(stages.is_multi_gpu)]
    if multi.empty:
        return None
    r = widest(multi)
    eff = r["scaling_efficiency"]
    return (
        f"**On all {int(r['world_size'])} GPUs** with DDP, B={r['batch_size']}"
        + (f" × {int(r['micro_steps'])} micro-steps" if (r["micro_steps"] or 1) > 1 else "")
        + f" per GPU: {r['tokens_per_s']:,.0f} tokens/s"
        + (f", a scaling efficiency of {eff * 100:.1f} % against one GPU" if not pd.isna(eff) else "")
        + (f" ({r['single_gpu_tokens_per_s']:,.0f} tokens/s)" if not pd.isna(r["single_gpu_tokens_per_s"]) else "")
        + "."
    )


def _not_measured(rep: Report) -> str | None:
    """Stages of the report with no record at all, each with the reason run.json gives (a run
    stopped in that chapter), else that no run reached it."""
    runs = [rep.run or {}, *((rep.run or {}).get("earlier_runs") or [])]
    failures = [f for r in runs for f in r.get("failures") or []]

    def why(key):
        said = [f.split(": ", 1)[1] for f in failures if f.startswith(f"{key}: ")]
        return said[0] if said else "no run reached it"

    missing = [f"{stages.get(k).title} ({why(k)})" for k in rep.stage_order if not (rep.df["stage"] == k).any()]
    return ("**Not measured in this report:** " + "; ".join(missing) + ".") if missing else None


def lines(rep: Report) -> list[str]:
    best = recommended(rep)
    if best is None:
        return [
            "**No recommendation:** no configuration completed with its loss verified; the findings below say what ran."
        ]
    # what was not measured outranks the several-GPU line where the box is full
    out = [_turn_on(rep), _skip(rep), _recommended(rep, best), _buys(rep, best), _not_measured(rep), _all_gpus(rep)]
    return [line for line in out if line][:MAX_LINES]


def code_lines(rep: Report) -> list[tuple[str, str]]:
    """The recommendation as the code to paste: (comment, code) for each lever on its way from the baseline,
    in order of worth, each comment saying what leaving the lever out cost in the leave-one-out (a lever
    without which the batch does not fit first). Build order where the leave-one-out was not measured."""
    best = recommended(rep)
    if best is None:
        return []
    full, rows = ablation_view.ablation_rows(rep)
    by_stage = {k: r for r in rows if (k := ablation_view.row_stage(rep, r))}
    keys = [k for k in decide.lineage(best["stage"])[1:] if stages.get(k).switch]

    def rank(k: str) -> tuple:  # does not fit without it; pays beyond noise; the rest by worth; no worth at all
        r = by_stage.get(k)
        if r is not None and record.cannot_fit(r["record"]):
            return (0, 0.0)
        if r is None or r["worth"] is None:
            return (3, 0.0)
        return (1 if _pays(r) else 2, -r["worth"])

    def comment(k: str) -> str:
        r, title = by_stage.get(k), stages.get(k).title
        if r is None:
            return f"# {title}: not in the leave-one-out"
        if r["record"].get("status") == ablation_view.NOT_MEASURED:
            return f"# {title}: worth not measured (no leave-one-out record)"
        worth = ablation_view.worth_text(r, full["batch_size"])
        if worth is None:
            return f"# {title}: worth unknown, its leave-one-out {r['record'].get('status', '').replace('_', ' ')}"
        return f"# {title}: {worth}{lever_parts(r['lever'])[1]}"  # a joint row says what went with it

    return [(comment(k), stages.get(k).switch) for k in sorted(keys, key=rank)]


def code_html(rep: Report) -> str:
    """Page 1's code: code_lines as one block to paste, torch.compile applied last whatever its worth."""
    pairs = code_lines(rep)
    if not pairs:
        return ""
    head = "# The recommendation's levers in order of worth, not of application: torch.compile wraps the model, after the rest.\n"
    body = "\n".join(f"{c}\n{code}" for c, code in pairs)
    return f'<pre class="page-one-code"><code>{html.escape(head + body)}</code></pre>'


def box_html(rep: Report) -> str:
    """The box, markdown bold turned into HTML (the box is raw HTML so the PDF keeps it together)."""

    def md(text: str) -> str:
        parts = html.escape(text).split("**")
        return "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))

    items = "".join(f"<li>{md(line)}</li>" for line in lines(rep))
    return f'<div class="summary-box"><ul>{items}</ul></div>'
