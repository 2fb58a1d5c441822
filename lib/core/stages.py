"""The stage registry: *what* each stage changes. Stages are cumulative: each one keeps every
switch of the stages before it and adds one lever. How a stage's switches are applied lives in
step.py (the one training-step core); how a stage is timed in measure.py.

A stage is data in three parts: its switches (what a measurement depends on, and all that its
fingerprint covers), where it can run (backends, compute capability, devices), and its prose
(title, lever, the code switch shown in the report), which can change without re-measuring."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, fields, replace

SWITCHES = (
    "tf32",
    "autocast",
    "attention",
    "padded_vocab",
    "fused_adamw",
    "compile",
    "compile_mode",
    "fp8",
    "backend_flags",
    "devices",
    "loss",
    "float8",
    "sdpa_backend",
    "residual_dtype",
    "fp8_lm_head",
    "return_logits",
    "ddp_options",
)
ALL_BACKENDS = ("cuda", "rocm", "mps", "cpu")


@dataclass(frozen=True)
class Stage:
    key: str
    title: str
    lever: str  # one line: what this stage adds to the previous one
    switch: str = ""  # the code this stage adds, shown in the chapter and the appendix
    # --- switches: step.build applies them
    tf32: bool = False  # torch.set_float32_matmul_precision("high")
    autocast: str | None = None  # autocast dtype name, or None for fp32 math
    attention: str = "naive"
    sdpa_backend: str | None = None  # force one SDPA backend (sdpa_kernel); None: PyTorch's choice
    padded_vocab: bool = False
    fused_adamw: bool = False  # AdamW(fused=True): one kernel per step for all parameters
    compile: bool = False  # torch.compile(model)
    compile_mode: str | None = None  # torch.compile(model, mode=...); None: inductor's default
    fp8: bool = False  # the blocks' Linear layers run FP8 GEMMs (lib/train/fp8.py)
    float8: str | None = None  # torchao's float8 training recipe on the blocks' Linear layers
    fp8_lm_head: str | None = None  # torchao's float8 training recipe on the lm_head alone
    residual_dtype: str | None = None  # the residual stream's dtype; None: fp32 (what autocast leaves it)
    loss: str = "cross_entropy"  # or "cut_cross_entropy" (lm_head + loss fused, no logits in memory), "fp8_classifier"
    return_logits: bool = True  # False: the training forward returns the loss alone, no logits output
    backend_flags: tuple = ()  # (("torch.backends.cudnn.benchmark", True), ...): set before the model is built
    ddp_options: tuple = ()  # (("bucket_cap_mb", 100), ...): DistributedDataParallel's keyword arguments (multi-GPU)
    devices: str = "one"  # "one" GPU, or "all" of the host's, data parallel (ddp_launch.run_ddp)
    # --- what the report compares it with
    base: str | None = None  # the stage this lever is added to; None: the one before it in the registry
    peak: str = "fp32"  # which datasheet peak MFU is quoted against
    reference: str = "fp32"  # the stage whose loss this one must stay within tolerance of (the canonical reference)
    # --- where it can run
    backends: tuple = ALL_BACKENDS
    min_capability: tuple | None = None  # NVIDIA compute capability it needs (CUDA only)
    min_devices: int = 1
    needs: str = ""  # what it needs, in words, for the 'not applicable' reason
    # A package it needs: its distribution name as requirements-levers.txt pins it (the wheelhouse carries
    # it to offline hosts), and the module it imports when that is not the name with '-' as '_'.
    package: str = ""
    module: str = ""

    @property
    def module_name(self) -> str:
        """The module its package is imported as ("" for a stage without one)."""
        return self.module or self.package.replace("-", "_")

    @property
    def multi_gpu(self) -> bool:
        return self.devices == "all"

    def identity(self) -> dict:
        """What a measurement of this stage depends on: its key, the switches it sets away from
        their defaults, and the peak its MFU is computed against. Titles and prose are not part
        of it, and a new kind of switch leaves every existing stage's identity as it was."""
        return {
            "key": self.key,
            "peak": self.peak,
            **{s: getattr(self, s) for s in SWITCHES if getattr(self, s) != DEFAULTS[s]},
        }

    def not_applicable(self, device: dict) -> str | None:
        """Why this stage cannot run on `device` (a detect() record), or None if it can."""
        backend = device.get("backend")
        capability = tuple(device.get("capability") or ())
        if backend not in self.backends:
            return f"{self.title} needs {self.needs}; this device has the {backend} backend"
        if self.min_capability and backend == "cuda" and capability and capability < tuple(self.min_capability):
            return (
                f"{self.title} needs {self.needs}; this device has compute capability {'.'.join(map(str, capability))}"
            )
        if self.package and importlib.util.find_spec(self.module_name) is None:
            return f"{self.title} needs the {self.package} package, which is not installed here"
        if device.get("count", 1) < self.min_devices:
            what = "GPU" if backend in ("cuda", "rocm") else f"{backend.upper()} device"
            return f"one {what} on this host: {self.title} needs {self.needs}"
        return None


