"""The multi-GPU stage on the CPU: torchrun with 2 gloo processes must produce a valid row,
and on a single device the stage is a 'not applicable' row. Records of different GPU counts
(2 and 3 gloo processes here, hosts of 2, 4 and 8 GPUs on real hardware) share a report folder
and make the chapter's scaling curve."""

from __future__ import annotations

import dataclasses
import math
import shutil

import numpy as np
import pytest
from conftest import make_record, tiny_params, write_report_dir

from lib.core import chapters, cli_args, config, stages
from lib.report import ddp_charts, loader, stage_facts
from lib.report.evidence_view import ddp_curve_html
from lib.results import store
from lib.run import ddp_launch, ddp_nodes, ddp_target, evidence, recipe, runner


@pytest.fixture(scope="module")
def vocab_report(tmp_path_factory):
    """A report folder with the single-GPU configuration DDP replicates: (folder, params, record)."""
    report_dir = tmp_path_factory.mktemp("ddp")
    params = config.load("cpu", [2])
    return report_dir, params, runner.run_stage("vocab", params, report_dir)[0]


@pytest.fixture(scope="module")
def ddp_run(vocab_report):
    report_dir, params, single = vocab_report
    return single, ddp_launch.run_ddp(params, report_dir, nproc=2), params


def test_ddp_on_two_gloo_processes_gives_a_valid_row(ddp_run):
    single, rec, params = ddp_run
    assert single["status"] == "ok"
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["stage"] == "ddp" and rec["world_size"] == 2 and rec["backend_dist"] == "gloo"
    assert rec["batch_size"] == single["batch_size"] == rec["per_gpu_batch"]
    assert rec["tokens_per_s"] == pytest.approx(2 * rec["per_gpu_tokens_per_s"])
    # Efficiency stated once, against the configuration on one GPU measured in this sitting (no recipe
    # here: the matrix's row); one rank of the same job beside it, named as such.
    assert rec["single_gpu_tokens_per_s"] == pytest.approx(single["tokens_per_s"])
    assert rec["efficiency_reference"] == "Vocab padded to 50304 at B=2 on one GPU (one process)"
    assert rec["scaling_efficiency"] == pytest.approx(rec["per_gpu_tokens_per_s"] / single["tokens_per_s"])
    assert rec["one_rank_tokens_per_s"] > 0
    assert rec["one_rank_efficiency"] == pytest.approx(rec["per_gpu_tokens_per_s"] / rec["one_rank_tokens_per_s"])
    # its memory is a sampled device peak like the single-GPU recipe's (reports/h100-x4's page 1 set a DDP row's
    # memory in use after the steps under the recipe's NVML peak): none on a CPU, with why
    assert rec["mem_device_sampled_peak_bytes"] is None and "NVML" in rec["mem_device_sampled_note"]
    # fresh processes by the repeats' rule: two, a third only where they differ beyond the tolerance
    runs = rec["process_runs"]
    assert rec["processes"]["n"] == len(runs) in (2, 3)
    spread_two = abs(runs[0]["tokens_per_s"] - runs[1]["tokens_per_s"]) / np.median(
        [r["tokens_per_s"] for r in runs[:2]]
    )
    assert (len(runs) == 3) == (spread_two > params.evidence.repeat_tolerance)
    assert rec["tokens_per_s"] == pytest.approx(np.median([r["tokens_per_s"] for r in runs]))
    assert rec["micro_steps"] == 1 and rec["global_batch_tokens"] == 2 * 2 * params.run.seq_len
    assert 0.0 <= rec["allreduce_share"] < 1.0
    assert rec["p10_ms"] <= rec["median_ms"] * 1.5  # the slowest rank's median, near the rank-0 spread
    r = params.run
    assert len(rec["losses"]) == r.warmup_steps + r.timed_steps
    assert all(math.isfinite(v) for v in rec["losses"])


def test_a_ddp_job_s_device_peak_is_its_largest_rank_s():
    from lib.measure import ddp

    note = {"mem_device_sampled_note": "peak of 40 readings"}
    assert ddp.most_memory(note, [-1.0, 5e9, 6e9])["mem_device_sampled_peak_bytes"] == 6_000_000_000
    assert ddp.most_memory(note, [-1.0, -1.0]) == {"mem_device_sampled_peak_bytes": None, **note}


