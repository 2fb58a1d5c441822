"""Measure the lever, not the harness: one step core applies every switch, the plain-loop
cross-check, the loss gate over every step, the parity run, and noise measured across processes."""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest
import torch
from conftest import make_record, tiny_params

from lib.core import stages
from lib.measure import ddp, parity_run, worker
from lib.results import decide, noise, stats, store
from lib.train import plain_loop, step

LIB = Path(__file__).resolve().parent.parent / "lib"
# The calls that apply a stage's switches or make up a training step. Only the step core may make
# them; the plain loop is the oracle and must not share the code it checks.
SWITCH_CALLS = (
    "set_float32_matmul_precision",
    "torch.autocast",
    "torch.compile",
    "AdamW",
    "clip_grad_norm_",
    "zero_grad",
    "DistributedDataParallel",
    "convert_linears",
)


def _calls(path: Path) -> set[str]:
    """Names of the functions a module calls (code only: the switch texts in strings don't count)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            dotted = ast.unparse(node.func)
            names |= {dotted, dotted.rsplit(".", 1)[-1], ".".join(dotted.split(".")[-2:])}
    return names


@pytest.mark.parametrize("name", SWITCH_CALLS)
def test_only_the_step_core_applies_a_switch(name):
    found = sorted(
        str(p.relative_to(LIB))
        for p in LIB.rglob("*.py")
        if name in _calls(p)
        and p.name not in ("step.py", "plain_loop.py")
        and not (name == "torch.autocast" and p.name == "fp8.py")
    )
    assert found == [], f"{name}() called outside lib/train/step.py: {found}"


def test_the_scan_sees_the_switches_in_the_step_core():
    assert set(SWITCH_CALLS) - {"DistributedDataParallel"} <= _calls(LIB / "train" / "step.py")


def test_the_plain_loop_imports_nothing_from_lib_but_the_data():
    text = (LIB / "train" / "plain_loop.py").read_text()
    assert re.findall(r"^\s*(?:from|import) (lib[\w.]*)(?: import (.+))?$", text, re.M) == [("lib.core", "data")]


class _Spy:
    """Wraps step.build and records the stage (and the wrapper) every caller built."""

    def __init__(self, monkeypatch):
        self.calls, real = [], step.build

        def build(params, stage, dev, wrap=None, micro_steps=1, wrap_options=()):
            self.calls.append((stage, wrap))
            return real(params, stage, dev, wrap=wrap, micro_steps=micro_steps, wrap_options=wrap_options)

        monkeypatch.setattr(step, "build", build)


def test_a_matrix_measurement_builds_its_step_from_the_core(monkeypatch):
    spy = _Spy(monkeypatch)
    params = tiny_params(["fp32", "fused"])
    rec = worker.run({"params": params, "stage": "fused", "batch_size": 2, "profile": False, "energy": False})
    assert rec["status"] == "ok"
    assert [s.key for s, _ in spy.calls] == ["fused"] and spy.calls[0][0].fused_adamw


def test_a_ddp_rank_builds_the_same_step_with_every_switch_of_its_base_stage(monkeypatch):
    """DDP can no longer drop a switch: it asks the core for the base stage's step, wrapped."""
    spy = _Spy(monkeypatch)
    for k, v in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(29500 + os.getpid() % 1000),
    }.items():
        monkeypatch.setenv(k, v)
    params = tiny_params(["fp32", "fused"])
    rec = ddp.run({"params": params, "batch_size": 2, "base_stage": "fused"})
    assert rec["status"] == "ok" and rec["base_stage"] == "fused"
    # the same initial weights as every single-GPU stage, so the report can verify it
    single = worker.run({"params": params, "stage": "fused", "batch_size": 2, "profile": False, "energy": False})
    assert rec["init_checksum"] == single["init_checksum"]
    (stage, wrap), _ = spy.calls
    assert stage == stages.get("fused") and wrap is torch.nn.parallel.DistributedDataParallel


def test_accumulating_micro_batches_gives_the_same_training_as_the_whole_batch():
    """The parity run's reference may accumulate gradients where the batch does not fit at once."""
    params = tiny_params(["fp32"], batch_sizes=(4,))
    job = {"params": params, "stage": "fp32", "batch_size": 4, "steps": 6, "held_out_batches": 2}
    whole, split = parity_run.parity_run(job)[0], parity_run.parity_run({**job, "micro_steps": 2})[0]
    assert whole["status"] == split["status"] == "ok" and split["micro_steps"] == 2
    assert split["losses"] == pytest.approx(whole["losses"], abs=1e-4)
    assert split["held_out_loss"] == pytest.approx(whole["held_out_loss"], abs=1e-4)