DEFAULTS = {f.name: f.default for f in fields(Stage)}  # every field's value when a stage does not set it
FP8_SWITCHES = ("fp8", "float8", "fp8_lm_head")  # the switches that put GEMMs in FP8
FP8_LOSSES = ("fp8_classifier",)  # losses that run the lm_head's GEMMs in FP8 themselves (lib/train/fp8_classifier.py)
WITHOUT_FP8 = "without FP8"  # the size sweep's variant name for a configuration with every FP8 switch off


def fp8_switches(stage) -> dict:
    """The FP8 switches `stage` sets away from their defaults (empty: a stage without FP8), its loss among them
    where that loss runs the lm_head in FP8."""
    out = {s: getattr(stage, s) for s in FP8_SWITCHES if getattr(stage, s) != DEFAULTS[s]}
    return out | ({"loss": stage.loss} if stage.loss in FP8_LOSSES else {})


# What paid on four H200s (reports/probes/ddp-h200-x4-2026-11-29): 100 MB buckets cut DDP's own work a step, 93.7 ->
# 95.0-95.3 % at four GPUs; the gradients live in the buckets, and the model has no buffers to send
DDP_OPTIONS = (("bucket_cap_mb", 100), ("gradient_as_bucket_view", True), ("broadcast_buffers", False))


def ddp_switch(options) -> str:
    """The DDP stage's code with the keyword arguments `options` (what a DDP record ran with, lib/measure/ddp.py)."""
    args = "".join(f", {k}={v!r}" for k, v in options)
    return f"model = DistributedDataParallel(model{args})  # torchrun --nproc_per_node=<GPUs>"


