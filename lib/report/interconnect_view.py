"""The host's GPU interconnect as the report shows it (lib/measure/interconnect.py reads it): one line for the
environment table, and nvidia-smi's link matrix for the HTML."""

from __future__ import annotations

import html

# nvmlDeviceGetNvLinkVersion answers with NVML's enum (nvmlNvlinkVersion_t), not the generation: 6 is NVLink 4.0,
# which an H100 reads
NVLINK_GENERATION = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}


def nvlink_generation(enum: int) -> str:
    """The NVLink generation NVML's version enum names ('4.0' for 6); an enum this table lacks, as NVML's number."""
    return NVLINK_GENERATION.get(enum, f"NVML enum {enum}")


def summary(ic: dict | None) -> str | None:
    """One line for the environment table: NVLinks per GPU and generation, NCCL's version; None without a record."""
    if not ic:
        return None
    links = ic.get("nvlink")
    if links:
        counts = sorted({link["active_links"] for link in links})
        versions = sorted({nvlink_generation(link["nvlink_version"]) for link in links if link["nvlink_version"]})
        nv = (
            f"{'/'.join(map(str, counts))} active NVLinks per GPU"
            + (f", NVLink {'/'.join(versions)}" if versions else "")
            if any(counts)
            # one GPU has no peer to link to: "PCIe only" would misread an SXM part's idle NVLinks
            else "no active NVLink (one GPU: no peer)"
            if len(links) == 1
            else "no active NVLink (PCIe only)"
        )
    else:
        nv = ic.get("nvlink_reason") or "NVLink not read"
    return f"{nv}; NCCL {ic.get('nccl') or 'version unknown'}"


def topology_html(env: dict) -> str:
    """nvidia-smi's link matrix between every pair of GPUs, or why there is none."""
    ic = env.get("interconnect") or {}
    if ic.get("topology"):
        return f"<pre class='topology'>{html.escape(ic['topology'])}</pre>"
    return f"<p class='note'>{html.escape(ic.get('topology_reason') or 'No GPU topology recorded on this host.')}</p>"
