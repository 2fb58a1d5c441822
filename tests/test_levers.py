"""The levers after the classic five: FP8 arithmetic, the stage registry's applicability rules,
and fused AdamW / torch.compile / FP8 measured for real on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_params

from lib.core import stages
from lib.measure import worker
from lib.train import fp8
from lib.train.model import GPT, GPTConfig


def _rel(a, b) -> float:
    return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())


def test_fp8_linear_matches_bf16_within_fp8_rounding():
    torch.manual_seed(0)
    ref = torch.nn.Linear(64, 192)
    lin = torch.nn.Linear(64, 192)
    lin.load_state_dict(ref.state_dict())
    assert fp8.convert_linears(torch.nn.Sequential(lin)) == 1 and isinstance(lin, fp8.Float8Linear)
    x = torch.randn(2, 64, 64)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, y_ref = lin(xa), ref(xb)
    assert y.dtype == torch.bfloat16 and y.shape == y_ref.shape
    # e4m3 keeps 3 mantissa bits: a few per cent of relative error, never a wrong result.
    assert 1e-4 < _rel(y, y_ref) < 0.1
    g = torch.randn_like(y_ref.float())
    y.float().backward(g)
    y_ref.float().backward(g)
    assert xa.grad.dtype == torch.float32 and lin.weight.grad.dtype == torch.float32
    assert _rel(xa.grad, xb.grad) < 0.12
    assert _rel(lin.weight.grad, ref.weight.grad) < 0.12
    assert torch.allclose(lin.bias.grad, ref.bias.grad, rtol=1e-2, atol=1e-2)


def test_fp8_falls_back_where_scaled_mm_cannot_take_the_shape():
    lin = torch.nn.Linear(24, 40)  # not multiples of 16
    fp8.convert_linears(torch.nn.Sequential(lin))
    x = torch.randn(3, 24)
    assert torch.equal(lin(x), F.linear(x, lin.weight, lin.bias))


def test_quantize_uses_the_format_range():
    t = torch.tensor([0.5, -2.0, 1e-3])
    q, inv = fp8.quantize(t, fp8.E4M3)
    assert float(q.float().abs().max()) == torch.finfo(fp8.E4M3).max
    assert torch.allclose(q.float() * inv, t, rtol=0.07, atol=1e-4)


def test_convert_touches_only_the_blocks():
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, real_vocab_size=64))
    assert fp8.convert_linears(model.transformer.h) == 2 * 4  # qkv, attention proj, MLP up and down
    assert type(model.lm_head) is torch.nn.Linear


@pytest.mark.parametrize(
    "device, reason",
    [
        ({"backend": "cuda", "capability": [9, 0], "count": 1}, None),
        ({"backend": "cuda", "capability": [8, 9], "count": 1}, None),
        ({"backend": "cuda", "capability": [8, 0], "count": 1}, "compute capability 8.0"),
        ({"backend": "rocm", "count": 1}, "rocm backend"),
        ({"backend": "cpu", "count": 1}, "cpu backend"),
    ],
)
def test_fp8_applicability(device, reason):
    got = stages.get("fp8").not_applicable(device)
    assert (got is None) if reason is None else (reason in got)


def test_registry_is_cumulative_and_references_are_set():
    order = stages.ORDER
    assert (
        order.index("vocab") < order.index("fused") < order.index("compile") < order.index("fp8") < order.index("ddp")
    )
    fp8_stage = stages.get("fp8")
    assert fp8_stage.compile and fp8_stage.fused_adamw and fp8_stage.padded_vocab and fp8_stage.attention == "sdpa"
    assert [stages.get(k).reference for k in ("tf32", "vocab", "fused", "compile", "fp8")] == [
        "fp32",
        "fp32",
        "vocab",
        "vocab",
        "vocab",
    ]
    assert stages.get("ddp").not_applicable({"backend": "cuda", "capability": [8, 0], "count": 2}) is None


def _run(stage, params, **job):
    return worker.run({"params": params, "stage": stage, "batch_size": params.run.batch_sizes[0], **job})


def test_fused_adamw_is_the_same_update():
    params = tiny_params(warmup=1, timed=5)
    vocab, fused = _run("vocab", params), _run("fused", params)
    assert vocab["status"] == fused["status"] == "ok"
    assert vocab["init_checksum"] == fused["init_checksum"]
    assert abs(vocab["final_loss"] - fused["final_loss"]) < 1e-3
    assert fused["kernel_profile"]["categories"]["optimizer"] > 0
    assert fused["energy"] == {"unavailable": "the cpu backend exposes no power sensor to this process"}


@pytest.mark.slow  # it compiles the tiny model (about 45 s on two cores): make test runs it, make test-fast does not
def test_compile_and_fp8_train_like_the_vocab_stage(tmp_path, monkeypatch):
    """torch.compile (inductor's C++ backend here) and FP8 GEMMs on the CPU: both must train to
    within the tolerance of the vocab stage they are added to, and time the compile separately."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    # Inductor's AVX-512 C++ code for the FP8 casts (torch 2.13, a Xeon with avx512_fp16) gives NaN gradients from the
    # first backward, where the same graph run eagerly, or compiled for AVX2 or no vector ISA, trains: an upstream
    # code-generation fault on the CPU, which the FP8 stages never run on in a report (they need CUDA). The test holds
    # our FP8 layer and the compile, so it pins the vector width to AVX2's.
    monkeypatch.setattr(torch._inductor.config.cpp, "simdlen", 256)
    params = tiny_params(warmup=2, timed=5)
    tol = params.run.loss_tolerance
    vocab = _run("vocab", params)
    for key in ("compile", "fp8"):
        rec = _run(key, params, energy=False)
        assert rec["status"] == "ok", rec.get("reason")
        assert abs(rec["final_loss"] - vocab["final_loss"]) < tol
        assert rec["first_step_s"] > rec["median_ms"] / 1e3  # the first step compiled the graph
        assert rec["kernel_profile"]["busy_ms"] > 0
