"""lib/measure/worker.py in this process, on the CPU, with a tiny job: a result, an OOM and a NaN loss
are all records, never crashes."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_params

from lib.core import record
from lib.measure import worker
from lib.results import decide
from lib.train import model, step

WARMUP, TIMED, BATCH = 1, 5, 2


def job(stage="fp32", params=None):
    params = params or tiny_params(warmup=WARMUP, timed=TIMED, batch_sizes=(BATCH,))
    return {"params": params, "stage": stage, "batch_size": BATCH}


@pytest.fixture(autouse=True)
def restore_matmul_precision():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


@pytest.fixture(scope="module")
def fp32_record():
    return worker.run(job("fp32"))


def test_run_returns_an_ok_record_of_the_configuration(fp32_record):
    rec = fp32_record
    assert rec["schema_version"] == record.SCHEMA_VERSION
    assert (rec["status"], rec["reason"]) == ("ok", None)
    assert (rec["profile"], rec["stage"], rec["batch_size"]) == ("cpu", "fp32", BATCH)
    assert (rec["warmup_steps"], rec["timed_steps"]) == (WARMUP, TIMED)


def test_run_times_every_timed_step(fp32_record):
    rec = fp32_record
    assert len(rec["step_ms"]) == TIMED
    assert all(t > 0 for t in rec["step_ms"])
    assert 0 < rec["p10_ms"] <= rec["median_ms"] <= rec["p90_ms"]
    assert rec["cv"] >= 0
    assert rec["tokens_per_step"] == BATCH * rec["seq_len"]
    assert rec["tokens_per_s"] == pytest.approx(rec["tokens_per_step"] / (rec["median_ms"] / 1e3))


def test_run_keeps_every_loss_and_the_loss_goes_down(fp32_record):
    rec = fp32_record
    assert len(rec["losses"]) == WARMUP + TIMED
    assert all(math.isfinite(v) for v in rec["losses"])
    assert math.isfinite(rec["final_loss"])
    assert rec["losses"][-1] < rec["losses"][0]


def test_run_records_flops_memory_and_no_mfu_on_cpu(fp32_record):
    rec = fp32_record
    assert rec["n_params"] > 0 and rec["flops_per_token"] > 6 * rec["n_params"]
    assert rec["mfu"] is None and rec["peak_tflops"] is None
    assert rec["mem_device_bytes"] > 0
    assert rec["wall_s"] > 0 and rec["finished_at"]
    assert "sdpa_backend" not in rec


def test_run_samples_no_device_memory_on_cpu(fp32_record):
    assert fp32_record["mem_device_sampled_peak_bytes"] is None
    assert (
        fp32_record["mem_device_sampled_note"]
        == "not sampled: CPU has no NVML device memory (NVML reads NVIDIA GPUs only)"
    )
    old = {k: v for k, v in fp32_record.items() if not k.startswith("mem_device_sampled")}  # a record from before
    df = decide.table([fp32_record, {**old, "stage": "tf32"}], ["fp32", "tf32"])
    assert df["mem_device_sampled_peak_bytes"].isna().all()


class FakeSampler:
    """worker.run's memory sampler, recording how many forward passes had run at start() and stop()."""

    def __init__(self, forwards: list):
        self.forwards, self.seen = forwards, {}

    def __call__(self, dev, index=0, span=""):  # worker.run builds "a sampler": this one
        self.dev = dev
        return self

    def start(self):
        self.seen["start"] = len(self.forwards)

    def stop(self):
        self.seen.setdefault("stop", len(self.forwards))  # a second stop() (the failure path) changes nothing
        return {"mem_device_sampled_peak_bytes": 123, "mem_device_sampled_note": self.dev}


@pytest.fixture
def fake_sampler(monkeypatch):
    """The fake sampler in worker.run; forward passes counted, and an OOM at pass `oom_at` if set."""
    forward, forwards = model.GPT.forward, []
    sampler = FakeSampler(forwards)
    sampler.oom_at = None

    def counting_forward(self, idx, targets=None):
        forwards.append(None)
        if len(forwards) == sampler.oom_at:
            raise torch.OutOfMemoryError("CUDA out of memory. test")
        return forward(self, idx, targets)

    monkeypatch.setattr(model.GPT, "forward", counting_forward)
    monkeypatch.setattr(worker.energy, "MemorySampler", sampler)
    return sampler