def test_the_plain_loop_trains_and_times_a_stage_on_the_cpu():
    params = tiny_params(["fp32", "vocab"])
    vocab = stages.get("vocab")
    switches = {
        k: getattr(vocab, k) for k in ("tf32", "autocast", "attention", "padded_vocab", "fused_adamw", "compile")
    }
    rec = plain_loop.run({"params": params, "stage": "vocab", "batch_size": 2, "switches": switches})
    r = params.run
    assert rec["status"] == "ok" and len(rec["synced_step_ms"]) == r.timed_steps
    assert len(rec["losses"]) == r.warmup_steps + 2 * r.timed_steps
    assert rec["losses"][-1] < rec["losses"][0]  # it trains
    assert rec["tokens_per_s"] == pytest.approx(2 * r.seq_len / (rec["ms_per_step"] / 1e3))


# ---------------------------------------------------------------- the loss gate


def _gate(excursion: float):
    """The reference flat; the stage equal to it except steps 8-12, where it is `excursion` off."""
    params = tiny_params(["fp32", "tf32"], warmup=2, timed=18)
    ref = [5.0 - 0.05 * i for i in range(20)]
    stage = [v + (excursion if 8 <= i <= 12 else 0.0) for i, v in enumerate(ref)]
    times = [10.0] * 18
    recs = [make_record(params, "fp32", 2, times, ref), make_record(params, "tf32", 2, times, stage)]
    df = decide.table(recs, ["fp32", "tf32"], params.run.loss_tolerance)
    return df[df["stage"] == "tf32"].iloc[0]


def test_the_loss_gate_fails_a_mid_run_excursion_although_the_last_steps_agree():
    row = _gate(excursion=0.3)
    assert row["loss_delta"] == pytest.approx(0.0)  # the final window alone would pass it
    assert row["loss_gap"] == pytest.approx(0.3)
    assert row["loss_within_tolerance"] is False


def test_the_loss_gate_passes_the_same_run_without_the_excursion():
    row = _gate(excursion=0.0)
    assert row["loss_gap"] == 0.0 and row["loss_within_tolerance"] is True


def test_a_small_excursion_inside_the_band_passes():
    tol = tiny_params().run.loss_tolerance
    row = _gate(excursion=tol * 0.9)
    assert row["loss_within_tolerance"] is True


def test_the_loss_gate_ignores_the_warm_up_steps():
    assert stats.loss_gap([9.0, 5.0, 5.0, 5.0], [1.0, 5.0, 5.0, 5.0], skip=1) == 0.0
    assert stats.loss_gap([1.0, float("nan")], [1.0, 1.0], skip=0) == float("inf")


# ---------------------------------------------------------------- noise


def test_within_noise_flips_when_the_spread_grows():
    a, b = [103.0, 103.0, 103.0], [100.0, 100.0, 100.0]
    assert noise.within_noise(a, b, floor=None) is False  # their own ranges are 0: a real 3 %
    assert noise.within_noise([103.0, 99.0, 107.0], b, floor=None) is True  # a's range is 7.8 %
    assert noise.within_noise([103.0], b, floor=0.01) is False
    assert noise.within_noise([103.0], b, floor=0.05) is True  # a ran once: the report's floor
    assert noise.within_noise([103.0], [100.0], floor=None) is None  # no noise measured


def _repeats(params, stage, batch, tps_values, mem):
    out = []
    for k, tps in enumerate(tps_values):
        ms = batch * params.run.seq_len / tps * 1e3
        rec = make_record(params, stage, batch, [ms] * 5, [5.0, 4.9, 4.8, 4.7, 4.6, 4.5], mem_bytes=mem)
        rec["mem_allocator_bytes"] = mem
        if k:
            rec.update(variant="repeat", repeat=k)
        out.append(rec)
    return out


