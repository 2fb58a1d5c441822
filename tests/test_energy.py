"""lib/energy.py against fake NVML modules: the counter, the sampling fallback, and every way of
being unavailable without raising."""
from __future__ import annotations

import sys
import time
import types

import pytest

from lib import energy
from lib.energy import EnergyMeter


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

    for f in (nvmlInit, nvmlShutdown, nvmlDeviceGetHandleByIndex, nvmlDeviceGetTotalEnergyConsumption,
              nvmlDeviceGetPowerUsage):
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