def _recipe_report(vocab_report, tmp_path):
    """(params, folder): vocab_report's folder with a recipe of vocab at B=2 × 4 micro-steps timed at 8,000, 9,000
    and 9,500 tokens/s in three processes (synthetic records)."""
    report_dir, params, _ = vocab_report
    # vocab the baseline: verified, so recommended (the CPU default's check stage, fused, is not in this report)
    params = dataclasses.replace(
        params, stages=["vocab", "ddp"], evidence=dataclasses.replace(params.evidence, check_stage=None)
    )
    folder = tmp_path / "rep"
    shutil.copytree(report_dir, folder, ignore=shutil.ignore_patterns("ddp__b*.json"))
    assert params.micro_steps(2) == 4
    for k, tps in enumerate((8_000.0, 9_000.0, 9_500.0)):
        rec = make_record(params, "vocab", 2, times_ms=[512 / tps * 1e3] * 5, losses=[5.0] * 7)
        rec.update(variant="recipe: recommended", micro_steps=4, repeat=k, tokens_per_s=tps)
        store.write_atomic(folder / "results" / "recipe" / f"recommended__vocab__b2__r{k}.json", rec)
    return params, folder


def test_with_a_recipe_ddp_keeps_its_global_batch_and_is_judged_against_it(vocab_report, tmp_path):
    """The recipe measured vocab at B=2 in 4 micro-steps (the CPU profile's 512-token global batch) at a
    median of 9,000 tokens/s over three processes (synthetic records): two ranks share the accumulation,
    2 micro-steps each, and the efficiency divides by 9,000, the same global batch on one GPU."""
    params, folder = _recipe_report(vocab_report, tmp_path)
    rec = ddp_launch.run_ddp(params, folder, nproc=2)
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["micro_steps"] == 2 and rec["global_batch_tokens"] == 512 == params.evidence.global_batch_tokens
    assert rec["single_gpu_tokens_per_s"] == pytest.approx(9_000.0)
    assert rec["scaling_efficiency"] == pytest.approx(rec["tokens_per_s"] / 2 / 9_000.0)
    assert "B=2 × 4 micro-steps on one GPU" in rec["efficiency_reference"]
    assert "median of 3 processes" in rec["efficiency_reference"]
    r = recipe.recipe_params(params).run
    assert len(rec["losses"]) == r.warmup_steps + r.timed_steps  # each step a whole global batch
    # over 4 ranks, one micro-step each: still GPT-2's batch a step, still the recipe's steps (reports/h100-x4's
    # 4-GPU job took the matrix's)
    assert ddp_launch.job_params(params, 2, 1, 4).run == r and ddp_launch.job_params(params, 2, 1, 2).run == params.run
    three = ddp_launch.plan(params, folder, nproc=3, nnodes=1)["target"]  # 4 × 2 sequences over 3 ranks
    assert (
        three["micro_steps"] == 1 and "the recipe's 4 × B=2 sequences a step do not divide among 3" in three["source"]
    )
    # eight ranks: 4 accumulation steps do not divide among them, GPT-2's batch does (an 8-GPU host's B=128 × 4 recipe
    # leaves each rank one micro-step of 64 sequences)
    eight = ddp_launch.plan(params, folder, nproc=8, nnodes=1)["target"]
    assert (eight["batch_size"], eight["micro_steps"], eight["tokens_per_s"]) == (1, 1, pytest.approx(9_000.0))
    assert "do not divide among 8 ranks, so each rank runs B=1 × 1: GPT-2's batch still" in eight["source"]


@pytest.mark.slow
def test_eight_gloo_ranks_train_gpt2_s_batch_one_micro_step_each_against_the_one_gpu_recipe(vocab_report, tmp_path):
    """An eight-GPU host's job played by eight gloo processes: the recipe's 4 micro-steps of B=2 become one sequence
    a rank, every step still the whole 512-token batch, its efficiency over the recipe's one-GPU median."""
    params, folder = _recipe_report(vocab_report, tmp_path)
    rec = ddp_launch.run_ddp(params, folder, nproc=8, timeout_s=600)
    assert rec["status"] == "ok", rec.get("reason")
    assert (rec["world_size"], rec["batch_size"], rec["micro_steps"]) == (8, 1, 1)
    assert rec["global_batch_tokens"] == 512 == params.evidence.global_batch_tokens
    assert rec["scaling_efficiency"] == pytest.approx(rec["tokens_per_s"] / 8 / 9_000.0)
    assert "so each rank runs B=1 × 1: GPT-2's batch still" in rec["efficiency_reference"]  # which, and why
    assert store.record_path(folder / "results", "ddp", 1, gpus=8).exists()
    assert all(math.isfinite(v) for v in rec["losses"])


