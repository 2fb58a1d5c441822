"""The GPU's clocks, power draw, temperature and throttle reasons while the timed steps run (NVML),
so a record says how the card ran when it was timed, not only what it is. A host thread reads NVML
every SAMPLE_INTERVAL_S: a driver query that releases the GIL while it waits, nothing queued on the
device. Never raises: where NVML cannot be read, the result says why."""

from __future__ import annotations

import threading

import numpy as np

from lib.measure.energy import nvml_handle

SAMPLE_INTERVAL_S = 0.1
# nvmlClocksEventReasons bits (the driver's names), as a report prints them
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def reasons(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


class ClockSampler:
    def __init__(self, dev: str, index: int = 0):
        self._nv = self._handle = self._thread = None
        self._halt = threading.Event()
        self._rows: list[tuple] = []  # (sm MHz, memory MHz, watts, °C, throttle mask)
        self._why: str | None = None
        self._limit_w = None
        if dev != "cuda":
            self._why = f"not sampled: {dev.upper()} has no NVML clocks"
            return
        try:
            import pynvml as nv

            nv.nvmlInit()
            self._nv = nv
            self._handle, _ = nvml_handle(nv, index)
            self._limit_w = nv.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1000
        except Exception as exc:  # no pynvml, no NVML, a ROCm device: say why
            self._why = f"not sampled: NVML could not be read ({type(exc).__name__}: {exc})"
            self._handle = None

    def _read(self) -> None:
        nv, h = self._nv, self._handle
        reason_fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        self._rows.append(
            (
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
                nv.nvmlDeviceGetPowerUsage(h) / 1000,
                nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                int(reason_fn(h)),
            )
        )

    def _loop(self) -> None:
        while not self._halt.wait(SAMPLE_INTERVAL_S):
            try:
                self._read()
            except Exception as exc:
                self._why = f"NVML stopped answering ({type(exc).__name__}: {exc})"
                return

    def start(self) -> None:
        if self._handle is None:
            return
        try:
            self._read()
            self._thread = threading.Thread(target=self._loop, name="clock-sampler", daemon=True)
            self._thread.start()
        except Exception as exc:
            self._why = f"not sampled: NVML stopped answering ({type(exc).__name__}: {exc})"
            self._handle = None

    def stop(self) -> dict:
        """{sm_mhz, mem_mhz, power_w, temperature_c: {median, min, max}, power_limit_w, throttle_reasons,
        samples, interval_s}, or {"unavailable": why}. The caller synchronised the device first."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        try:
            if self._handle is not None:
                self._read()
        except Exception:
            pass
        finally:
            if self._nv is not None:
                try:
                    self._nv.nvmlShutdown()
                except Exception:
                    pass
        if not self._rows:
            return {"unavailable": self._why or "not sampled"}
        cols = np.asarray([r[:4] for r in self._rows], dtype=float)
        stat = lambda c: {"median": float(np.median(c)), "min": float(c.min()), "max": float(c.max())}  # noqa: E731
        mask = 0
        for r in self._rows:
            mask |= r[4]
        # gpu_idle between samples is the host's gap, not a slowdown of the timed work
        return {
            "sm_mhz": stat(cols[:, 0]),
            "mem_mhz": stat(cols[:, 1]),
            "power_w": stat(cols[:, 2]),
            "temperature_c": stat(cols[:, 3]),
            "power_limit_w": self._limit_w,
            "throttle_reasons": [n for n in reasons(mask) if n != "gpu_idle"],
            "idle_seen": bool(mask & 0x1),
            "samples": len(self._rows),
            "interval_s": SAMPLE_INTERVAL_S,
            **({"note": self._why} if self._why else {}),
        }
