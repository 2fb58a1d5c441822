"""The recommended configuration as data: what `make report` writes to reports/<gpu>/recommended.json
(its switches, the code that applies them, micro-batch and accumulation for GPT-2's global batch, what
it measured, and the software and code it was measured with), for lib/optimal.py to hand to a
training script. Everything here is read from the report; nothing is a rule."""

from __future__ import annotations

from lib.core import stages
from lib.report.frontier_view import recipe_rows
from lib.report.loader import Report, code_commits, mfu_bf16, recommended
from lib.results import decide, store

FILE = "recommended.json"
SCHEMA = 1
SOFTWARE = ("torch", "cuda", "cudnn", "cublas", "driver", "python", "hip")


def applied_switches(key: str) -> list[str]:
    """The code lines that produce stage `key`, in the order step.build applies them: every
    stage's switch along its lineage (the baseline's only pins FP32 behaviour), torch.compile last,
    since it wraps the model after every change to it (torchao's conversions included)."""
    keys = [k for k in decide.lineage(key)[1:] if stages.get(k).switch]
    return [stages.get(k).switch for k in sorted(keys, key=lambda k: k == "compile")]


def record(rep: Report) -> dict | None:
    """The recommendation as recommended.json holds it; None where the report has none."""
    best = recommended(rep)
    if best is None:
        return None
    st, p = stages.get(best["stage"]), best["processes"]
    switches = {k: v for k, v in st.identity().items() if k not in ("key", "peak")}
    # an older report (measurement method 1) has no global batch in its params
    seq_len, tokens = rep.params.run.seq_len, rep.params.evidence.global_batch_tokens
    recipe = next((r for r in recipe_rows(rep) if r["role"] == "recommended"), None) if tokens else None
    micro = recipe["batch"] if recipe else best["batch_size"]
    mfu = mfu_bf16(rep, best.get("mfu"), best.get("peak_precision"))
    return {
        "schema": SCHEMA,
        "profile": rep.params.name,
        "device": rep.env["device"].get("name"),
        "gpus": rep.env["device"].get("count") or 1,
        "stage": st.key,
        "title": st.title,
        "switches": switches,
        "code": applied_switches(st.key),
        "batch_size": best["batch_size"],
        "seq_len": seq_len,
        "global_batch": {
            "tokens": tokens,
            "micro_batch": micro,
            "accumulation_steps": tokens // (micro * seq_len) if tokens and tokens % (micro * seq_len) == 0 else None,
            "tokens_per_s": recipe["median"] if recipe else None,
            "note": (
                "measured at this micro-batch and accumulation (the report's recipe)"
                if recipe
                else "not measured at the global batch in this report"
            ),
        },
        "measured": {
            "tokens_per_s": p["median"],
            "processes": p["n"],
            "range": [p["lo"], p["hi"]],
            "mfu_bf16": mfu * p["median"] / best["tokens_per_s"] if mfu is not None else None,
            "mem_allocator_bytes": best.get("mem_allocator_bytes"),
            "mem_tensors_bytes": best.get("mem_tensors_bytes"),
            "joules_per_token": (best.get("energy") or {}).get("joules_per_token"),
        },
        "software": {
            **{k: rep.env.get(k) for k in SOFTWARE if rep.env.get(k) is not None},
            "packages": rep.env.get("packages") or {},
        },
        "code_commits": code_commits(rep)[0],
        "runs_without_commit": code_commits(rep)[1],
        "report": f"reports/{rep.dir.name}/report.pdf",
    }


def write(rep: Report) -> dict | None:
    """Write recommended.json beside the report (or remove a stale one where there is no
    recommendation any more). Returns what was written."""
    rec, path = record(rep), rep.dir / FILE
    if rec is None:
        path.unlink(missing_ok=True)
    else:
        store.write_atomic(path, rec)
    return rec
