"""lib/measure/energy.py against fake NVML modules: the counter, the sampling fallback, the device memory
sampler, and every way of being unavailable without raising."""

from __future__ import annotations

import itertools
import sys
import time
import types

import pytest

from lib.measure import energy
from lib.measure.energy import EnergyMeter


class FakeNVMLError(Exception):
    pass


def fake_nvml(counter=True, power=True, init_fails=False) -> types.ModuleType:
    """A pynvml stand-in: the energy counter advances 5000 mJ a read, power reads 250 W."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError = FakeNVMLError
    nv.calls = {"init": 0, "shutdown": 0, "by_index": []}
    nv.energy_mj = 1_000_000

    def nvmlInit():
        nv.calls["init"] += 1
        if init_fails:
            raise FakeNVMLError("Driver Not Loaded")

    def nvmlShutdown():
        nv.calls["shutdown"] += 1

    def nvmlDeviceGetHandleByIndex(i):
        nv.calls["by_index"].append(i)
        return ("handle", i)

    def nvmlDeviceGetTotalEnergyConsumption(handle):
        if not counter:
            raise FakeNVMLError("Not Supported")
        nv.energy_mj += 5000
        return nv.energy_mj

    def nvmlDeviceGetPowerUsage(handle):
        if not power:
            raise FakeNVMLError("Not Supported")
        return 250_000  # mW

    def nvmlDeviceGetMemoryInfo(handle):
        nv.calls["memory"] += 1
        used = next(nv.memory_used)  # a number, or an exception to raise
        if isinstance(used, Exception):
            raise used
        return types.SimpleNamespace(used=used, free=80 * 2**30 - used, total=80 * 2**30)

    nv.calls["memory"] = 0
    nv.memory_used = itertools.repeat(2**30)
    for f in (
        nvmlInit,
        nvmlShutdown,
        nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetTotalEnergyConsumption,
        nvmlDeviceGetPowerUsage,
        nvmlDeviceGetMemoryInfo,
    ):
        setattr(nv, f.__name__, f)
    return nv


@pytest.fixture(autouse=True)
def no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_cpu_has_no_power_sensor():
    m = EnergyMeter("cpu")
    assert m.available is False
    assert m.reason == "the cpu backend exposes no power sensor to this process"
    m.start()
    assert m.stop() is None


def test_missing_pynvml_is_unavailable_with_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    m = EnergyMeter("cuda")
    assert not m.available and m.reason == "no NVML on this host (pynvml not installed)"


def test_energy_counter_is_read_at_start_and_stop(monkeypatch):
    nv = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    m = EnergyMeter("cuda", index=0)
    assert m.available and m.reason is None
    m.start()
    time.sleep(0.02)
    r = m.stop()
    assert r["energy_j"] == 5.0
    assert r["method"] == energy.COUNTER_METHOD == "NVML total-energy counter"
    assert r["seconds"] >= 0.02
    assert r["avg_power_w"] == pytest.approx(5.0 / r["seconds"])
    assert nv.calls["shutdown"] == nv.calls["init"] == 1  # NVML released by stop()
    assert nv.calls["by_index"] == [0]


def test_meter_can_be_started_again_after_stop(monkeypatch):
    nv = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    m = EnergyMeter("cuda")
    m.start()
    assert m.stop(keep_open=True)["energy_j"] == 5.0
    m.start()
    assert m.stop()["energy_j"] == 5.0
    m.start()  # reopens NVML after the shutdown of the last stop()
    assert m.stop()["energy_j"] == 5.0
    assert nv.calls["shutdown"] == nv.calls["init"] == 2


def test_without_the_counter_power_samples_are_integrated(monkeypatch):
    nv = fake_nvml(counter=False)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    m = EnergyMeter("cuda")
    assert m.available
    m.start()
    time.sleep(0.1)
    r = m.stop()
    assert r["energy_j"] > 0
    assert r["method"].startswith("NVML power samples (")
    n = int(r["method"].split("(")[1].split()[0])
    assert n >= 3  # the start and stop readings and at least one from the sampling thread
    assert r["avg_power_w"] == pytest.approx(250.0)  # constant power: the trapezoid rule is exact
    assert r["energy_j"] == pytest.approx(250.0 * r["seconds"])
    assert nv.calls["shutdown"] == 1


def test_no_power_readings_at_all_is_unavailable(monkeypatch):
    nv = fake_nvml(counter=False, power=False)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    m = EnergyMeter("cuda")
    assert not m.available
    assert m.reason.startswith("NVML reports no power readings for this GPU: Not Supported")
    assert nv.calls["shutdown"] == 1


def test_failing_nvml_init_is_unavailable_without_an_exception(monkeypatch):
    nv = fake_nvml(init_fails=True)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    m = EnergyMeter("cuda")
    assert not m.available
    assert "Driver Not Loaded" in m.reason and m.reason.startswith("no NVML on this host")
    m.start()
    assert m.stop() is None
    assert nv.calls["shutdown"] == 0  # never started, so nothing to shut down


def test_nvml_failing_mid_measurement_makes_the_meter_unavailable(monkeypatch):
    nv = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    m = EnergyMeter("cuda")
    m.start()

    def broken(handle):
        raise FakeNVMLError("GPU is lost")

    nv.nvmlDeviceGetTotalEnergyConsumption = broken
    assert m.stop() is None
    assert not m.available and "GPU is lost" in m.reason
    assert nv.calls["shutdown"] == 1


def test_cuda_visible_devices_maps_the_index_when_torch_gives_no_bus_id(monkeypatch):
    nv = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    m = EnergyMeter("cuda", index=1)
    assert m.available and nv.calls["by_index"] == [5]
    assert m.matched_by.startswith("NVML index 5")
    m.close()


def test_pci_bus_id_is_formatted_as_nvml_expects():
    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    assert energy._pci_bus_id(props) == "00000000:3B:00.0"
    assert energy._pci_bus_id(types.SimpleNamespace()) is None


def test_trapezoid_rule():
    assert energy._trapezoid([(0.0, 100.0), (1.0, 300.0), (3.0, 300.0)]) == pytest.approx(200 + 600)


# ---------------------------------------------------------------- the device memory sampler


def sampled_until(sampler, nv, reads: int) -> dict:
    """Start, let the thread read NVML `reads` times in all (start's own reading included), stop."""
    sampler.start()
    deadline = time.monotonic() + 5
    while nv.calls["memory"] < reads and time.monotonic() < deadline:
        time.sleep(0.001)
    return sampler.stop()


def test_memory_sampler_takes_the_peak_of_the_thread_s_samples(monkeypatch):
    nv = fake_nvml()
    # start() reads 100; the thread reads 300 then 200, then 150 until stop(), whose last reading is 150
    nv.memory_used = itertools.chain([100, 300, 200], itertools.repeat(150))
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    s = energy.MemorySampler("cuda", span="the steps", interval_s=0.001)
    out = sampled_until(s, nv, reads=5)
    assert out[energy.PEAK_KEY] == 300  # a reading of the thread, neither the first nor the last
    n = nv.calls["memory"]
    assert out[energy.NOTE_KEY].startswith(f"peak of {n} readings of NVML's device memory used")
    assert "over the steps" in out[energy.NOTE_KEY] and "NVML index 0" in out[energy.NOTE_KEY]
    assert not s._thread.is_alive()  # the thread has stopped ...
    time.sleep(0.02)
    assert nv.calls["memory"] == n  # ... and reads nothing more
    assert nv.calls["shutdown"] == nv.calls["init"] == 1
    assert s.stop() is s.stop()  # a second stop() answers the same, touching nothing


def test_memory_sampler_nvml_error_gives_none_and_the_reason(monkeypatch):
    nv = fake_nvml()
    nv.memory_used = iter([2**30, 2**31, FakeNVMLError("GPU is lost")])
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    s = energy.MemorySampler("cuda", interval_s=0.001)
    out = sampled_until(s, nv, reads=3)
    assert out[energy.PEAK_KEY] is None
    assert out[energy.NOTE_KEY] == "not sampled: NVML stopped answering (FakeNVMLError: GPU is lost)"
    assert not s._thread.is_alive()
    assert nv.calls["shutdown"] == 1


def test_memory_sampler_failing_at_start_gives_none_and_no_thread(monkeypatch):
    nv = fake_nvml()
    nv.memory_used = iter([FakeNVMLError("Not Supported")])
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    s = energy.MemorySampler("cuda")
    s.start()
    assert s._thread is None
    assert s.stop() == {
        energy.PEAK_KEY: None,
        energy.NOTE_KEY: "not sampled: NVML stopped answering (FakeNVMLError: Not Supported)",
    }
    assert nv.calls["shutdown"] == 1


def test_memory_sampler_never_started_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    assert energy.MemorySampler("cuda").stop() == {energy.PEAK_KEY: None, energy.NOTE_KEY: "not sampled: never started"}


@pytest.mark.parametrize(
    "dev, note",
    [
        ("cpu", "not sampled: CPU has no NVML device memory (NVML reads NVIDIA GPUs only)"),
        ("mps", "not sampled: MPS has no NVML device memory (NVML reads NVIDIA GPUs only)"),
    ],
)
def test_memory_sampler_off_nvidia_is_none_with_a_note(monkeypatch, dev, note):
    nv = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    s = energy.MemorySampler(dev)
    s.start()
    assert s._thread is None and nv.calls["init"] == 0
    assert s.stop() == {energy.PEAK_KEY: None, energy.NOTE_KEY: note}


def test_memory_sampler_rocm_missing_pynvml_and_failing_init(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    assert "ROCm" in energy.MemorySampler("cuda").stop()[energy.NOTE_KEY]
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert (
        energy.MemorySampler("cuda").stop()[energy.NOTE_KEY]
        == "not sampled: no NVML on this host (pynvml not installed)"
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(init_fails=True))
    out = energy.MemorySampler("cuda").stop()
    assert out[energy.PEAK_KEY] is None
    assert out[energy.NOTE_KEY] == "not sampled: NVML could not be read (FakeNVMLError: Driver Not Loaded)"


def test_memory_sampler_finds_the_device_as_the_energy_meter_does(monkeypatch):
    nv = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    s = energy.MemorySampler("cuda", index=1)
    assert nv.calls["by_index"] == [5] and s.matched_by.startswith("NVML index 5")
    s.stop()


def test_the_energy_tables_figures_divide_into_one_another():
    """A reviewer recomputed the H100 recipe's 1.350 mJ/token as power / tokens/s and got 1.298: the table set the
    energy window's joules beside the matrix's tokens/s (the median step's, the median of processes). Its tokens/s
    is now the energy window's own, so power / tokens/s is the mJ per token on every row."""
    import re
    import types

    from lib.report import evidence_view

    energy = {"energy_j": 2211.66, "seconds": 3.2345, "avg_power_w": 2211.66 / 3.2345, "joules_per_token": 0.0013499}
    rec = {"stage": "compile", "stage_title": "torch.compile", "batch_size": 64, "status": "ok"}
    rec |= {"tokens_per_s": 526_917.0, "energy": energy}
    text = evidence_view.energy_html(types.SimpleNamespace(records=[rec], stage_order=["compile"]))
    cells = re.findall(r"<td>([^<]*)</td>", text)
    power, mj, tps = float(cells[2]), float(cells[3]), float(cells[5].replace(",", ""))
    assert mj == pytest.approx(power / tps * 1e3, rel=2e-3) and tps != pytest.approx(rec["tokens_per_s"], rel=1e-2)
