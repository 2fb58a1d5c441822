"""The leave-one-out ablation's table: each lever of a configuration as the stage switches that turn it
off, and which levers need another. A stage is data (lib/core/stages.py); what removing one of its
levers means is data here, and lib/run/recipe.py measures it."""

from __future__ import annotations

from lib.core.stages import FP8_LOSSES

# Each lever of a configuration, as the stage switch that turns it off (name -> overrides). Listed
# in the order the stages add them; a lever the recommended stage does not use is skipped.
LEVERS = {
    "TF32": {"tf32": False},
    "BF16 autocast": {"autocast": None},
    "SDPA attention": {"attention": "naive", "sdpa_backend": None},
    "padded vocabulary": {"padded_vocab": False},
    "fused AdamW": {"fused_adamw": False},
    "torch.compile": {"compile": False, "compile_mode": None},
    "max-autotune": {"compile_mode": None},
    "FP8 (hand-written)": {"fp8": False},
    "FP8 (torchao)": {"float8": None},
    "fused linear cross-entropy": {"loss": "cross_entropy"},
    "BF16 residual stream": {"residual_dtype": None},
    "loss-only forward": {"return_logits": True},
    "FP8 lm_head (torchao)": {"fp8_lm_head": None},
    "FP8 classifier (fused)": {"loss": "cross_entropy"},
}
# Levers that share a switch: each is the lever only while the switch holds one of its values.
WHEN = {
    "fused linear cross-entropy": {"loss": ("cut_cross_entropy", "cut_cross_entropy_filtered")},
    "FP8 classifier (fused)": {"loss": FP8_LOSSES},
}


# Levers that cannot run without another: removing the one removes them too (a bf16 residual stream
# into fp32 Linear layers is a dtype error; torch._scaled_mm needs the lm_head's rows a multiple of 16).
NEEDS = {
    "BF16 residual stream": "BF16 autocast",
    "FP8 lm_head (torchao)": "padded vocabulary",
    "FP8 classifier (fused)": "padded vocabulary",
}


def _uses(stage, name: str) -> bool:
    if name in WHEN:
        return all(getattr(stage, k) in values for k, values in WHEN[name].items())
    return any(getattr(stage, k) != v for k, v in LEVERS[name].items())


def levers_of(stage) -> dict[str, dict]:
    """The levers `stage` uses: those whose overrides change at least one of its switches (max-autotune
    only where a compile mode is set, so removing torch.compile is one lever, not two). A lever that
    others need is removed with them, and its name says so."""
    out = {}
    for name, off in LEVERS.items():
        if not _uses(stage, name) or (name == "torch.compile" and stage.compile_mode):
            continue
        with_it = [d for d, needed in NEEDS.items() if needed == name and _uses(stage, d)]
        label = name + (f" (and {', '.join(with_it)}, which needs it)" if with_it else "")
        out[label] = {**off, **{k: v for d in with_it for k, v in LEVERS[d].items()}}
    return out


def introduced_by(label: str, chain: list):
    """The first stage of `chain` (a lineage, first stage first) that uses the lever a levers_of label names (the
    lever itself, not those that need it); None where none does or the label names no lever."""
    name = next((n for n in LEVERS if label == n or label.startswith(f"{n} (and ")), None)
    return next((s for s in chain if _uses(s, name)), None) if name else None