def test_a_rank_s_share_of_the_recipe_keeps_its_micro_batch_where_the_steps_divide_else_the_largest_that_fits():
    assert ddp_target.shared(128, 4, 2) == (128, 2) and ddp_target.shared(128, 4, 4) == (128, 1)
    assert ddp_target.shared(128, 4, 8) == (64, 1)  # GPT-2's 512 sequences over 8 GPUs
    assert ddp_target.shared(96, 6, 4) == (72, 2)  # 144 sequences a rank, micro-batches no larger than the recipe's
    assert ddp_target.shared(128, 4, 3) is None  # 512 sequences do not divide among 3


def test_on_one_device_the_multi_gpu_stage_is_not_applicable(tmp_path):
    params = config.load("cpu", [2])
    rec = evidence.measure_chapter("ddp", params, tmp_path / "rep")[0]
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
        launch = cli_args.check_launch("2", str(rank), rdzv)
        try:
            outcome[rank] = ddp_launch.run_ddp(
                params, node_dirs[rank], nproc=1, timeout_s=300, force=True, launch=launch
            )
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
    assert "-n1-accum1-" in rec["fingerprint"] and rec["fingerprint"].endswith("-nodes2")
    assert math.isfinite(rec["final_loss"]) and all(math.isfinite(v) for v in rec["losses"])
    assert rec["one_rank_tokens_per_s"] > 0 and rec["processes"]["n"] == 2  # several nodes: two processes each
    assert list((node_dirs[0] / "results").glob("ddp__b*.json"))
    assert outcome[1] is None, outcome[1]
    assert not list((node_dirs[1] / "results").glob("ddp__b*.json"))


# ---------------------------------------------------------------- the scaling curve

SINGLE_TPS = 10_000.0  # the synthetic vocab stage below: B=4 x T=64 tokens in 25.6 ms


def _single_gpu_report(tmp_path, ddp_records=()):
    """A report folder whose recommended configuration is vocab at B=4 on one GPU (10,000 tokens/s;
    the vocab stage is the baseline, so its loss counts as verified), plus `ddp_records` written
    under the file names given: [(file name, record)]."""
    params = tiny_params(["vocab", "ddp"], batch_sizes=(4,))
    steps = params.run.warmup_steps + params.run.timed_steps
    single = make_record(params, "vocab", 4, times_ms=[25.6] * 5, losses=[5.0] * steps)
    report_dir = write_report_dir(tmp_path / "rep", params, [single])
    for name, rec in ddp_records:
        store.write_atomic(report_dir / "results" / name, rec)
    return report_dir, params


def _ddp_record(params, gpus: int, tokens_per_s: float, allreduce_share: float, one_rank_efficiency=None) -> dict:
    """A DDP record as lib/measure/ddp.py writes one (vocab replicated at B=4 per GPU), with chosen figures."""
    rec = store.base_record(params, stages.get("ddp"), 4)
    rec.update(
        fingerprint=f"synthetic-n{gpus}",
        world_size=gpus,
        nnodes=1,
        per_gpu_batch=4,
        base_stage="vocab",
        tokens_per_s=tokens_per_s,
        per_gpu_tokens_per_s=tokens_per_s / gpus,
        median_ms=4 * 64 * gpus / tokens_per_s * 1e3,
        allreduce_share=allreduce_share,
        backend_dist="nccl",
        single_gpu_tokens_per_s=SINGLE_TPS,
        one_rank_tokens_per_s=None,
        scaling_efficiency=one_rank_efficiency,
        efficiency_reference="one rank of this DDP job" if one_rank_efficiency else None,
    )
    return rec


