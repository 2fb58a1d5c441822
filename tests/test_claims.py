"""Claims verdicts: computed from the table alone, and they flip when the data flips."""
from __future__ import annotations

import pandas as pd
import pytest

from lib import claims


def _df(rows):
    cols = ["stage", "batch_size", "status", "median_ms", "mem_tensors_bytes", "mem_allocator_bytes",
            "mem_device_bytes"]
    return pd.DataFrame(rows, columns=cols)


def _two_stages(fp32_ms, tf32_ms, fp32_mem=10e9, tf32_mem=10e9, status="ok"):
    return _df([("fp32", 16, "ok", fp32_ms, fp32_mem, fp32_mem, fp32_mem),
                ("tf32", 16, status, tf32_ms, tf32_mem, tf32_mem, tf32_mem)])


def _claim(cid):
    return next(c for c in claims.load()["claims"] if c["id"] == cid)


def test_every_claim_in_the_file_has_a_known_metric_and_an_expectation():
    data = claims.load()
    assert len(data["claims"]) >= 8
    for c in data["claims"]:
        assert c["metric"] in claims.METRICS
        assert c["metric"] == "kernels" or c["expect"]


def test_speedup_claim_is_confirmed_then_refuted_when_the_data_flips():
    claim = _claim("tf32-speedup")
    assert claims.verdict(claim, _two_stages(260.0, 100.0), "h100", "cuda")["verdict"] == "confirmed"
    slower = claims.verdict(claim, _two_stages(150.0, 100.0), "h100", "cuda")
    assert slower["verdict"] == "refuted: slower than claimed"
    assert slower["measured"].startswith("1.50×")


def test_memory_claim_flips_with_tensor_memory():
    claim = _claim("tf32-tensor-memory")
    assert claims.verdict(claim, _two_stages(2, 1), "h100", "cuda")["verdict"] == "confirmed"
    grown = claims.verdict(claim, _two_stages(2, 1, tf32_mem=12e9), "h100", "cuda")
    assert grown["verdict"].startswith("refuted") and "+20.0 %" in grown["measured"]


@pytest.mark.parametrize("profile, backend, status, expected", [
    ("a100", "cuda", "ok", "not applicable"),      # the vocab claim is about H100
    ("cpu", "cpu", "ok", "not applicable"),
    ("h100", "cuda", "oom", "not measured"),       # no timing for the stage
])
def test_not_applicable_and_not_measured(profile, backend, status, expected):
    claim = _claim("vocab-h100")
    df = _df([("flash", 16, "ok", 140.0, 1, 1, 1), ("vocab", 16, status, 100.0, 1, 1, 1)])
    assert claims.verdict(claim, df, profile, backend)["verdict"] == expected


def test_the_kernel_claim_says_not_measured():
    assert claims.verdict(_claim("lm-head-kernel"), _df([]), "h100", "cuda")["verdict"] == "not measured"