def _cumulative() -> list[Stage]:
    fp32 = Stage(
        "fp32",
        "FP32 baseline",
        "fp32 storage and math, naive attention, the tokenizer's vocabulary unpadded",
        switch='torch.set_float32_matmul_precision("highest")  # TF32 off: IEEE fp32 GEMMs',
    )
    tf32 = replace(
        fp32,
        key="tf32",
        title="TF32",
        lever="fp32 GEMMs run on TF32 tensor cores",
        tf32=True,
        peak="tf32",
        backends=("cuda", "rocm", "cpu"),
        min_capability=(8, 0),
        needs="TF32 tensor cores (NVIDIA compute capability 8.0 or newer; Apple GPUs have no equivalent)",
        switch='torch.set_float32_matmul_precision("high")  # allow TF32 in fp32 GEMMs',
    )
    bf16 = replace(
        tf32,
        key="bf16",
        title="BF16 autocast",
        lever="forward/backward math in bfloat16",
        autocast="bfloat16",
        peak="bf16",
        backends=ALL_BACKENDS,
        min_capability=None,
        needs="",
        switch="with torch.autocast(device_type, dtype=torch.bfloat16):\n    logits, loss = model(x, y)",
    )
    flash = replace(
        bf16,
        key="flash",
        title="Flash attention (SDPA)",
        lever="fused scaled_dot_product_attention replaces the T x T softmax",
        attention="sdpa",
        switch="y = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
    )
    vocab = replace(
        flash,
        key="vocab",
        # The lever and the switch are worded for every model (the CPU default's tiny one pads 1000 to 1024, GPT-2
        # 50257 to 50304: params). The title names GPT-2's width: every record keeps the title it was measured
        # under (stage_title), and views match records to stages by it, so a new title waits for records read by
        # the registry's.
        title="Vocab padded to 50304",
        lever="lm_head/embedding rows padded to the next multiple of 128, as nanoGPT pads GPT-2's",
        padded_vocab=True,
        switch="GPTConfig(vocab_size=math.ceil(vocab_size / 128) * 128)  # the padded rows are never targets",
    )
    # The levers after the classic five are judged against the vocab stage: BF16 autocast with
    # flash attention and the padded vocabulary, the configuration they are added to.
    fused = replace(
        vocab,
        key="fused",
        title="Fused AdamW",
        reference="vocab",
        lever="AdamW updates every parameter in one fused kernel per step",
        fused_adamw=True,
        switch="torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=True)",
    )
    compiled = replace(
        fused,
        key="compile",
        title="torch.compile",
        lever="inductor fuses the elementwise, normalisation and loss kernels",
        compile=True,
        switch="model = torch.compile(model)",
    )
    fp8 = replace(
        compiled,
        key="fp8",
        title="FP8 linear layers",
        lever="the blocks' Linear layers run FP8 GEMMs with per-tensor dynamic scales",
        fp8=True,  # MFU stays quoted against the bf16 peak: the bar the recommendation must clear
        backends=("cuda",),
        min_capability=(8, 9),
        needs="FP8 tensor-core GEMMs: an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell)",
        switch="fp8.convert_linears(model.transformer.h)  # lib/train/fp8.py: e4m3 forward, e5m2 gradients",
    )
    # The field's own kernels, each added to torch.compile (the canonical trainer's fastest form)
    # rather than to the stage before it, so no lever is judged on top of one that lost.
    fp8_torchao = replace(
        fp8,
        key="fp8_torchao",
        title="FP8 linear layers (torchao)",
        base="compile",
        fp8=False,
        float8="tensorwise",
        package="torchao",
        lever="torchao's float8 training on the blocks' Linear layers, compiled with the rest of the step",
        switch="convert_to_float8_training(model.transformer.h,\n"
        '    config=Float8LinearConfig.from_recipe_name("tensorwise"))  # torchao.float8',
    )
    fused_ce = replace(
        compiled,
        key="fused_ce",
        title="Fused linear cross-entropy (cut-cross-entropy)",
        base="compile",
        loss="cut_cross_entropy",
        package="cut-cross-entropy",
        backends=("cuda",),
        min_capability=(8, 0),
        needs="cut-cross-entropy's Triton kernels (an NVIDIA GPU with bf16 tensor cores)",
        lever="lm_head and cross-entropy in one pass that never writes the B x T x V logits",
        switch="loss = linear_cross_entropy(ln_f(x).bfloat16(), lm_head.weight.bfloat16(), targets,\n"
        "                            filter_eps=None)  # cut_cross_entropy: every gradient kept",
    )
    # Without CUDA graphs: mode="max-autotune" replays the step as CUDA graphs, whose outputs the next
    # replay overwrites, so a loop that keeps each step's loss tensor (this one, or any that logs
    # asynchronously) fails unless it clones the loss every step (seen on the H100, torch 2.11).
    autotune = replace(
        compiled,
        key="autotune",
        title="torch.compile max-autotune",
        base="compile",
        compile_mode="max-autotune-no-cudagraphs",
        backends=("cuda", "rocm"),
        needs="a GPU (inductor's GEMM autotuning)",
        lever="inductor benchmarks cuBLAS against its own Triton GEMM kernels for every shape",
        switch='model = torch.compile(model, mode="max-autotune-no-cudagraphs")',
    )
    # Two levers that pay where the profile says the time goes at d=768: the fp32 residual stream
    # (LayerNorms and adds are memory-bound) and the lm_head, the one GEMM wide enough for FP8's casts
    # to cost less than they save. Cumulative: FP8 on the lm_head is added to the loss-only forward below.
    bf16_residual = replace(
        compiled,
        key="bf16_residual",
        title="BF16 residual stream",
        base="compile",
        residual_dtype="bfloat16",
        lever="the residual stream between blocks kept in bf16, as llm.c keeps its activations, not fp32",
        switch="x = (wte(idx) + wpe(pos)).to(torch.bfloat16)  # the residual stream in bf16",
    )
    # A compiled model that returns its logits keeps a B x T x V output beside what the loss's backward
    # saves (the chapter's memory layers show what it costs on each device). llm.c's train_gpt2.py passes
    # return_logits=False in its training loop for this reason. Added to the bf16 residual stream.
    loss_only = replace(
        bf16_residual,
        key="loss_only",
        title="Loss-only forward",
        base="bf16_residual",
        return_logits=False,
        lever="the training forward returns the loss alone, so the compiled graph has no B x T x V "
        "logits output to keep",
        switch="_, loss = model(x, y, return_logits=False)  # that call, as llm.c's train_gpt2.py writes it",
    )
    fp8_head = replace(
        loss_only,
        key="fp8_head",
        title="FP8 lm_head (torchao)",
        base="loss_only",
        fp8_lm_head="tensorwise",
        package="torchao",
        backends=fp8.backends,
        min_capability=fp8.min_capability,
        needs=fp8.needs,
        lever="the lm_head's GEMMs (d x the padded vocabulary, the model's widest) in FP8 with torchao; the blocks "
        "stay bf16",
        switch='convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"),\n'
        '    module_filter_fn=lambda module, fqn: fqn == "lm_head")  # torchao.float8',
    )
    # The FP8 lm_head's backward as the profile shows it: the loss writes the logits' gradient in bf16, then torchao
    # reads all B x T x V of it for its largest value and again to cast and transpose it. Here the loss's backward
    # writes it in FP8 itself (one Triton kernel of ours; the GEMMs as torchao's tensorwise recipe does them).
    fp8_classifier = replace(
        fp8_head,
        key="fp8_classifier",
        title="FP8 classifier (fused)",
        # it replaces the FP8 lm_head, not adds to it: the recipe that takes it has no torchao lm_head (its lineage,
        # and so its levers and its leave-one-out, run through the loss-only forward)
        base="loss_only",
        fp8_lm_head=None,
        loss="fp8_classifier",
        package="",
        lever="the lm_head and its loss as one FP8 classifier: the loss's backward writes the logits' gradient in "
        "FP8 with a fixed scale, no bf16 gradient, no pass for its largest value, no separate cast",
        switch="_, loss = None, fp8_classifier_loss(final_hidden, model.lm_head.weight, targets)  # "
        "lib/train/fp8_classifier.py "
        "(ours: one Triton kernel)",
    )
    # DDP runs whichever single-GPU configuration measured fastest (ddp_launch.run_ddp); its own
    # switches here only describe it.
    ddp = replace(
        vocab,
        key="ddp",
        reference="vocab",
        title="DDP across the host's GPUs",
        lever="data parallel over every GPU with torchrun, the per-GPU batch fixed",
        devices="all",
        backends=("cuda", "rocm"),
        min_devices=2,
        needs="two or more GPUs (data parallelism)",
        switch=ddp_switch(DDP_OPTIONS),
        ddp_options=DDP_OPTIONS,
    )
    return [
        fp32,
        tf32,
        bf16,
        flash,
        vocab,
        fused,
        compiled,
        fp8,
        fp8_torchao,
        fused_ce,
        autotune,
        bf16_residual,
        loss_only,
        fp8_head,
        fp8_classifier,
        ddp,
    ]


