"""How a host's GPUs talk to each other, for the environment table: `nvidia-smi topo -m` (the link between every
pair), NVML's active NVLink count and generation per GPU, and NCCL's version. Each part that cannot be read says why
(no NVML in a container, no nvidia-smi, a CPU host) instead of failing the report."""

from __future__ import annotations

import re
import subprocess

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def topology() -> dict:
    """nvidia-smi's link matrix (`topo -m`), its legend cut off; or why there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return {"topology": None, "topology_reason": f"nvidia-smi topo -m could not run ({type(e).__name__})"}
    if out.returncode != 0:
        return {"topology": None, "topology_reason": f"nvidia-smi topo -m exited {out.returncode}"}
    matrix = ANSI.sub("", out.stdout).split("\nLegend:")[0].rstrip()
    return {"topology": matrix}


def nvlinks(count: int, nvml=None) -> dict:
    """Per GPU, how many NVLinks are active and their generation (NVML); or why NVML could not say. `nvml`: the
    pynvml module (tests pass a stand-in; None imports it)."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        links = []
        for i in range(count):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            active, version = 0, None
            for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if nvml.nvmlDeviceGetNvLinkState(h, link):
                        active += 1
                        version = version or nvml.nvmlDeviceGetNvLinkVersion(h, link)
                except Exception:  # a link index the GPU does not have
                    break
            links.append({"gpu": i, "active_links": active, "nvlink_version": version})
        return {"nvlink": links}
    except Exception as e:  # NVML absent (CPU, MPS, some containers): say so, do not fail
        return {"nvlink": None, "nvlink_reason": f"NVML unavailable ({type(e).__name__})"}


def nccl_version() -> str | None:
    try:
        import torch

        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        return None


def capture(count: int) -> dict:
    """The host's interconnect as the environment record keeps it (under 'interconnect')."""
    return {
        **topology(),
        **nvlinks(count),
        "nccl": nccl_version(),
        "nccl_algorithm": "not read: NCCL picks its algorithm and protocol per call (NCCL_DEBUG=INFO shows them)",
    }
