"""The multi-GPU stage on the CPU: torchrun with 2 gloo processes must produce a valid row,
and on a single device the stage is a 'not applicable' row."""
from __future__ import annotations

import math

import pytest

from lib import config, runner


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    report_dir = tmp_path_factory.mktemp("ddp")
    params = config.load("cpu", [2])
    single = runner.run_stage("vocab", params, report_dir)[0]
    return single, runner.run_ddp(params, report_dir, nproc=2), params


def test_ddp_on_two_gloo_processes_gives_a_valid_row(ddp_run):
    single, rec, params = ddp_run
    assert single["status"] == "ok"
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["stage"] == "ddp" and rec["world_size"] == 2 and rec["backend_dist"] == "gloo"
    assert rec["batch_size"] == single["batch_size"] == rec["per_gpu_batch"]
    assert rec["tokens_per_s"] == pytest.approx(2 * rec["per_gpu_tokens_per_s"])
    # against one rank of the same job, measured just before it; the matrix row is kept alongside
    assert rec["one_rank_tokens_per_s"] > 0 and rec["efficiency_reference"] == "one rank of this DDP job"
    assert rec["scaling_efficiency"] == pytest.approx(rec["per_gpu_tokens_per_s"] / rec["one_rank_tokens_per_s"])
    assert rec["single_gpu_tokens_per_s"] == pytest.approx(single["tokens_per_s"])
    assert 0.0 <= rec["allreduce_share"] < 1.0
    assert rec["p10_ms"] <= rec["median_ms"] * 1.5  # the slowest rank's median, near the rank-0 spread
    r = params["run"]
    assert len(rec["losses"]) == r["warmup_steps"] + r["timed_steps"]
    assert all(math.isfinite(v) for v in rec["losses"])


def test_on_one_device_the_multi_gpu_stage_is_not_applicable(tmp_path):
    params = config.load("cpu", [2])
    rec = runner.run_stage("ddp", params, tmp_path / "rep")[0]
    assert rec["status"] == "not_applicable"
    assert "two or more GPUs" in rec["reason"]
