"""Energy a stretch of GPU work used, from NVML, for joules per token.

Two ways to read it, best first:
1. NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver
   loaded; Volta and later), read at start() and stop(). Exact for the window, up to the
   counter's update interval, so windows of a second or more are the ones to trust.
2. Where the counter is not supported: nvmlDeviceGetPowerUsage (milliwatts) sampled by a daemon
   thread about every 10 ms, integrated with the trapezoid rule. On many boards the reading is
   itself an average over up to a second, so this under-resolves short bursts.

The meter never raises: a missing pynvml, a failing NVML, a GPU without power readings or a
device that is not an NVIDIA GPU leave `available` False and say why in `reason`, in words a
report can print. The caller synchronises the device before start() and before stop(); the
meter reads the sensor only. torch is imported only to find which physical GPU a torch device
index means (CUDA_VISIBLE_DEVICES and CUDA's device order renumber GPUs; NVML does not), and
asking torch for that initialises CUDA: build the meter in the process that measures, never in a
launcher that forks measuring children.

MemorySampler reads the same NVML device (nvml_handle, shared) for the peak device memory in use
while the steps run: a host thread polling NVML. A read of torch.cuda.mem_get_info after the steps
cannot see memory taken and given back during them (outside PyTorch's caching allocator, or
released by it)."""

from __future__ import annotations

import os
import sys
import threading
import time

COUNTER_METHOD = "NVML total-energy counter"
SAMPLE_INTERVAL_S = 0.010
MEMORY_SAMPLE_INTERVAL_S = 0.005
PEAK_KEY, NOTE_KEY = "mem_device_sampled_peak_bytes", "mem_device_sampled_note"  # record fields (lib/core/record.py)