def test_the_memory_sampler_spans_the_warm_up_steps_only_never_the_timed_ones(fake_sampler):
    rec = worker.run({**job("fp32"), "profile": False})
    assert fake_sampler.seen == {"start": 0, "stop": WARMUP}
    assert (rec["mem_device_sampled_peak_bytes"], rec["mem_device_sampled_note"]) == (123, "cpu")


def test_an_oom_during_the_warm_up_keeps_the_peak_sampled_up_to_it(fake_sampler):
    fake_sampler.oom_at = 2  # the second of three warm-up passes
    rec = worker.run(job("fp32", tiny_params(warmup=3, timed=TIMED, batch_sizes=(BATCH,))))
    assert rec["status"] == "oom"
    assert fake_sampler.seen == {"start": 0, "stop": 2}
    assert rec["mem_device_sampled_peak_bytes"] == 123


def test_run_is_deterministic_in_its_losses(fp32_record):
    again = worker.run(job("fp32"))
    assert again["losses"] == pytest.approx(fp32_record["losses"], abs=1e-5)


def test_run_of_an_sdpa_stage_names_the_backend_that_ran():
    rec = worker.run(job("flash"))
    assert rec["status"] == "ok"
    assert isinstance(rec["sdpa_backend"], str) and rec["sdpa_backend"] and rec["sdpa_backend"] != "unknown"


def test_out_of_memory_is_an_oom_record_not_a_crash(monkeypatch):
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. test")

    monkeypatch.setattr(worker.step, "build", oom)
    rec = worker.run(job("fp32"))
    assert rec["status"] == "oom"
    assert "out of memory" in rec["reason"] and "test" in rec["reason"]
    assert "median_ms" not in rec and "losses" not in rec
    assert rec["wall_s"] >= 0
    assert rec["mem_device_sampled_peak_bytes"] is None
    assert rec["mem_device_sampled_note"] == "not sampled: the configuration failed before its first step"


def test_an_out_of_memory_message_from_another_exception_is_an_oom(monkeypatch):
    def oom(*args, **kwargs):
        raise RuntimeError("HIP out of memory. Tried to allocate 2 GiB")

    monkeypatch.setattr(worker.step, "build", oom)
    assert worker.run(job("fp32"))["status"] == "oom"


def test_any_other_exception_propagates(monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("not an OOM")

    monkeypatch.setattr(worker.step, "build", broken)
    with pytest.raises(ValueError, match="not an OOM"):
        worker.run(job("fp32"))


def test_nan_loss_is_a_diverged_record(monkeypatch):
    forward = model.GPT.forward

    def nan_forward(self, idx, targets=None):
        logits, loss = forward(self, idx, targets)
        return logits, loss * float("nan")

    monkeypatch.setattr(model.GPT, "forward", nan_forward)
    rec = worker.run(job("fp32"))
    assert rec["status"] == "diverged"
    assert "NaN" in rec["reason"]
    assert len(rec["step_ms"]) == TIMED  # still timed: a diverged row keeps its timing


def test_loss_that_becomes_nan_during_training_is_diverged(monkeypatch):
    forward = model.GPT.forward
    calls = []

    def late_nan(self, idx, targets=None):
        logits, loss = forward(self, idx, targets)
        calls.append(1)
        return logits, (loss * float("nan") if len(calls) > WARMUP + 2 else loss)

    monkeypatch.setattr(model.GPT, "forward", late_nan)
    rec = worker.run(job("fp32"))
    assert rec["status"] == "diverged"
    assert math.isfinite(rec["losses"][0]) and math.isnan(rec["losses"][-1])


@pytest.mark.parametrize("backend, expected", [("cuda", "cuda"), ("rocm", "cuda"), ("mps", "mps"), ("cpu", "cpu")])
def test_device_type_maps_rocm_to_torch_cuda(backend, expected):
    assert step.device_type(backend) == expected


def test_is_oom():
    assert worker.is_oom(torch.OutOfMemoryError("x"))
    assert worker.is_oom(RuntimeError("CUDA Out Of Memory"))
    assert not worker.is_oom(RuntimeError("shape mismatch"))