@pytest.mark.parametrize("spread, tie", [(0.01, False), (0.10, True)])
def test_the_recommendation_is_the_fastest_and_a_smaller_batch_within_noise_is_its_memory_saver(spread, tie):
    """B=4 measures 3 % faster than B=2. With a 1 % process spread that is real; with a 10 % spread it is noise. Either
    way the recipe is the faster B=4 (a tie is no reason to train slower), and where they tie B=2, which needs less
    memory, is listed beside it as the memory saver, never as the recommendation."""

    params = tiny_params(["fp32"], batch_sizes=(2, 4))
    base = 1000.0
    recs = _repeats(params, "fp32", 2, [base * (1 - spread / 2), base, base * (1 + spread / 2)], 1 << 20) + _repeats(
        params, "fp32", 4, [base * 1.03 * (1 - spread / 2), base * 1.03, base * 1.03 * (1 + spread / 2)], 2 << 20
    )
    best = decide.recommended(recs, params)
    assert (best["batch_size"], best["processes"]["n"]) == (4, 3)
    assert best["against"]["batch_size"] == 2 and best["against"]["tie"] is tie
    saver = decide.memory_saver(recs, params, best)
    assert (saver is not None) == tie and (not tie or saver["micro_batch"] == 2)


def test_a_tie_by_the_least_gain_is_a_tie_and_not_called_within_noise():
    """reports/h100 (9337cdf): B=96 was 0.96 % slower than B=128, beyond their 0.34 % noise and within the 1 % a batch
    size must gain: a tie by the least gain, whose band is narrower than the gain."""
    params = tiny_params(["fp32"], batch_sizes=(2, 4))
    params.evidence.batch_min_gain = 0.01
    recs = _repeats(params, "fp32", 2, [1000.0, 1001.0, 1002.0], 1 << 20) + _repeats(
        params, "fp32", 4, [1009.0, 1010.0, 1011.0], 2 << 20
    )
    best = decide.best_config(recs, params)
    assert best["batch_size"] == 4 and best["against"]["tie"] and best["against"]["band"] < 0.009


def test_a_smaller_batch_timed_once_is_never_its_memory_saver():
    """B=2 ran once, 1 % slower than B=4's three processes, inside a 10 % spread: one process says too little to call
    them equal, so no memory saver is listed until it ran three times too."""

    params = tiny_params(["fp32"], batch_sizes=(2, 4))
    recs = _repeats(params, "fp32", 2, [990.0], 1 << 20) + _repeats(params, "fp32", 4, [950.0, 1000.0, 1050.0], 2 << 20)
    best = decide.best_config(recs, params)
    assert (best["batch_size"], best["processes"]["n"]) == (4, 3)
    assert decide.memory_saver(recs, params, best) is None
    recs += _repeats(params, "fp32", 2, [990.0, 985.0, 995.0], 1 << 20)[1:]  # now B=2 ran three times too
    assert decide.memory_saver(recs, params, decide.best_config(recs, params))["micro_batch"] == 2


def test_a_claim_just_outside_its_range_is_within_noise_only_when_the_spread_covers_it():
    from lib.results import claim_judge, claims

    params = tiny_params(["fp32", "tf32"])
    recs = [make_record(params, "fp32", 2, [10.0] * 5, [5.0] * 6), make_record(params, "tf32", 2, [4.5] * 5, [5.0] * 6)]
    df = decide.table(recs, ["fp32", "tf32"], params.run.loss_tolerance)
    claim = {
        "id": "x",
        "claim": "TF32 about 2.0x",
        "metric": "speedup",
        "stage": "tf32",
        "versus": "fp32",
        "expect": {"min": 1.8, "max": 2.2},
        "families": ["cpu"],
    }  # measured 2.22x
    assert claims.verdict(claim, df, "cpu", "cuda", noise=0.005)["verdict"] == claim_judge.EXCEEDED
    assert claims.verdict(claim, df, "cpu", "cuda", noise=0.02)["verdict"] == claim_judge.WITHIN_NOISE
    assert claims.verdict(claim, df, "cpu", "cuda")["verdict"] == claim_judge.EXCEEDED


def test_the_parity_learning_rate_warms_up_then_decays_to_a_tenth():
    lrs = [parity_run.parity_lr(i, 200, 6e-4) for i in range(200)]
    assert lrs[0] == pytest.approx(6e-4 / 50) and lrs[49] == pytest.approx(6e-4)
    assert lrs[-1] == pytest.approx(6e-5) and all(a >= b for a, b in zip(lrs[49:], lrs[50:]))


