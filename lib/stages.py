"""The stage registry: *what* each stage changes. Stages are cumulative: each one keeps every
switch of the stages before it and adds one lever. How a stage is timed lives in measure.py."""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Stage:
    key: str
    title: str
    lever: str              # one line: what this stage adds to the previous one
    tf32: bool = False      # torch.set_float32_matmul_precision("high")
    autocast: str | None = None  # autocast dtype name, or None for fp32 math
    attention: str = "naive"
    padded_vocab: bool = False
    fused_adamw: bool = False   # AdamW(fused=True): one kernel per step for all parameters
    compile: bool = False   # torch.compile(model), inductor's default mode
    fp8: bool = False       # the blocks' Linear layers run FP8 GEMMs (lib/fp8.py)
    peak: str = "fp32"      # which datasheet peak MFU is quoted against
    reference: str = "fp32"  # the stage whose loss this one must stay within tolerance of
    switch: str = ""        # the code this stage adds, shown in the appendix

    def not_applicable(self, device: dict) -> str | None:
        """Why this stage cannot run on `device` (a detect() record), or None if it can."""
        backend = device.get("backend")
        if self.key == "tf32" and backend in ("cuda", "rocm"):
            if backend == "cuda" and tuple(device.get("capability", (0, 0))) < (8, 0):
                return "TF32 tensor cores need compute capability 8.0 (Ampere) or newer"
        if self.key == "tf32" and backend == "mps":
            return "TF32 is an NVIDIA/AMD tensor-core mode; Apple GPUs have no equivalent"
        if self.fp8 and (backend != "cuda" or tuple(device.get("capability", (0, 0))) < (8, 9)):
            where = f"compute capability {'.'.join(map(str, device['capability']))}" \
                if backend == "cuda" and device.get("capability") else f"the {backend} backend"
            return f"FP8 tensor-core GEMMs need an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper, " \
                   f"Blackwell); this device has {where}"
        if self.key == "ddp" and (backend not in ("cuda", "rocm") or device.get("count", 1) < 2):
            return f"one {'GPU' if backend in ('cuda', 'rocm') else backend.upper() + ' device'} on this host: " \
                   "data parallelism needs two or more GPUs"
        return None


def _cumulative() -> list[Stage]:
    fp32 = Stage("fp32", "FP32 baseline", "fp32 storage and math, naive attention, vocab 50257",
                 switch='torch.set_float32_matmul_precision("highest")  # TF32 off: IEEE fp32 GEMMs')
    tf32 = replace(fp32, key="tf32", title="TF32", lever="fp32 GEMMs run on TF32 tensor cores",
                   tf32=True, peak="tf32",
                   switch='torch.set_float32_matmul_precision("high")  # allow TF32 in fp32 GEMMs')
    bf16 = replace(tf32, key="bf16", title="BF16 autocast", lever="forward/backward math in bfloat16",
                   autocast="bfloat16", peak="bf16",
                   switch="with torch.autocast(device_type, dtype=torch.bfloat16):\n"
                          "    logits, loss = model(x, y)")
    flash = replace(bf16, key="flash", title="Flash attention (SDPA)",
                    lever="fused scaled_dot_product_attention replaces the T x T softmax",
                    attention="sdpa",
                    switch="y = F.scaled_dot_product_attention(q, k, v, is_causal=True)")
    vocab = replace(flash, key="vocab", title="Vocab padded to 50304",
                    lever="lm_head/embedding rows padded to a multiple of 128",
                    padded_vocab=True,
                    switch="GPTConfig(vocab_size=50304)  # 47 rows that are never targets")
    # The levers after the classic five are judged against the vocab stage: BF16 autocast with
    # flash attention and the padded vocabulary, the configuration they are added to.
    fused = replace(vocab, key="fused", title="Fused AdamW", reference="vocab",
                    lever="AdamW updates every parameter in one fused kernel per step",
                    fused_adamw=True,
                    switch="torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=True)")
    compiled = replace(fused, key="compile", title="torch.compile",
                       lever="inductor fuses the elementwise, normalisation and loss kernels",
                       compile=True, switch="model = torch.compile(model)")
    fp8 = replace(compiled, key="fp8", title="FP8 linear layers",
                  lever="the blocks' Linear layers run FP8 GEMMs with per-tensor dynamic scales",
                  fp8=True,  # MFU stays quoted against the bf16 peak: the bar the recommendation must clear
                  switch="fp8.convert_linears(model.transformer.h)  # lib/fp8.py: e4m3 forward, e5m2 gradients")
    # DDP runs whichever single-GPU configuration measured fastest (runner.run_ddp); its own
    # switches here only describe it.
    ddp = replace(vocab, key="ddp", reference="vocab", title="DDP across the host's GPUs",
                  lever="data parallel over every GPU with torchrun, the per-GPU batch fixed",
                  switch="model = DistributedDataParallel(model)  # torchrun --nproc_per_node=<GPUs>")
    return [fp32, tf32, bf16, flash, vocab, fused, compiled, fp8, ddp]


STAGES: dict[str, Stage] = {s.key: s for s in _cumulative()}
ORDER = list(STAGES)


def get(key: str) -> Stage:
    if key not in STAGES:
        raise KeyError(f"unknown stage {key!r}; stages are: {', '.join(ORDER)}")
    return STAGES[key]
