"""The verdicts that read more than one pair of stages (lib/report/claim_figures.py, lib/report/claim_kinds.py): a figure
within noise of no change, the padding eager and compiled, the write-up's cuBLAS hypothesis, the FP8
forms and sizes, FlashAttention-3 by the kernel that ran, TF32 alone and on top of BF16. Each flips
with synthetic records."""

from __future__ import annotations

import pytest
import yaml
from conftest import make_record, tiny_params, write_report_dir
from test_claims import _claim, _df, _sdpa, _sweep

from lib.core import config, kernel_categories
from lib.report import claim_figures, claim_judge, claim_params, claims, loader
from lib.results import store


def _verdict(cid, df, facts=None, noise=None, profile="h100", **kw):
    return claims.verdict(_claim(cid), df, profile, "cuda", noise=noise, facts=facts, **kw)


# ---------------------------------------------------------------- no measurable change


@pytest.mark.parametrize(
    "metric, value, expect, noise, word",
    [
        ("speedup", 1.03, {"min": 1.10}, 0.05, "contradicted"),  # a claimed 10 %: 3 % is inside a 5 % noise
        ("speedup", 1.03, {"min": 1.10}, 0.01, "fell short"),  # ... beyond a 1 % noise: short
        ("speedup", 1.03, {"min": 1.10}, None, "fell short"),  # no noise measured: the direction alone
        ("speedup", 1.005, {"min": 1.0}, 0.01, "contradicted"),  # "faster": not measurably
        ("time_change", -0.004, {"max": -0.05}, 0.01, "contradicted"),  # a claimed cut of 5 %: -0.4 % is noise
        ("time_change", -0.03, {"max": -0.05}, 0.01, "fell short"),
        ("speedup", 1.01, {"max": 1.06}, 0.05, "confirmed"),  # "at most": no change confirms it
        ("memory_change", 0.001, {"min": 0.01}, 0.05, "fell short"),  # memory has no measured noise
    ],
)
def test_a_figure_within_the_noise_of_no_change_contradicts_a_claimed_change(metric, value, expect, noise, word):
    assert claim_judge.judge(metric, value, expect, noise) == word


def test_the_vocab_claim_within_noise_of_no_change_is_worded_so():
    df = _df({"flash": 101.0, "vocab": 100.0})
    v = _verdict("vocab-h100", df, noise=0.02)
    assert (
        v["verdict"] == "contradicted"
        and "no measurable change: within the measured noise of no change (±2.0 %)" in v["measured"]
    )
    v = _verdict("vocab-h100", df, noise=0.005)
    assert v["verdict"] == "fell short" and "no measurable change" not in v["measured"]


# ---------------------------------------------------------------- padding, eager and compiled


def _unpadded(ms: float, batch: int = 2) -> dict:
    params = tiny_params(["compile"])
    return {**make_record(params, "compile", batch, [ms] * 5, [3.0] * 6), "variant": "unpadded vocab"}


@pytest.mark.parametrize(
    "flash_ms, unpadded_ms, verdict, alone",
    [
        (135.0, 77.5, "confirmed", "exceeded"),  # eager 1.35x; compiled 1.55x
        (135.0, 51.0, "confirmed", "fell short"),  # eager 1.35x; compiled 1.02x: the verdict stays on eager
        (
            100.4,
            77.5,
            "contradicted",
            "exceeded",
        ),  # eager 1.004x inside the noise: the compiled figure does not save it
    ],
)
def test_the_padding_claim_states_both_figures_and_rests_on_the_eager_one(flash_ms, unpadded_ms, verdict, alone):
    df = _df({"flash": flash_ms, "vocab": 100.0, "compile": 50.0})
    v = _verdict("vocab-h100", df, {"variants": [_unpadded(unpadded_ms)]}, noise=0.01)
    assert v["verdict"] == verdict
    assert v["measured"].startswith(f"{flash_ms / 100:.2f}× at B=2 eager (vocab vs flash); ")
    assert (
        "no measurable change: within the measured noise of no change (±1.0 %); under torch.compile" in v["measured"]
    ) is (verdict == "contradicted")
    assert f"B=2): {unpadded_ms / 50:.2f}× (alone: {alone}); the verdict rests on the eager figure" in v["measured"]