def test_the_scaling_curve_has_one_point_per_gpu_count_against_the_best_single_gpu_configuration(tmp_path):
    """2, 4 and 8 GPUs at 19,000, 36,000 and 64,000 tokens/s against 10,000 on one GPU: speed-ups
    1.9, 3.6 and 6.4, efficiencies 19,000 / (2 x 10,000) = 95 %, 36,000 / 40,000 = 90 %, 64,000 /
    80,000 = 80 %. The 2-GPU record keeps the name committed reports use (ddp__b4.json)."""
    params = tiny_params(["vocab", "ddp"], batch_sizes=(4,))
    report_dir, _ = _single_gpu_report(
        tmp_path,
        [
            ("ddp__b4.json", _ddp_record(params, 2, 19_000.0, 0.02, one_rank_efficiency=0.97)),
            (store.record_path(".", "ddp", 4, gpus=4).name, _ddp_record(params, 4, 36_000.0, 0.05)),
            (store.record_path(".", "ddp", 4, gpus=8).name, _ddp_record(params, 8, 64_000.0, 0.12)),
        ],
    )
    rep = loader.load(report_dir)
    curve = loader.scaling_curve(rep)
    assert [p["gpus"] for p in curve] == [1, 2, 4, 8]
    assert [p["tokens_per_s"] for p in curve] == pytest.approx([10_000, 19_000, 36_000, 64_000])
    assert [p["speedup"] for p in curve] == pytest.approx([1.0, 1.9, 3.6, 6.4])
    assert [p["efficiency"] for p in curve] == pytest.approx([1.0, 0.95, 0.90, 0.80])
    assert [p["per_gpu_tokens_per_s"] for p in curve] == pytest.approx([10_000, 9_500, 9_000, 8_000])
    assert [p["allreduce_share"] for p in curve] == [None, 0.02, 0.05, 0.12]
    assert [p["per_gpu_batch"] for p in curve] == [4, 4, 4, 4] and all(p["same_config"] for p in curve)
    # the one-rank efficiency the record carries stays beside the curve's, where it was measured
    assert [p["one_rank_efficiency"] for p in curve] == [None, 0.97, None, None]
    table = ddp_curve_html(rep)
    assert all(f in table for f in ("95.0 %", "90.0 %", "80.0 %", "12.0 %", "6.40×", "10,000 tokens/s"))
    assert "the recommended configuration" in table
    assert ddp_charts.plot_ddp_scaling(rep) is not None and (report_dir / "figures" / "ddp_scaling.png").exists()
    # the summary quotes the most GPUs measured
    assert "The most GPUs measured, 8 GPUs" in stage_facts.stage_summary(rep, "ddp")


def test_one_multi_gpu_count_still_draws_a_curve_and_none_says_so(tmp_path):
    params = tiny_params(["vocab", "ddp"], batch_sizes=(4,))
    one, _ = _single_gpu_report(
        tmp_path / "one", [(store.record_path(".", "ddp", 4, gpus=2).name, _ddp_record(params, 2, 15_000.0, 0.1))]
    )
    rep = loader.load(one)
    assert [(p["gpus"], p["efficiency"]) for p in loader.scaling_curve(rep)] == [(1, 1.0), (2, pytest.approx(0.75))]
    assert ddp_charts.plot_ddp_scaling(rep) is not None and (one / "figures" / "ddp_scaling.png").exists()

    not_applicable = store.base_record(params, stages.get("ddp"), 4)
    not_applicable.update(
        status="not_applicable", reason="one GPU on this host: data parallelism needs two or more GPUs"
    )
    none, _ = _single_gpu_report(tmp_path / "none", [(store.record_path(".", "ddp", 4, gpus=1).name, not_applicable)])
    rep = loader.load(none)
    assert loader.scaling_curve(rep) == []
    assert ddp_charts.plot_ddp_scaling(rep) is None and not (none / "figures" / "ddp_scaling.png").exists()
    assert "no scaling curve" in ddp_curve_html(rep)
    assert "not applicable" in stage_facts.stage_summary(rep, "ddp")