class EnergyMeter:
    def __init__(self, dev: str, index: int = 0):
        self.dev = dev
        self.index = index
        self.available = False
        self.reason: str | None = None
        self.matched_by: str | None = None  # how the NVML device was found, for the report
        self._nvml = None
        self._handle = None
        self._open = False
        self._use_counter = False
        self._running = False
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self._samples: list[tuple[float, float]] = []  # (perf_counter s, watts)
        self._sample_error: BaseException | None = None
        try:
            self._setup()
        except Exception as exc:  # whatever NVML or torch throw: unavailable, never an exception
            self._fail(f"NVML could not be read: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ setup

    def _setup(self) -> None:
        if self.dev != "cuda":
            self.reason = f"the {self.dev} backend exposes no power sensor to this process"
            return
        torch = sys.modules.get("torch")
        if torch is not None and getattr(getattr(torch, "version", None), "hip", None):
            self.reason = "ROCm GPUs report power through amd-smi, which this meter does not read"
            return
        try:
            import pynvml
        except ImportError:
            self.reason = "no NVML on this host (pynvml not installed)"
            return
        self._nvml = pynvml
        try:
            self._connect()
        except Exception as exc:
            self._fail(f"no NVML on this host ({type(exc).__name__}: {exc})")
            return
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
            self._use_counter = True
        except Exception as counter_exc:
            try:
                self._nvml.nvmlDeviceGetPowerUsage(self._handle)
            except Exception as exc:
                self._fail(f"NVML reports no power readings for this GPU: {exc} (energy counter: {counter_exc})")
                return
        self.available = True

    def _connect(self) -> None:
        self._nvml.nvmlInit()
        self._open = True
        self._handle, self.matched_by = nvml_handle(self._nvml, self.index)

    def _fail(self, reason: str) -> None:
        self.available = False
        self.reason = reason
        self._running = False
        self.close()

    # ------------------------------------------------------------------ measuring

    def start(self) -> None:
        if not self.available:
            return
        try:
            if not self._open:
                self._connect()
            if self._use_counter:
                self._e0_mj = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
                self._t0 = time.perf_counter()
            else:
                self._samples = [(time.perf_counter(), self._watts())]
                self._sample_error = None
                self._halt.clear()
                self._thread = threading.Thread(target=self._sample, name="energy-meter", daemon=True)
                self._thread.start()
            self._running = True
        except Exception as exc:
            self._fail(f"NVML stopped answering: {type(exc).__name__}: {exc}")

    def stop(self, keep_open: bool = False) -> dict | None:
        """Energy since start(): {"energy_j", "seconds", "avg_power_w", "method"}, or None when
        the meter is unavailable or was not started. NVML is shut down unless keep_open (then
        call close() when done; a later start() reopens it anyway)."""
        try:
            if not (self.available and self._running):
                return None
            self._running = False
            if self._use_counter:
                e1_mj = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
                seconds = time.perf_counter() - self._t0
                energy_j = (e1_mj - self._e0_mj) / 1e3
                if energy_j < 0:
                    self._fail("the NVML energy counter went backwards (driver reloaded?)")
                    return None
                method = COUNTER_METHOD
            else:
                self._stop_sampler()
                if self._sample_error is not None:
                    self._fail(f"NVML stopped answering: {self._sample_error}")
                    return None
                self._samples.append((time.perf_counter(), self._watts()))
                energy_j = _trapezoid(self._samples)
                seconds = self._samples[-1][0] - self._samples[0][0]
                method = f"NVML power samples ({len(self._samples)} samples)"
            return {
                "energy_j": energy_j,
                "seconds": seconds,
                "avg_power_w": energy_j / seconds if seconds > 0 else None,
                "method": method,
            }
        except Exception as exc:
            self._fail(f"NVML stopped answering: {type(exc).__name__}: {exc}")
            return None
        finally:
            if not keep_open:
                self.close()

    def close(self) -> None:
        """Stop sampling and shut NVML down; safe to call more than once."""
        try:
            self._stop_sampler()
            if self._open and self._nvml is not None:
                self._open = False
                self._nvml.nvmlShutdown()
        except Exception:
            pass  # nothing useful to do about a failing shutdown

    def __enter__(self) -> EnergyMeter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ sampling

    def _watts(self) -> float:
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1e3

    def _sample(self) -> None:
        while not self._halt.wait(SAMPLE_INTERVAL_S):
            try:
                self._samples.append((time.perf_counter(), self._watts()))
            except Exception as exc:
                self._sample_error = exc
                return

    def _stop_sampler(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None


class MemorySampler:
    """The peak of the device memory in use while some device work runs, as NVML counts it
    (nvmlDeviceGetMemoryInfo's `used`: every process on the GPU, library workspaces included, as
    nvidia-smi shows it), read by a daemon thread every MEMORY_SAMPLE_INTERVAL_S between start()
    and stop(). The thread only reads NVML, a driver query that releases the GIL while it waits:
    no CUDA call, no synchronisation, nothing queued on the device, so the measured work runs as
    it would without it. An allocation that lives shorter than the interval can be missed;
    library workspaces (cuBLAS, cuDNN), once made, usually stay. Never raises: stop() gives the
    peak, or None and a note saying why. NVML is matched to torch's device as the energy meter
    matches it (nvml_handle); build the sampler in the process that measures."""

    def __init__(
        self, dev: str, index: int = 0, span: str = "the sampled work", interval_s: float = MEMORY_SAMPLE_INTERVAL_S
    ):
        self.span, self.interval_s = span, interval_s
        self.note: str | None = None  # why there is no peak, once known
        self.matched_by: str | None = None
        self._nvml = self._handle = self._thread = None
        self._open = False
        self._halt = threading.Event()
        self._peak, self._n, self._error = 0, 0, None
        self._result: dict | None = None
        try:
            self._setup(dev, index)
        except Exception as exc:  # whatever NVML or torch throw: no peak, never an exception
            self._fail(f"NVML could not be read ({type(exc).__name__}: {exc})")

    def _setup(self, dev: str, index: int) -> None:
        if dev != "cuda":
            self.note = f"not sampled: {dev.upper()} has no NVML device memory (NVML reads NVIDIA GPUs only)"
            return
        torch = sys.modules.get("torch")
        if torch is not None and getattr(getattr(torch, "version", None), "hip", None):
            self.note = "not sampled: ROCm GPUs report memory through amd-smi, which this sampler does not read"
            return
        try:
            import pynvml
        except ImportError:
            self.note = "not sampled: no NVML on this host (pynvml not installed)"
            return
        self._nvml = pynvml
        pynvml.nvmlInit()
        self._open = True
        self._handle, self.matched_by = nvml_handle(pynvml, index)

    def _fail(self, why: str) -> None:
        self.note = f"not sampled: {why}"
        self._handle = None

    def _read(self) -> None:
        self._peak = max(self._peak, self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        self._n += 1

    def start(self) -> None:
        if self._handle is None or self._thread is not None:
            return
        try:
            self._read()
            self._thread = threading.Thread(target=self._sample, name="memory-sampler", daemon=True)
            self._thread.start()
        except Exception as exc:
            self._fail(f"NVML stopped answering ({type(exc).__name__}: {exc})")

    def _sample(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                self._read()
            except Exception as exc:
                self._error = exc
                return

    def stop(self) -> dict:
        """{PEAK_KEY: bytes or None, NOTE_KEY: how it was measured or why it is None}; stops the
        thread and shuts NVML down. Safe to call more than once (the same answer)."""
        if self._result is None:
            self._result = self._finish()
        return self._result

    def _finish(self) -> dict:
        try:
            self._halt.set()
            if self._thread is not None:
                self._thread.join(timeout=2.0)
                if self._thread.is_alive():
                    self._fail("the sampling thread did not stop (NVML hung?)")
                    return {PEAK_KEY: None, NOTE_KEY: self.note}
            if self._error is not None:
                self._fail(f"NVML stopped answering ({type(self._error).__name__}: {self._error})")
            elif self._handle is not None and self._thread is None:
                self._fail("never started")
            if self._handle is None:
                return {PEAK_KEY: None, NOTE_KEY: self.note}
            self._read()  # the work has ended (the caller synchronised): its last state counts too
            return {
                PEAK_KEY: self._peak,
                NOTE_KEY: f"peak of {self._n} readings of NVML's device memory used (nvmlDeviceGetMemoryInfo: "
                f"every process on the GPU, as nvidia-smi counts it), one every "
                f"{self.interval_s * 1e3:g} ms over {self.span}; NVML device by {self.matched_by}",
            }
        except Exception as exc:
            self._fail(f"NVML stopped answering ({type(exc).__name__}: {exc})")
            return {PEAK_KEY: None, NOTE_KEY: self.note}
        finally:
            self._close()

    def _close(self) -> None:
        try:
            if self._open and (self._thread is None or not self._thread.is_alive()):
                self._open = False
                self._nvml.nvmlShutdown()
        except Exception:
            pass  # nothing useful to do about a failing shutdown


def nvml_handle(nv, index: int):
    """The NVML handle of torch's device `index` and how it was found, for the report: by PCI bus
    id, else by UUID, else by index (through CUDA_VISIBLE_DEVICES when it lists plain numbers).
    The one place a torch device is matched to NVML's (energy meter and memory sampler)."""
    props = _torch_device_properties(index)
    for label, key, lookup in (
        ("PCI bus id", _pci_bus_id(props), "nvmlDeviceGetHandleByPciBusId"),
        ("UUID", _uuid(props), "nvmlDeviceGetHandleByUUID"),
    ):
        if key and hasattr(nv, lookup):
            try:
                return getattr(nv, lookup)(key), f"{label} {key}"
            except Exception:
                pass
    i = _visible_index(index)
    return nv.nvmlDeviceGetHandleByIndex(i), f"NVML index {i} (no PCI bus id from torch)"


def _trapezoid(samples: list[tuple[float, float]]) -> float:
    """Joules from (seconds, watts) samples."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))


def _torch_device_properties(index: int):
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_properties(index)
    except Exception:
        return None


def _pci_bus_id(props) -> str | None:
    """NVML's bus-id form, domain:bus:device.function in hex, from torch's device properties."""
    bus, device = getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None)
    if not isinstance(bus, int) or not isinstance(device, int):
        return None
    domain = getattr(props, "pci_domain_id", 0)
    return f"{domain if isinstance(domain, int) else 0:08X}:{bus:02X}:{device:02X}.0"


def _uuid(props) -> str | None:
    raw = getattr(props, "uuid", None)
    if raw is None:
        return None
    s = str(raw)
    return s if s.startswith(("GPU-", "MIG-")) else f"GPU-{s}"


def _visible_index(index: int) -> int:
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if index < len(visible) and all(v.isdigit() for v in visible):
        return int(visible[index])
    return index