def test_the_compiled_padding_says_why_it_is_missing():
    df = _df({"flash": 135.0, "vocab": 100.0, "compile": 50.0})
    assert (
        "under torch.compile (the compile stage at the unpadded against the padded vocabulary): not measured, no "
        "record of it" in _verdict("vocab-h100", df, {"variants": []})["measured"]
    )
    v = _verdict("hopper-multiples-of-128", df, {"variants": [_unpadded(60.0)]}, gemm=_sweep((1.0,) * 3, (1.2,) * 3))
    assert v["verdict"] == "confirmed" and "1.20×, a whole-step figure that cannot tell 128 from 8" in v["measured"]


# ---------------------------------------------------------------- the write-up's cuBLAS hypothesis


@pytest.mark.parametrize(
    "real_ms, cublas, verdict",
    [
        (30.0, "13.1.0", "contradicted"),  # 30x the time with a new cuBLAS: nothing masked
        (1.03, "13.1.0", "confirmed"),  # 3 %: masked
        (1.03, "12.1.3", "not applicable"),  # the hypothesis speaks about 12.5 and newer
        (30.0, None, "not measured"),
    ],
)
def test_the_newer_cublas_hypothesis_flips_with_the_penalty_and_the_version(real_ms, cublas, verdict):
    gemm = _sweep((1.0,) * 3, (1.0,) * 3, real_ms=real_ms)
    v = _verdict("cublas-masks-misalignment", _df({}), {"cublas": cublas}, gemm=gemm)
    assert v["verdict"] == verdict
    if verdict in ("confirmed", "contradicted"):
        assert v["measured"].startswith(f"{real_ms / 1.0:.2f}× the time with cuBLAS {cublas}; kernels differ")
    if verdict == "not applicable":
        assert v["measured"] == "this report's cuBLAS is 12.1.3, older than 12.5"


# ---------------------------------------------------------------- FlashAttention-3 by the kernel that ran

CUDNN_SM90 = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
FA2 = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4>, true>(Flash_fwd_params)"


def _profiled(kernel: str, attention_ms: float, backend: str = "cuDNN") -> dict:
    params = tiny_params(["flash"])
    rec = make_record(params, "flash", 2, [100.0] * 5, [3.0] * 6)
    prof = {
        "source": "CUDA kernels (torch.profiler)",
        "steps": 1,
        "kernels": [
            {"name": kernel, "ms": attention_ms, "calls": 12},
            {"name": "nvjet_sm90_tst", "ms": 50.0, "calls": 48},
        ],
    }
    return {**rec, "sdpa_backend": backend, "kernel_profile": kernel_categories.with_current_rules(prof)}


@pytest.mark.parametrize(
    "fa2_tps, hopper, twice",
    [
        (1000.0, "confirmed", "confirmed"),  # FA2's step 25.6 ms longer: 1.25x the step, 2.0x the attention
        (1240.0, "confirmed", "fell short"),  # 0.8 ms longer: 1.008x the step, 1.03x the attention
        (1260.0, "contradicted", "contradicted"),  # FA2's step shorter: FA3's class is slower here
    ],
)
def test_flash_attention_3_is_judged_by_the_kernel_that_ran(fa2_tps, hopper, twice):
    """cuDNN's sm90 wgmma kernel ran, 25.6 ms of attention kernels; forced, cuDNN gives 1,250 tok/s
    (B=2 x 64 tokens: 102.4 ms a step) and FlashAttention-2 `fa2_tps`."""
    facts = {"profiles": [_profiled(CUDNN_SM90, 25.6)]}
    sdpa = _sdpa(cudnn=1250.0, flash=fa2_tps)
    for r in sdpa:
        r["sdpa_backend"] = {"SDPA cudnn": "cuDNN", "SDPA flash": "flash"}[r["variant"]]
    step = _verdict("fa3-hopper", _df({}), facts, noise=0.001, sdpa=sdpa)
    kernels = _verdict("fa3-2x", _df({}), facts, noise=0.001, sdpa=sdpa)
    assert (step["verdict"], kernels["verdict"]) == (hopper, twice)
    assert f"ran {CUDNN_SM90} (cuDNN), a Hopper warpgroup-MMA kernel: FlashAttention-3's class" in step["measured"]
    assert f"the step {1250.0 / fa2_tps:.2f}× as fast as with SDPA's flash backend" in step["measured"]
    fa2_ms, mine_ms = 2 * 64 / fa2_tps * 1000, 2 * 64 / 1250.0 * 1000
    assert f"attention takes about {(25.6 + fa2_ms - mine_ms) / 25.6:.2f}× its 25.60 ms" in kernels["measured"]


