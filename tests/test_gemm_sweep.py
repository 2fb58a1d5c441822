"""lib/measure/gemm_sweep.py: the widths it sweeps, the record it returns, and its command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, cli_env, describe_proc

from lib.measure import gemm_sweep
from lib.run import evidence

M, K = 128, 64
NS = evidence.gemm_widths(1000, 1024)


def test_widths_for_gpt2_are_the_multiples_of_8_around_the_padded_vocabulary_plus_the_real_one():
    ns = evidence.gemm_widths(50257, 50304)
    assert ns == sorted(set(range(50176, 50433, 8)) | {50257})
    assert ns[0] == 50176 and ns[-1] == 50432 and 50304 in ns and 50257 in ns
    assert len(ns) == 33 + 1


def test_the_launcher_plans_the_sweep_without_importing_torch():
    """The sweep's job is planned in `make report`'s own process, which imports no torch; importing gemm_sweep for
    its widths did, and cost every resumed call of an H100 report 3.3 s in the vocab chapter."""
    code = (
        "import sys; from lib.core import config; from lib.run import evidence; "
        "p = config.load('h100'); evidence.gemm_widths(p.model.vocab_size, p.model.padded_vocab_size); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=cli_env(), capture_output=True, text=True)
    assert proc.returncode == 0, describe_proc(proc)


def test_widths_when_the_real_vocabulary_is_already_a_multiple_of_8_are_not_duplicated():
    ns = evidence.gemm_widths(1000, 1024)
    assert ns == list(range(896, 1153, 8))  # 1000 is a multiple of 8: already in the range
    assert len(ns) == len(set(ns)) == 33


def test_multiple_of_is_the_largest_alignment_dividing_n():
    assert [gemm_sweep.multiple_of(n) for n in (50304, 50257, 50264, 50272, 1024, 1000)] == [128, 1, 8, 32, 128, 8]


@pytest.fixture(scope="module")
def sweep() -> dict:
    ns = NS + [1001]
    return gemm_sweep.run(M, K, ns, "cpu", reps=2, warmup=1, kernel_ns=(1001, 1024))


def test_run_on_cpu_returns_one_point_per_dtype_and_width(sweep):
    assert sweep["m"] == M and sweep["k"] == K and sweep["dtypes"] == ["bf16", "fp32"]
    got = sorted((p["dtype"], p["n"]) for p in sweep["points"])
    assert got == sorted((d, n) for d in ("bf16", "fp32") for n in NS + [1001])
    json.dumps(sweep)  # JSON-serialisable as it is


def test_times_are_positive_and_tflops_follow_from_flops_over_time(sweep):
    for p in sweep["points"]:
        n = p["n"]
        assert p["fwd_ms"] > 0 and p["bwd_ms"] > 0
        assert p["total_ms"] == pytest.approx(p["fwd_ms"] + p["bwd_ms"])
        assert p["fwd_tflops"] == pytest.approx(2 * M * K * n / (p["fwd_ms"] * 1e-3) / 1e12)
        assert p["bwd_tflops"] == pytest.approx(4 * M * K * n / (p["bwd_ms"] * 1e-3) / 1e12)
        assert p["tflops"] == pytest.approx(6 * M * K * n / (p["total_ms"] * 1e-3) / 1e12)
        assert p["multiple_of"] == gemm_sweep.multiple_of(n)
        assert 1 <= p["reps"] <= 2


def test_kernels_are_recorded_for_exactly_the_two_kernel_widths(sweep):
    assert set(sweep["kernels"]) == {"bf16", "fp32"}
    for dtype, by_n in sweep["kernels"].items():
        assert set(by_n) == {"1001", "1024"}
        for names in by_n.values():
            # forward is one mm, backward two (dX and dW): the CPU op is aten::mm in both
            assert "aten::mm" in names["fwd"] and "aten::mm" in names["bwd"]
            assert len(names["fwd"]) == len(set(names["fwd"]))
            assert not any(n in gemm_sweep.CPU_BOOKKEEPING for n in names["fwd"] + names["bwd"])
    assert sweep["kernel_errors"] == []


def test_tf32_setting_is_restored_after_the_sweep(monkeypatch):
    """fp32 turns TF32 off for its GEMMs (and tf32 on); the caller's setting comes back."""
    import torch

    seen = []
    linear = gemm_sweep.F.linear

    def spy(x, w):
        seen.append(torch.backends.cuda.matmul.allow_tf32)
        return linear(x, w)

    monkeypatch.setattr(gemm_sweep.F, "linear", spy)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        gemm_sweep.run(16, 8, [8], "cpu", dtypes=["fp32"], reps=1, warmup=0)
        assert seen and not any(seen)
        assert torch.backends.cuda.matmul.allow_tf32 is True
        torch.backends.cuda.matmul.allow_tf32 = False
        seen.clear()
        gemm_sweep.run(16, 8, [8], "cpu", dtypes=["tf32"], reps=1, warmup=0)
        assert seen and all(seen)
        assert torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="unknown sweep dtype"):
        gemm_sweep.run(16, 8, [8], "cpu", dtypes=["fp8"], reps=1, warmup=0)


def test_command_line_writes_a_readable_json(tmp_path):
    spec = tmp_path / "spec.json"
    out = tmp_path / "out" / "sweep.json"
    ns = list(range(1024 - 136, 1024 + 129, 8)) + [1001]  # 35 widths around 1024
    spec.write_text(
        json.dumps({"m": M, "k": K, "ns": ns, "dev": "cpu", "kernel_ns": [1001, 1024], "reps": 3, "warmup": 1})
    )
    proc = subprocess.run(
        [sys.executable, "-m", "lib.measure.gemm_sweep", str(spec), str(out)],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, describe_proc(proc)
    res = json.loads(out.read_text())
    assert len(res["points"]) == 2 * len(ns) == 70
    assert set(res["kernels"]["bf16"]) == {"1001", "1024"}


def test_command_line_without_arguments_is_a_usage_error():
    proc = subprocess.run(
        [sys.executable, "-m", "lib.measure.gemm_sweep"],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "usage" in proc.stderr