STAGES: dict[str, Stage] = {s.key: s for s in _cumulative()}
ORDER = list(STAGES)
BEYOND_STAGES = (
    "batch_sweep",
    "size_sweep",
)  # the chapters that are not a stage, in their order (lib/core/chapters.py)


def get(key: str) -> Stage:
    if key not in STAGES:
        raise KeyError(f"unknown stage {key!r}; stages are: {', '.join(ORDER)}")
    return STAGES[key]


def own_stack(key: str) -> str:
    """The stage that is `key` without its lever (its base, else the stage before it in the registry): the parity
    test's reference for that lever; the first stage is its own."""
    stage = get(key)
    if stage.base:
        return stage.base
    i = ORDER.index(key)
    return ORDER[i - 1] if i else key


def is_multi_gpu(key: str | None) -> bool:
    """Whether the stage `key` runs over several GPUs (its records hold an aggregate of them)."""
    return key in STAGES and STAGES[key].multi_gpu


def single_gpu(keys) -> list[str]:
    """The keys of `keys` whose stage runs on one device."""
    return [k for k in keys if not is_multi_gpu(k)]


def lever_packages() -> dict[str, str]:
    """Every package a stage needs, distribution name -> module name: what setup checks and installs,
    what the environment records, what requirements-levers.txt must pin."""
    return {s.package: s.module_name for s in STAGES.values() if s.package}


if __name__ == "__main__":  # `python -m lib.core.stages modules`: the lever modules, for the Makefile's import check
    import sys

    if sys.argv[1:] != ["modules"]:
        sys.exit("usage: python -m lib.core.stages modules")
    print(" ".join(sorted(set(lever_packages().values()))))