def test_flash_attention_3_names_another_kernel_and_is_not_measured_without_one_of_its_class():
    v = _verdict("fa3-hopper", _df({}), {"profiles": [_profiled(FA2, 8.0, "flash")]}, sdpa=_sdpa(flash=1000.0))
    assert v["verdict"] == "not measured" and "flash_fwd_kernel" in v["measured"]
    assert "no FlashAttention-3-class kernel ran in this report" in v["measured"]
    v = _verdict("fa3-hopper", _df({}), {"profiles": [_profiled(CUDNN_SM90, 5.0)]})  # no forced backends
    assert (
        v["verdict"] == "not measured"
        and "FlashAttention-3's class; its worth against FlashAttention-2 not measured" in v["measured"]
    )


# ---------------------------------------------------------------- TF32 both ways, FP8 at every size


def _loo(worth, within_noise):
    return {
        "leave_one_out": {
            "stage": "loss_only",
            "batch_size": 32,
            "rows": {"TF32": {"worth": worth, "within_noise": within_noise, "record": {"status": "ok"}}},
        }
    }


def test_tf32_is_stated_alone_over_fp32_and_on_top_of_bf16():
    df = _df({"fp32": 1000.0, "tf32": 400.0})
    v = _verdict("tf32-speedup", df, _loo(0.012, True))
    assert v["verdict"] == "confirmed"  # the claim's own comparison decides: 2.50x
    assert v["measured"].startswith(
        "2.50× at B=2 alone over fp32; on top of the recommendation's other levers, BF16 "
        "autocast among them (Loss-only forward at B=32 without TF32, leave-one-out): +1.2 % (within noise)"
    )
    assert "+30.0 %" in _verdict("tf32-speedup", df, _loo(0.30, False))["measured"]
    assert "no leave-one-out run in this report" in _verdict("tf32-speedup", df, {})["measured"]


def test_the_fp8_claim_names_the_size_sweep_and_where_fp8_starts_to_pay():
    series = {
        "FP8 linear layers (torchao)": [("gpt2", 0.5, None), ("gpt2-medium", 0.9, None), ("gpt2-xl", 1.1, None)],
        "FP8 lm_head (torchao)": [("gpt2", 1.01, None), ("gpt2-medium", None, "oom: out of memory")],
        "FP8 linear layers": [("gpt2", None, "not applicable: no FP8"), ("gpt2-xl", None, "not applicable: no FP8")],
    }
    facts = {
        "sizes": {"series": series, "bands": {"gpt2": 0.02, "gpt2-medium": 0.02, "gpt2-xl": 0.02}},
        "stages": ["compile", "fp8_torchao"],
        "model": "gpt2",
        "not_run": [{"key": "fp8", "kind": "stage", "command": "make report GPU=h100 DEPTH=full CHAPTERS=fp8"}],
    }
    v = _verdict("fp8-hopper", _df({"compile": 100.0, "fp8_torchao": 120.0}), facts, noise=0.01)
    assert (
        v["verdict"] == "contradicted"
        and "(the fastest form at gpt2 whose loss held: the verdict rests on it)" in v["measured"]
    )
    assert (
        "FP8 linear layers: not measured, left to the full report (make report GPU=h100 DEPTH=full CHAPTERS=fp8)"
        in v["measured"]
    )
    assert "FP8 lm_head (torchao): not measured, not among this report's stages" in v["measured"]
    assert (
        "FP8 linear layers (torchao) gpt2 0.50×, gpt2-medium 0.90×, gpt2-xl 1.10× (faster beyond noise from gpt2-xl up)"
        in v["measured"]
    )
    assert (
        "FP8 lm_head (torchao) gpt2 1.01×, gpt2-medium not measured (oom: out of memory) (faster beyond noise at no size)"
        in v["measured"]
    )
    assert "FP8 linear layers not measured at any size (not applicable: no FP8)" in v["measured"]