def test_a_run_with_another_gpu_count_keeps_the_records_of_the_others(tmp_path):
    """This CPU is one device, so the DDP stage writes its 'not applicable' record (for 1 GPU): the
    records of 2 GPUs (old-style name) and 4 GPUs stay, an old-style record whose count is unknown
    gives way, and the report shows the measured rows, not the one-GPU host's 'not applicable'."""
    params = tiny_params(["vocab", "ddp"], batch_sizes=(4,))
    unknown = store.base_record(params, stages.get("ddp"), 2)
    unknown.update(status="error", reason="an old failure, named before the GPU count was")
    report_dir, _ = _single_gpu_report(
        tmp_path,
        [
            ("ddp__b4.json", _ddp_record(params, 2, 19_000.0, 0.02)),
            (store.record_path(".", "ddp", 4, gpus=4).name, _ddp_record(params, 4, 36_000.0, 0.05)),
            ("ddp__b2.json", unknown),
        ],
    )
    rec = ddp_launch.run_ddp(params, report_dir)
    assert rec["status"] == "not_applicable"
    names = sorted(p.name for p in (report_dir / "results").glob("ddp__*.json"))
    assert names == ["ddp__b4.json", "ddp__b4__g1.json", "ddp__b4__g4.json"]
    rep = loader.load(report_dir)
    assert [p["gpus"] for p in loader.scaling_curve(rep)] == [1, 2, 4]
    assert sorted(r["status"] for r in rep.records if r["stage"] == "ddp") == ["ok", "ok"]
    # A record of this GPU count under its old-style name, as an earlier run left it, is resumed
    # under the new name (its fingerprint still decides), not measured again beside it.
    res = report_dir / "results"
    (res / "ddp__b4.json").unlink()
    (res / "ddp__b4__g1.json").unlink()
    earlier = {**rec, "marker": "written by an earlier run"}
    store.write_atomic(res / "ddp__b4.json", earlier)
    assert ddp_launch.run_ddp(params, report_dir) == earlier
    assert sorted(p.name for p in res.glob("ddp__*.json")) == ["ddp__b4__g1.json", "ddp__b4__g4.json"]


def test_two_and_three_gloo_processes_land_in_one_report_and_draw_the_curve(ddp_run, vocab_report):
    """The 2-process run of ddp_run, then 3 processes into the same folder: both records stay, and
    the curve runs 1, 2, 3 against the vocab stage's single-process row (the report's baseline
    here, so it is the recommended configuration)."""
    report_dir, params, single = vocab_report
    _, two, _ = ddp_run
    three = ddp_launch.run_ddp(params, report_dir, nproc=3)
    assert three["status"] == "ok", three.get("reason")
    assert three["world_size"] == 3 and two["world_size"] == 2
    assert store.record_path(report_dir / "results", "ddp", two["batch_size"], gpus=2).exists()
    assert store.record_path(report_dir / "results", "ddp", three["batch_size"], gpus=3).exists()
    store.write_atomic(report_dir / "params.json", dataclasses.replace(params, stages=["vocab", "ddp"]))
    rep = loader.load(report_dir)
    curve = loader.scaling_curve(rep)
    assert [p["gpus"] for p in curve] == [1, 2, 3]
    assert curve[0]["tokens_per_s"] == pytest.approx(single["tokens_per_s"])
    for point, rec in zip(curve[1:], (two, three)):
        assert point["tokens_per_s"] == pytest.approx(rec["tokens_per_s"])
        assert point["efficiency"] == pytest.approx(rec["tokens_per_s"] / (rec["world_size"] * single["tokens_per_s"]))
        assert point["allreduce_share"] == pytest.approx(rec["allreduce_share"])
    assert ddp_charts.plot_ddp_scaling(rep) is not None


# ---------------------------------------------------------------- a four-GPU host: counts, nodes, interconnect


def test_the_scaling_curve_counts_are_the_doublings_up_to_the_host_s_own_and_four_or_more_rehearse_two_nodes():

    assert [chapters.ddp_points(n) for n in (1, 2, 3)] == [[], [(2, 1)], [(2, 1), (3, 1)]]
    assert chapters.ddp_points(4) == [(2, 1), (4, 1), (4, 2)]
    assert chapters.ddp_points(8) == [(2, 1), (4, 1), (8, 1), (8, 2)]


def test_a_job_over_two_nodes_has_a_record_of_its_own_beside_the_one_node_record_of_as_many_gpus(tmp_path):
    """The curve reads 1, 2, 4 GPUs on one node; the rehearsed two nodes of two GPUs are a row beside the 4-GPU one."""
    params = tiny_params(["vocab", "ddp"], batch_sizes=(4,))
    two, four = _ddp_record(params, 2, 19_000.0, 0.02), _ddp_record(params, 4, 37_000.0, 0.03)
    nodes = {**_ddp_record(params, 4, 35_000.0, 0.05), "nnodes": 2}
    names = [store.record_path(".", "ddp", 4, gpus=g, nodes=n).name for g, n in ((2, 1), (4, 1), (4, 2))]
    assert names == ["ddp__b4__g2.json", "ddp__b4__g4.json", "ddp__b4__g4__n2.json"]
    report_dir, _ = _single_gpu_report(tmp_path, list(zip(names, (two, four, nodes))))
    rep = loader.load(report_dir)
    curve = loader.scaling_curve(rep)
    assert [(p["gpus"], p["nnodes"]) for p in curve] == [(1, 1), (2, 1), (4, 1), (4, 2)]
    assert [round(p["efficiency"], 3) for p in curve] == [1.0, 0.95, 0.925, 0.875]
    assert "4 (2 nodes)" in ddp_curve_html(rep)
    assert ddp_charts.plot_ddp_scaling(rep) is not None