def test_a_loss_gap_just_beyond_the_tolerance_is_within_noise_when_repeats_drift_as_much():
    """Two processes of one configuration drift apart (GPU kernels are not bitwise repeatable):
    a lever beyond the tolerance by less than that drift is within noise, not rejected."""
    params = tiny_params(["fp32", "tf32"], warmup=2, timed=18)
    ref = [5.0 - 0.05 * i for i in range(20)]
    lever = [v + (0.12 if 8 <= i <= 12 else 0.0) for i, v in enumerate(ref)]
    recs = [make_record(params, "fp32", 2, [10.0] * 18, ref), make_record(params, "tf32", 2, [9.0] * 18, lever)]
    again = {
        **make_record(params, "fp32", 2, [10.0] * 18, [v + (0.05 if 8 <= i <= 12 else 0.0) for i, v in enumerate(ref)]),
        "variant": "repeat",
        "repeat": 1,
    }
    tol = params.run.loss_tolerance  # 0.1: the lever's 0.12 is beyond it
    assert stats.loss_noise(recs) == 0.0 and stats.loss_noise(recs + [again]) == pytest.approx(0.05)
    assert stats.loss_noise_at(recs + [again])[1:] == ("fp32", 2)  # the method names whose processes drifted
    quiet = decide.table(recs, ["fp32", "tf32"], tol, stats.loss_noise(recs))
    noisy = decide.table(recs, ["fp32", "tf32"], tol, stats.loss_noise(recs + [again]))
    assert quiet.iloc[-1]["loss_verdict"] == "beyond" and noisy.iloc[-1]["loss_verdict"] == "within noise"
    assert decide.best_config(recs, params)["stage"] == "fp32"
    assert decide.best_config(recs + [again], params)["stage"] == "tf32"


def test_a_resumed_parity_plan_keeps_the_references_micro_batches(tmp_path):
    """The reference's own parity run at the large batch must not count as 'it fits in one go'."""
    from conftest import write_report_dir

    from lib.run import parity_runs

    params = tiny_params(["fp32", "tf32"], batch_sizes=(2, 4))
    params.evidence.parity_batch = None  # tested at the stage's own largest batch, B=4
    losses = [5.0 - 0.01 * i for i in range(6)]
    recs = [
        make_record(params, "fp32", 2, [10.0] * 5, losses),
        make_record(params, "fp32", 4, status="oom", reason="x"),
        make_record(params, "tf32", 2, [5.0] * 5, losses),
        make_record(params, "tf32", 4, [8.0] * 5, losses),
    ]
    report_dir = write_report_dir(tmp_path / "cpu", params, recs)
    plan = {j["stage"]: j["micro_steps"] for j in parity_runs.parity_jobs(params, report_dir)}
    assert plan == {"tf32": 1, "fp32": 2}
    done = {
        **make_record(params, "fp32", 4, [1.0] * 5, losses),
        "kind": "parity",
        "variant": "parity",
        "steps": 6,
        "held_out_loss": 4.0,
        "micro_steps": 2,
    }
    store.write_atomic(report_dir / "results" / "parity" / "fp32__b4.json", done)
    assert {j["stage"]: j["micro_steps"] for j in parity_runs.parity_jobs(params, report_dir)} == plan


def test_a_stage_is_data_the_core_applies_its_backend_flags_and_compile_mode(monkeypatch):
    """A lever that needs a backend flag or a compile mode is a stage entry, not new code."""
    import dataclasses

    calls = []
    monkeypatch.setattr(torch, "compile", lambda model, **kw: calls.append(kw) or model)
    params = tiny_params(["fp32"])
    before = torch.backends.cudnn.benchmark
    try:
        lever = dataclasses.replace(
            stages.get("fp32"),
            key="x",
            compile=True,
            compile_mode="max-autotune",
            backend_flags=(("torch.backends.cudnn.benchmark", not before),),
        )
        step.build(params, lever, "cpu")
        assert torch.backends.cudnn.benchmark is (not before) and calls == [{"mode": "max-autotune"}]
    finally:
        torch.backends.cudnn.benchmark = before
    with pytest.raises(ValueError, match="under torch"):
        step.build(params, dataclasses.replace(lever, backend_flags=(("os.environ", 1),)), "cpu")


