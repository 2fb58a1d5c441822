"""The FP8 classifier (lib/train/fp8_classifier.py): its math against fp32 cross-entropy, the fixed scale of its
gradient, and its wiring as a stage. On the CPU its gradient comes from the PyTorch reference; on a GPU the Triton
kernel is held to that reference bit for bit but for rounding ties (tools/probe_frontier.py --check: 99.9998 %
of the values equal on an H100, the transposed copy exactly the transpose)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_params

from lib.core import levers, stages
from lib.measure import series, worker
from lib.results import decide
from lib.run.jobs import plain_loop_can
from lib.train import fp8_classifier as fc


def _inputs(n=256, c=64, v=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, generator=g)
    w = torch.randn(v, c, generator=g) * 0.05
    t = torch.randint(0, v - 16, (n,), generator=g)  # the last rows are padding, never a target
    return x, w, t


def _grads(fn, x, w):
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss = fn(xs, ws)
    loss.backward()
    return loss.detach(), xs.grad, ws.grad


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def test_loss_and_gradients_match_fp32_cross_entropy_within_fp8_rounding():
    x, w, t = _inputs()
    loss, gx, gw = _grads(lambda xs, ws: fc.fp8_classifier_loss(xs, ws, t), x, w)
    ref, rx, rw = _grads(lambda xs, ws: F.cross_entropy(xs @ ws.T, t), x, w)
    assert abs(float(loss) - float(ref)) < 2e-3
    # e5m2 keeps 2 mantissa bits, e4m3 3: a few per cent in norm, as torchao's tensorwise recipe on the same inputs
    # (the H100 check: 2.66 % for both); a wrong scale, layout or sign is off by far more
    assert 0.005 < _rel(gx, rx) < 0.05
    assert 0.005 < _rel(gw, rw) < 0.05


def test_the_upstream_gradient_scales_both_gradients():
    x, w, t = _inputs()
    _, gx, gw = _grads(lambda xs, ws: fc.fp8_classifier_loss(xs, ws, t), x, w)
    _, gx3, gw3 = _grads(lambda xs, ws: 3 * fc.fp8_classifier_loss(xs, ws, t), x, w)
    assert torch.allclose(gx3, 3 * gx, rtol=1e-5, atol=1e-7) and torch.allclose(gw3, 3 * gw, rtol=1e-5, atol=1e-7)


def test_the_fixed_scale_never_overflows_and_the_transpose_is_exact():
    logits = torch.full((4, 256), -30.0)
    logits[:, 7] = 60.0  # one column takes the whole softmax
    logits = logits.to(torch.bfloat16)
    targets = torch.tensor([7, 3, 0, 255])  # right, and wrong, answers at full confidence
    lse = torch.logsumexp(logits.float(), -1)
    g8, g8_t = fc.softmax_grad_fp8_reference(logits, lse, targets)
    g = g8.float()
    assert torch.isfinite(g).all() and g.abs().max() <= fc.GRAD_SCALE
    assert g[1, 3] == -fc.GRAD_SCALE and g[1, 7] == fc.GRAD_SCALE  # softmax - one-hot at its extremes: -1 and +1
    assert g[0, 7] == 0  # right and certain: no gradient
    assert torch.equal(g8_t.view(torch.uint8), g8.view(torch.uint8).t())


def test_the_stage_trains_like_the_stage_it_is_added_to():
    """The classifier as the fp8_classifier stage builds it (eager here: the CPU path of its math), against the
    FP8 lm_head's base, the loss-only forward, from the same weights on the same batches."""
    params = tiny_params(warmup=1, timed=4)
    off = {"compile": False, "autocast": None, "residual_dtype": None}  # fp32 on the CPU
    mine = worker.run({"params": params, "stage": "fp8_classifier", "batch_size": 2, "stage_overrides": off})
    base = worker.run({"params": params, "stage": "loss_only", "batch_size": 2, "stage_overrides": off})
    assert mine["status"] == base["status"] == "ok", mine.get("reason")
    assert mine["init_checksum"] == base["init_checksum"]
    assert abs(mine["losses"][0] - base["losses"][0]) < 0.01  # the first step's loss: the same model, FP8 GEMMs
    assert abs(mine["final_loss"] - base["final_loss"]) < params.run.loss_tolerance
    assert mine["losses"] != base["losses"]  # the FP8 classifier ran, not bf16's cross-entropy


def test_the_stage_is_an_fp8_form_the_plain_loop_does_not_get():
    s = stages.get("fp8_classifier")
    assert stages.fp8_switches(s) == {"loss": "fp8_classifier"}
    assert not series.restartable(s)  # its parity runs keep a process each, as the other FP8 forms
    assert not plain_loop_can(s)  # the canonical trainer gets none of our kernels
    # it replaces the FP8 lm_head: a recipe with it has no torchao lm_head among its levers
    assert s.base == "loss_only" and s.min_capability == stages.get("fp8_head").min_capability
    assert "fp8_head" not in decide.lineage("fp8_classifier")
    # the size sweep turns it off as it turns off the other forms: back to bf16's cross-entropy
    assert dict.fromkeys(stages.fp8_switches(s), None) and stages.DEFAULTS["loss"] == "cross_entropy"


@pytest.mark.parametrize(
    "key, has, lacks",
    [
        ("fp8_classifier", "FP8 classifier (fused)", "fused linear cross-entropy"),
        ("fused_ce", "fused linear cross-entropy", "FP8 classifier (fused)"),
        ("fp8_head", "FP8 lm_head (torchao)", "FP8 classifier (fused)"),
    ],
)
def test_each_loss_lever_is_left_out_only_where_the_stage_uses_it(key, has, lacks):
    names = list(levers.levers_of(stages.get(key)))
    assert any(n.startswith(has) for n in names) and not any(n.startswith(lacks) for n in names)
    assert any("padded vocabulary" in n and "which needs it" in n for n in names) == key.startswith("fp8_")