def test_a_four_gpu_host_s_job_left_unmeasured_is_named_with_why_and_the_rehearsal_is_no_recipe(tmp_path):
    """reports/h100-x4 (2026-11-27): the device time ran out during the two-node rehearsal, its run left 'running' by
    a process gone with its machine; the report said only "incomplete". The job is named, with why; and a two-node
    record of as many GPUs never stands in for the one-node job in the recipe (keyed by world size alone, it did)."""
    from lib.results import recipe_decision

    params = tiny_params(["vocab", "ddp"], batch_sizes=(4,))
    two, four = _ddp_record(params, 2, 19_000.0, 0.02), _ddp_record(params, 4, 37_000.0, 0.03)
    names = [store.record_path(".", "ddp", 4, gpus=g).name for g in (2, 4)]
    report_dir, _ = _single_gpu_report(tmp_path, list(zip(names, (two, four))))
    env = {"device": {"backend": params.backend, "name": "x", "count": 4}, "torch": "x"}
    store.write_atomic(report_dir / "environment.json", env)
    store.write_atomic(report_dir / "run.json", {"state": "running", "pid": 1, "host_id": "host-of-another-machine"})
    rep = loader.load(report_dir)
    assert loader.ddp_not_measured(rep) == [
        {
            "gpus": 4,
            "nnodes": 2,
            "reason": "not reached: the measuring run stopped before it (the process ended "
            "without closing its run, killed or its machine gone)",
        }
    ]
    assert "Not measured:</strong> 4 GPUs as 2 nodes of 2 rehearsed on this host: not reached" in ddp_curve_html(rep)
    # the summary's HTML says it once, in section 2's host account; the table under it does not repeat it
    from lib.report import evidence_view

    assert "Not measured" in evidence_view.host_html(rep)
    assert "Not measured" not in evidence_view.ddp_curve_table_html(rep)
    from lib.report import page_one  # and page 1 says so where the reader starts

    assert "incomplete</strong>: DDP as 2 machines of 2 GPUs not measured (section 2)" in (
        page_one.provenance_line(rep)
    )
    # the rehearsal's record, faster than the one-node job here, is the DDP chapter's, not the recipe's
    nodes = {**_ddp_record(params, 4, 39_000.0, 0.05), "nnodes": 2}
    chosen = recipe_decision.records_multi_gpu([two, four, nodes])
    assert [(r["world_size"], r["tokens_per_s"]) for r in chosen] == [(2, 19_000.0), (4, 37_000.0)]