def _crosscheck_report(tmp_path, plain_mean_ms: float, synced_ms: list[float], harness_ms=(100.0, 101.0, 99.0)):
    """A report of one configuration timed by the harness and by the plain loop, from chosen step times."""
    from conftest import write_report_dir

    from lib.report import loader

    params = tiny_params(["fp32"])
    rec = make_record(params, "fp32", 2, list(harness_ms) * 2, [6.0, 5.9, 5.8, 5.7, 5.6, 5.5])
    d = write_report_dir(tmp_path / "cpu", params, [rec])
    plain = {
        "schema_version": store.SCHEMA_VERSION,
        "kind": "plain",
        "stage": "fp32",
        "batch_size": 2,
        "status": "ok",
        "ms_per_step": plain_mean_ms,
        "synced_step_ms": synced_ms,
        "synced_median_ms": float(sorted(synced_ms)[len(synced_ms) // 2]),
    }
    store.write_atomic(d / "results" / "crosscheck" / "fp32__b2.json", plain)
    return loader.load(d)


def test_a_crosscheck_inside_the_plain_loops_own_noise_is_no_failure(tmp_path):
    """The CPU default on a loaded 2-core machine: the plain loop's unsynchronised steps ran 11x slower than its
    synchronised ones (the same steps on a CPU), so a -91 % difference says nothing about the harness; it read as a
    bold red 'Cross-check failed' on a run that exited 0."""
    from lib.report import fidelity_view

    rep = _crosscheck_report(tmp_path, plain_mean_ms=1100.0, synced_ms=[95.0, 100.0, 105.0, 98.0, 102.0])
    (row,) = rep.decided["crosscheck"]  # judged once, in decisions.compute
    assert row["difference"] < -0.9 and row["verdict"] == "within noise" and row["noise"] > abs(row["difference"])
    assert 'class="bad"' not in fidelity_view.crosscheck_html(rep)


def test_a_crosscheck_beyond_both_sides_noise_fails(tmp_path):
    """Steady steps on both sides (a GPU's): 20 % apart is beyond their noise, and the table says so in red."""
    from lib.report import fidelity_view

    rep = _crosscheck_report(tmp_path, plain_mean_ms=83.0, synced_ms=[83.0, 84.0, 83.5, 84.2, 83.8])
    (row,) = rep.decided["crosscheck"]
    assert row["verdict"] == "differs" and row["noise"] < 0.03
    assert 'class="bad"' in fidelity_view.crosscheck_html(rep)
    close = _crosscheck_report(tmp_path / "b", plain_mean_ms=99.0, synced_ms=[100.0, 100.5, 101.0, 100.2, 100.8])
    assert close.decided["crosscheck"][0]["verdict"] == "matches"


def test_the_crosscheck_is_decided_once_and_the_table_lays_out_its_rows(tmp_path):
    """decisions.compute judges the cross-check (issue 61): its rows are in decisions.json, plain JSON, with the
    figures and the verdict the table shows; the table reads them and judges nothing itself."""
    from lib.report import fidelity_view
    from lib.results import recommendation
    from lib.results import decisions

    rep = _crosscheck_report(tmp_path, plain_mean_ms=83.0, synced_ms=[83.0, 84.0, 83.5, 84.2, 83.8])
    out = decisions.compute(rep.decisions, {**rep.evidence, "matrix": rep.records}, rep.params, rep.env)
    (row,) = out["crosscheck"]
    assert (row["stage"], row["batch_size"], row["processes"], row["verdict"]) == ("fp32", 2, 1, "differs")
    assert row["harness_ms"] == pytest.approx(100.0) and row["plain_ms"] == 83.0
    assert row["difference"] == pytest.approx(100.0 / 83.0 - 1)
    recommendation.write(rep)
    assert (
        json.loads((rep.dir / decisions.FILE).read_text())["crosscheck"]
        == out["crosscheck"]
        == rep.decided["crosscheck"]
    )
    table = fidelity_view.crosscheck_html(rep)
    assert '<span class="bad">+20.5 %</span>' in table and "<td>83.0</td>" in table
    rep.decided["crosscheck"] = [{**row, "verdict": "within noise"}]  # the table shows what was decided
    assert 'class="bad"' not in fidelity_view.crosscheck_html(
        rep
    ) and "(within noise)" in fidelity_view.crosscheck_html(rep)