def test_an_fp8_form_whose_parity_test_did_not_hold_is_named_and_not_counted():
    """The FP8 lm_head 1.04x faster but its parity test undecided (seen on an H100 and an H200): "use FP8" read
    contradicted on torchao's slower layers, which never had a parity test, while the faster form's was merely
    undecided (a reviewer: two standards). One standard now: the counted forms do not confirm it and a faster form
    could not be decided, so the claim is undecided; a faster form found worse is excluded on evidence
    (contradicted); once its test holds, it carries the verdict (confirmed)."""
    df = _df({"compile": 100.0, "fp8_torchao": 107.0, "loss_only": 90.0, "fp8_head": 86.5})
    why = "its parity test against Vocab padded to 50304 at B=96 could not decide"
    facts = {
        "stages": ["compile", "fp8_torchao", "loss_only", "fp8_head"],
        "model": "gpt2",
        "not_held": {"fp8_head": why},
        "undecided": {"fp8_head"},
    }
    v = _verdict("fp8-hopper", df, facts, noise=0.01)
    assert v["verdict"] == "undecided"
    assert v["measured"].startswith(
        "FP8 linear layers (torchao): 0.93× at B=2 (the fastest form at gpt2 whose loss held; only a faster form"
    )
    assert f"FP8 lm_head (torchao): 1.04× at B=2, not counted: {why}" in v["measured"]
    # "FP8 gives about 2x": the undecided form's 1.04x would not confirm it either, so it stays contradicted
    assert _verdict("fp8-2x-step", df, facts, noise=0.01)["verdict"] == "contradicted"
    worse = {**facts, "not_held": {"fp8_head": "its parity test found it worse"}, "undecided": set()}
    assert _verdict("fp8-hopper", df, worse, noise=0.01)["verdict"] == "contradicted"
    v = _verdict("fp8-hopper", df, {**facts, "not_held": {}, "undecided": set()}, noise=0.01)
    assert v["verdict"] == "confirmed" and v["measured"].startswith("FP8 lm_head (torchao): 1.04× at B=2")


def test_every_fp8_form_is_repeated_so_its_verdict_can_tell_it_from_noise():
    pairs = claim_params.timed_claim_pairs("h100")
    assert {("fp8", "compile"), ("fp8_torchao", "compile"), ("fp8_head", "loss_only")} <= set(pairs)
    assert len(pairs) == len(set(pairs))


@pytest.mark.parametrize(
    "cid, change, message",
    [
        ("fp8-hopper", {"forms": ["fp8", "compile"]}, "form 'compile' is no FP8 stage"),
        ("tf32-speedup", {"leave_one_out": "TF-32"}, "leave_one_out 'TF-32' is none of"),
        ("fa3-2x", {"figure": "tflops"}, "figure is step or kernels"),
    ],
)
def test_a_broken_claim_is_a_config_error(tmp_params_dir, cid, change, message):
    data = yaml.safe_load((tmp_params_dir / "claims.yaml").read_text())
    next(c for c in data["claims"] if c["id"] == cid).update(change)
    (tmp_params_dir / "broken.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(config.ConfigError, match=message):
        claim_params.load_claims(tmp_params_dir / "broken.yaml")


# ---------------------------------------------------------------- from a report folder


def test_a_report_folder_gives_the_verdicts_their_facts(tmp_path):
    """The compile stage at the unpadded vocabulary (results/variants) and the flash stage's kernel
    profile, read from a report folder as loader.load leaves them."""
    params = tiny_params(["flash", "vocab", "fused", "compile"])
    params.name, params.backend = "h100", "cuda"
    recs = [
        make_record(params, s, 2, [ms] * 5, [3.0] * 6)
        for s, ms in (("flash", 140.0), ("vocab", 100.0), ("fused", 95.0), ("compile", 50.0))
    ]
    recs[0].update(
        sdpa_backend="cuDNN",
        kernel_profile={
            "source": "CUDA kernels (torch.profiler)",
            "steps": 1,
            "kernels": [{"name": CUDNN_SM90, "ms": 5.0, "calls": 12}],
        },
    )
    d = write_report_dir(tmp_path / "h100", params, recs)
    store.write_atomic(d / "results" / "variants" / "compile-unpadded__b2.json", _unpadded(54.0))
    rep = loader.load(d)
    facts = claim_figures.facts(rep)
    assert facts["variants"][0]["variant"] == "unpadded vocab" and facts["profiles"][0]["stage"] == "flash"
    t = claims.for_report(rep).set_index("id")
    assert (
        "under torch.compile (the compile stage at the unpadded against the padded vocabulary, B=2): 1.08×"
        in t.loc["vocab-h100", "measured"]
    )
    assert f"ran {CUDNN_SM90} (cuDNN)" in t.loc["fa3-hopper", "measured"]


def test_a_memory_claim_names_the_layer_it_reads_where_the_pdf_drops_the_check_column():
    """The chapters quote allocator memory; the claim reads device memory: the measured text says which (a reader
    found BF16's -5.5 % in the claims beside -5.6 % in its chapter)."""
    df = _df({"tf32": 10.0, "bf16": 9.0}, mem_device_bytes={"tf32": 100 * 2**30, "bf16": 94.5 * 2**30})
    v = _verdict("bf16-memory", df)
    assert v["measured"].startswith("-5.5 % at B=2, device memory (bf16 vs tf32)")