def test_the_interconnect_without_nvml_or_nvidia_smi_says_why_and_the_table_line_reads_it(monkeypatch):
    import subprocess

    from lib.measure import interconnect
    from lib.report import interconnect_view

    def no_smi(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    class NoNvml:
        def nvmlInit(self):
            raise OSError("libnvidia-ml.so.1 not found")

    absent = interconnect.nvlinks(4, nvml=NoNvml())
    assert absent == {"nvlink": None, "nvlink_reason": "NVML unavailable (OSError)"}
    monkeypatch.setattr(subprocess, "run", no_smi)
    topo = interconnect.topology()
    assert topo["topology"] is None and "nvidia-smi topo -m" in topo["topology_reason"]
    line = interconnect_view.summary({**absent, **topo, "nccl": None})
    assert line == "NVML unavailable (OSError); NCCL version unknown"

    class FourLinked:  # NVML's answers on a host of H100s, NV18 links (its version enum: 6 is NVLink 4.0)
        NVML_NVLINK_MAX_LINKS = 18

        def nvmlInit(self):
            pass

        def nvmlDeviceGetHandleByIndex(self, i):
            return i

        def nvmlDeviceGetNvLinkState(self, h, link):
            return 1

        def nvmlDeviceGetNvLinkVersion(self, h, link):
            return 6

    linked = interconnect.nvlinks(4, nvml=FourLinked())
    assert [g["active_links"] for g in linked["nvlink"]] == [18] * 4
    assert interconnect_view.summary({**linked, "nccl": "2.27.3"}) == (
        "18 active NVLinks per GPU, NVLink 4.0; NCCL 2.27.3"  # reports/h100-x4 said "generation 6"
    )


def test_a_node_that_only_contributes_ranks_leaves_the_shared_folder_s_records_alone(
    vocab_report, tmp_path, monkeypatch
):
    """Two nodes rehearsed on one host share one folder: node 1 moving the kept two-node record aside raced node 0
    doing the same, failed, and left node 0 alone at the rendezvous until it timed out (CI, stop 59)."""
    first, params, single = vocab_report
    folder = tmp_path / "host"
    shutil.copytree(first, folder, ignore=shutil.ignore_patterns("ddp__b*.json"))
    kept = store.record_path(folder / "results", "ddp", single["batch_size"], gpus=2, nodes=2)
    store.write_atomic(kept, {**single, "stage": "ddp", "nnodes": 2, "world_size": 2, "fingerprint": "earlier"})
    monkeypatch.setattr(ddp_launch, "_torchrun", lambda *a, **k: None)  # node 1's ranks ran; node 0 writes
    launch = {"nnodes": 2, "node_rank": 1, "rdzv": "127.0.0.1:29400", "visible": "1"}
    assert ddp_launch.run_ddp(params, folder, nproc=1, force=True, launch=launch) is None
    assert kept.exists() and not list((folder / "superseded").glob("*"))


@pytest.mark.slow
def test_two_nodes_rehearsed_on_one_host_write_a_two_node_record_and_a_resumed_run_keeps_it(vocab_report, tmp_path):
    """On this CPU each rehearsed node is one gloo process; they meet at this host's own address through the c10d
    rendezvous, and node 0 writes the record of a two-node job; asked again, the kept record comes back unmeasured."""
    first, params, _ = vocab_report
    folder = tmp_path / "host"
    shutil.copytree(first, folder, ignore=shutil.ignore_patterns("ddp__b*.json"))
    rec = ddp_nodes.rehearse_two_nodes(params, folder, per_node=1, timeout_s=300)
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["nnodes"] == 2 and rec["world_size"] == 2 and rec["fingerprint"].endswith("-nodes2")
    assert [p.name for p in (folder / "results").glob("ddp__b*.json")] == [f"ddp__b{rec['batch_size']}__g2__n2.json"]
    again = ddp_nodes.rehearse_two_nodes(params, folder, per_node=1, timeout_s=300)
    assert again["fingerprint"] == rec["fingerprint"] and again["processes"] == rec["processes"]
    # Where the one-node job of as many GPUs ran, the rehearsal takes its one-rank figure (the same job on one rank)
    # and times none of its own: on the 4-GPU host it cost a minute while the second node waited.
    one_node = {**rec, "nnodes": 1, "one_rank_tokens_per_s": 12_345.0}
    store.write_atomic(store.record_path(folder / "results", "ddp", rec["batch_size"], gpus=2), one_node)
    forced = ddp_nodes.rehearse_two_nodes(params, folder, per_node=1, timeout_s=300, force=True)
    assert forced["status"] == "ok" and forced["one_rank_tokens_per_s"] == 12_345.0, forced.get("reason")


def test_a_single_gpu_s_idle_nvlinks_read_as_no_peer_not_as_pcie_only():
    """reports/h100's environment said "no active NVLink (PCIe only)" of an SXM H100 alone on its host."""
    from lib.report import interconnect_view

    idle = {"active_links": 0, "nvlink_version": None}
    assert "one GPU: no peer" in interconnect_view.summary({"nvlink": [idle], "nccl": "2.27"})
    assert "PCIe only" in interconnect_view.summary({"nvlink": [idle, idle], "nccl": "2.27"})


def test_a_seed_run_on_another_gpu_of_the_host_is_stamped_with_that_gpu_s_uuid(monkeypatch):
    """reports/h100-x4: the quality test's seeds ran on the host's four GPUs at once, every record stamped with GPU 0's
    UUID. A child of a parity lane sees its GPU alone, as device 0: its stamp names that GPU."""
    from types import SimpleNamespace

    import torch

    from lib.measure import environment

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(uuid="3d8dd2a2-4539"))
    stamp = {"host_id": "host-a", "gpu_uuid": "GPU-f74cbc76"}
    assert environment.own_gpu_stamp({"stamp": stamp, "device": 3}) == {
        "host_id": "host-a",
        "gpu_uuid": "GPU-3d8dd2a2-4539",
    }
    assert environment.own_gpu_stamp({"stamp": stamp, "device": None}) is stamp  # a job on the run's own GPU
    cpu = {"host_id": "host-a", "gpu_uuid": None}
    assert environment.own_gpu_stamp({"stamp": cpu, "device": 1}) is cpu


