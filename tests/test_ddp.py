"""The multi-GPU stage on the CPU: torchrun with 2 gloo processes must produce a valid row,
and on a single device the stage is a 'not applicable' row."""
from __future__ import annotations

import math

import pytest

from lib import config, runner


@pytest.fixture(scope="module")
def vocab_report(tmp_path_factory):
    """A report folder with the single-GPU configuration DDP replicates: (folder, params, record)."""
    report_dir = tmp_path_factory.mktemp("ddp")
    params = config.load("cpu", [2])
    return report_dir, params, runner.run_stage("vocab", params, report_dir)[0]


@pytest.fixture(scope="module")
def ddp_run(vocab_report):
    report_dir, params, single = vocab_report
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


def _free_loopback_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_meet_at_the_rendezvous_and_only_node_zero_writes_the_record(vocab_report, tmp_path):
    """Two torchrun launches on this machine play two nodes of one process each (gloo, loopback
    rendezvous); node 0's report folder holds the single-GPU results, node 1's holds none."""
    import shutil
    import threading

    first, params, _ = vocab_report
    node_dirs = [tmp_path / "node0", tmp_path / "node1"]
    shutil.copytree(first, node_dirs[0], ignore=shutil.ignore_patterns("ddp__b*.json"))
    (node_dirs[1] / "results").mkdir(parents=True)
    shutil.copy(first / "environment.json", node_dirs[1] / "environment.json")
    rdzv = f"127.0.0.1:{_free_loopback_port()}"
    outcome = {}

    def node(rank):
        launch = config.check_launch("2", str(rank), rdzv)
        try:
            outcome[rank] = runner.run_ddp(params, node_dirs[rank], nproc=1, timeout_s=300, force=True, launch=launch)
        except Exception as e:  # the assertion below shows it
            outcome[rank] = e

    threads = [threading.Thread(target=node, args=(rank,), daemon=True) for rank in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=400)
    assert not any(t.is_alive() for t in threads), "a node never finished"
    rec = outcome[0]
    assert isinstance(rec, dict) and rec["status"] == "ok", rec if not isinstance(rec, dict) else rec.get("reason")
    assert rec["world_size"] == 2 and rec["nnodes"] == 2 and rec["backend_dist"] == "gloo"
    assert rec["fingerprint"].endswith("-n1-nodes2")
    assert math.isfinite(rec["final_loss"]) and all(math.isfinite(v) for v in rec["losses"])
    assert rec["efficiency_reference"] == "one rank of this DDP job"
    assert list((node_dirs[0] / "results").glob("ddp__b*.json"))
    assert outcome[1] is None, outcome[1]
    assert not list((node_dirs[1] / "results").glob("ddp__b*.json"))
