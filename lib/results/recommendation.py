"""The recommended configuration as data: what `make report` writes to reports/<gpu>/recommended.json
(its switches, the code that applies them, micro-batch and accumulation for GPT-2's global batch, what
it measured, and the software and code it was measured with), for lib/optimal.py to hand to a
training script. Everything here is read from the report (a lib/report Report, not imported: the layers import only
downward); nothing is a rule."""

from __future__ import annotations

from lib.core import stages
from lib.results import decide, decisions, store

FILE = "recommended.json"
SCHEMA = 3  # 3: the top level is the host's recipe (gpus x micro_batch x accumulation_steps), one_gpu beside it;
# 2 held the one-GPU recipe at the top level on every host; 1 carried batch_size beside it
SOFTWARE = ("torch", "cuda", "cudnn", "cublas", "driver", "python", "hip")


def applied_switches(key: str) -> list[str]:
    """The code lines that produce stage `key`, in the order step.build applies them: every
    stage's switch along its lineage (the baseline's only pins FP32 behaviour), torch.compile last,
    since it wraps the model after every change to it (torchao's conversions included)."""
    keys = [k for k in decide.lineage(key)[1:] if stages.get(k).switch]
    return [stages.get(k).switch for k in sorted(keys, key=lambda k: k == "compile")]


def record(rep) -> dict | None:
    """The recommendation as recommended.json holds it: the recipe of the report's decisions as the host trains it
    (one stage; GPUs x micro-batch x accumulation steps at the global batch, and the one-GPU recipe beside it), its
    switches and code, what it measured, and the software and code it was measured with; None where no recipe."""
    r = rep.decided["recipe"]
    if r is None:
        return None
    st = stages.get(r["stage"])
    switches = {k: v for k, v in st.identity().items() if k not in ("key", "peak")}
    alone, host = r["micro_batch_alone"], r["host"]
    one_gpu = {
        "gpus": 1,
        "micro_batch": r["micro_batch"],
        "accumulation_steps": r["accumulation"],
        "tokens_per_s": r["tokens_per_s"],
        "as_trained": r["measured_as_trained"],
        "range": [r["recipe"]["lo"], r["recipe"]["hi"]] if r["recipe"] else [alone["lo"], alone["hi"]],
        "processes": (r["recipe"] or alone)["n"],
        "vs_canonical": r["ratio"],
        "mfu_bf16": r["mfu_bf16"],
        "mem_allocator_bytes": r["mem_allocator_bytes"],
        "mem_device_peak_bytes": r["mem_device_peak_bytes"],
    }
    # The top level is what a team trains with on this host: every GPU of it where DDP was measured (the recipe's
    # `host` point, micro-batch x accumulation x GPUs = the global batch), else the one-GPU recipe.
    trains = (
        {
            "gpus": host["gpus"],
            "micro_batch": host["micro_batch"],
            "accumulation_steps": host["accumulation"],
            "tokens_per_s": host["tokens_per_s"],
            "as_trained": True,
            "efficiency": host["efficiency"],
            "mfu_bf16": host["mfu_bf16"],
            "mem_device_peak_bytes": host["mem_device_peak_bytes"],
        }
        if host
        else one_gpu
    )
    return {
        "schema": SCHEMA,
        "profile": rep.params.name,
        "device": rep.env["device"].get("name"),
        "gpus": trains["gpus"],
        "stage": st.key,
        "title": st.title,
        "switches": switches,
        "code": applied_switches(st.key),
        "micro_batch": trains["micro_batch"],
        "accumulation_steps": trains["accumulation_steps"],
        "seq_len": r["seq_len"],
        "global_batch_tokens": r["global_batch_tokens"],
        "measured": {k: v for k, v in trains.items() if k not in ("gpus", "micro_batch", "accumulation_steps")},
        "one_gpu": one_gpu,
        "ddp": r["ddp"],
        "software": {
            **{k: rep.env.get(k) for k in SOFTWARE if rep.env.get(k) is not None},
            "packages": rep.env.get("packages") or {},
        },
        "code_commits": store.code_commits(rep.run)[0],
        "runs_without_commit": store.code_commits(rep.run)[1],
        "report": f"reports/{rep.dir.name}/report.pdf",
    }


def write(rep) -> dict | None:
    """Write the report's decisions (decisions.json) and recommended.json beside it (or remove a stale
    recommended.json where there is no recipe any more). Returns what recommended.json holds."""
    store.write_atomic(rep.dir / decisions.FILE, rep.decided)
    rec, path = record(rep), rep.dir / FILE
    if rec is None:
        path.unlink(missing_ok=True)
    else:
        store.write_atomic(path, rec)
    return rec