def test_a_ddp_point_s_lost_efficiency_splits_into_the_wrapper_all_gpus_at_once_and_the_all_reduce():
    """Issue 64: where the lost points go, from what the DDP job measures (its step with and without the all-reduce,
    the same job on one rank) against the one-GPU reference; the figures of four H200s (reports/probes/ddp-h200-x4)."""
    from lib.results import scaling

    single = {"stage": "loss_only", "batch_size": 64, "tokens_per_s": 574_762.0, "recommended": True}
    point = {
        "stage": "ddp",
        "status": "ok",
        "world_size": 4,
        "nnodes": 1,
        "batch_size": 64,
        "base_stage": "loss_only",
        "tokens_per_s": 2_140_483.0,
        "one_rank_tokens_per_s": 556_755.0,
        "one_rank_efficiency": 2_140_483.0 / 4 / 556_755.0,
        "allreduce_share": 1 - 243.57 / 244.94,
    }
    one, four = scaling.curve([point], single)
    lost = four["lost"]
    assert one["lost"] is None and four["efficiency"] == pytest.approx(0.931, abs=5e-4)
    assert lost["wrapper"] == pytest.approx(0.0301, abs=5e-4)  # 235.4 ms on one rank against 228.0 on one GPU
    assert lost["allreduce"] == pytest.approx(0.0056, abs=5e-4)
    assert lost["wrapper"] + lost["at_once"] + lost["allreduce"] == pytest.approx(1 - four["efficiency"])
    alone = scaling.curve([{**point, "one_rank_tokens_per_s": None}], single)[1]["lost"]
    assert alone["wrapper"] is None and alone["rest"] == pytest.approx(lost["wrapper"] + lost["at_once"])


def test_a_ddp_job_trains_the_one_gpu_recipe_s_batches_so_its_losses_are_the_recipe_s(vocab_report, tmp_path):
    """Issue 64's loss check: step i of the job trains the sequences of step i of the one-GPU recipe, its loss the
    ranks' mean. Each rank had read its own run of the corpus (rank 1's first batch was rank 0's second), and the
    record kept rank 0's loss alone, so no DDP loss could be held to one GPU's."""

    from lib.core import data
    from lib.results import scaling
    from lib.train import step

    params, folder = _recipe_report(vocab_report, tmp_path)
    rec = ddp_launch.run_ddp(params, folder, nproc=2)
    assert rec["status"] == "ok", rec.get("reason")
    one = recipe.recipe_params(params)  # the job's steps: the recipe's
    n = one.run.warmup_steps + one.run.timed_steps
    train = step.build(one, stages.get("vocab"), "cpu", micro_steps=4)
    xs, ys = data.device_batches(one, 8, n, "cpu")
    alone = [float(train(xs[i], ys[i])) for i in range(n)]
    assert rec["losses"] == pytest.approx(alone, abs=2e-3)  # the same batches, gradients reduced in another order
    single = {"stage": "vocab", "batch_size": 2, "tokens_per_s": 9_000.0}
    point = scaling.curve([rec], single, float(np.mean(alone[-3:])), params.run.loss_tolerance)[1]
    assert point["loss"]["holds"] and abs(point["loss"]["diff"]) < 2e-3


def test_the_ddp_chapter_shows_the_code_its_records_ran(ddp_run):
    """reports/h100-x4's DDP jobs ran before DDP took its bucket settings: its chapter had shown them, as the registry
    says today. The code shown is what each record ran with."""
    from types import SimpleNamespace

    from lib.report import tables

    _, rec, _ = ddp_run
    assert dict(map(tuple, rec["ddp_options"])) == dict(stages.DDP_OPTIONS)
    now = tables.switch(SimpleNamespace(records=[rec]), "ddp")
    assert "bucket_cap_mb=100" in now and "gradient_as_bucket_view=True" in now
    before = {k: v for k, v in rec.items() if k != "ddp_options"}
    assert "DistributedDataParallel(model)" in tables.switch(SimpleNamespace(records=[before]), "ddp")
