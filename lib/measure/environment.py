"""What machine and software a report was measured on.

Run as `python -m lib.measure.environment` it prints one JSON record: the detected device (CUDA, ROCm,
Apple MPS or CPU) and the software stack. The CLI always calls it in a child process so that
the parent never holds a GPU context while configurations are measured."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import sys

from lib.core import stages
from lib.core.provenance import host_id
from lib.measure import interconnect


def _cublas_version() -> str | None:
    """cuBLASLt's own version, read from the library PyTorch actually loaded."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libcublasLt" in line}
        for path in paths:
            v = ctypes.CDLL(path).cublasLtGetVersion()
            return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    except Exception:
        pass
    return None


def _nvml(index: int) -> dict:
    try:
        import pynvml as nv

        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(index)
        out = {"driver": nv.nvmlSystemGetDriverVersion()}
        for key, fn in [
            ("sm_clock_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            ("mem_clock_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
            ("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
            ("pcie_link_gen", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            ("persistence_mode", lambda: nv.nvmlDeviceGetPersistenceMode(h)),
        ]:
            try:
                out[key] = fn()
            except Exception:
                out[key] = None
        for key in ("driver",):
            if isinstance(out[key], bytes):
                out[key] = out[key].decode()
        return out
    except Exception as e:  # NVML absent (CPU, MPS, some containers): say so, do not fail
        return {"nvml": f"unavailable ({type(e).__name__})"}


def gpu_uuid(props) -> str | None:
    """nvidia-smi's form of a device's UUID (GPU-...) from torch's device properties; None where it has none."""
    uuid = str(getattr(props, "uuid", "") or "") or None
    return uuid if uuid is None or uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def own_gpu_stamp(job: dict) -> dict | None:
    """The run's stamp, with the UUID of the GPU this child measured on where its job named one of the host's GPUs
    (a parity lane sees that GPU alone, as its device 0): reports/h100-x4's seeds on GPUs 1-3 carried GPU 0's."""
    stamp = job.get("stamp")
    if not stamp or job.get("device") is None or not stamp.get("gpu_uuid"):
        return stamp
    import torch

    return {**stamp, "gpu_uuid": gpu_uuid(torch.cuda.get_device_properties(0))}


def detect() -> dict:
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        backend = "rocm" if torch.version.hip else "cuda"
        return {
            "backend": backend,
            "name": props.name,
            "count": torch.cuda.device_count(),
            "capability": [props.major, props.minor],
            "sm_count": props.multi_processor_count,
            "memory_bytes": props.total_memory,
            "uuid": gpu_uuid(props),
        }
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return {"backend": "mps", "name": "mps", "count": 1}
    return {"backend": "cpu", "name": platform.processor() or platform.machine(), "count": 1, "cores": os.cpu_count()}


# The packages the compiled and library levers run on (distribution names), versions or None: Triton
# (inductor's kernels) and every package a stage names in the registry.
LEVER_PACKAGES = ("triton", *stages.lever_packages())


def packages() -> dict:
    from importlib import metadata

    out = {}
    for name in LEVER_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def capture() -> dict:
    """Device plus software stack; hostname-free so reports can be shared."""
    import numpy
    import torch

    env = {
        "device": detect(),
        "host_id": host_id(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "os": f"{platform.system()} {platform.release()}",
        "cpu": platform.processor() or platform.machine(),
        "cpu_cores": os.cpu_count(),
        "packages": packages(),
    }
    dev = env["device"]
    if dev["backend"] in ("cuda", "rocm"):
        env["cuda"] = torch.version.cuda
        env["hip"] = torch.version.hip
        env["cudnn"] = torch.backends.cudnn.version()
        a = torch.randn(64, 64, device="cuda")
        (a @ a).sum().item()  # loads cuBLAS so its version can be read
        env["cublas"] = _cublas_version()
        env.update(_nvml(0))
        env["interconnect"] = interconnect.capture(dev["count"])
    else:
        env["threads"] = torch.get_num_threads()
    return env


if __name__ == "__main__":
    json.dump(capture(), sys.stdout)
