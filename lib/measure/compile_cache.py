"""Inductor's and Triton's caches, kept between the processes of a run and between runs, in a folder
keyed by what makes a compiled graph valid: torch, Triton and CUDA versions, the GPU model, the lever
packages' versions and a hash of the syntax of this project's code that ends up in the graphs (a
comment or a reformatting is not a change). Anything else that changes gives another key, so a stale
graph is never reused; within a key, torch's own cache keys (the graph, the inputs' shapes, the
config) still decide each hit.

AOTAutograd's cache is left at torch's default. It bypasses torchao's float8 graphs, so about 5-6 s of
AOT tracing stays in every warm FP8 process. Marking torchao's config classes cacheable only moves the
bypass on to Dynamo's closure around torchao's autograd Function, which cannot be pickled
(reports/probes/fp8-warm-h100-2026-11-26).

Each measuring process reports how its compile went (`outcome`): cold (every graph compiled), warm
(every graph from the cache) or partial. The compile chapter keeps the cold time: the ledger in the
cache folder remembers, per configuration, the first step of the process that compiled it cold."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from lib.core.paths import LIB, ROOT
from lib.results import store

VAR = "COMPILE_CACHE"  # a folder to keep the caches in instead of .cache/compile/
# The code whose source the compiled graphs are made of (their switches, the model, the step, FP8 layers).
LEVER_CODE = (
    "train/model.py",
    "train/step.py",
    "core/stages.py",
    "train/fp8.py",
    "train/fp8_classifier.py",
    "train/plain_loop.py",
)
LEDGER = "cold_compiles.json"


def key(env: dict, code_dir: Path = LIB) -> dict:
    """What a cached graph depends on, beyond what torch's own keys see."""
    dev = env.get("device") or {}
    return {
        "torch": env.get("torch"),
        "triton": (env.get("packages") or {}).get("triton"),
        "cuda": env.get("cuda"),
        "hip": env.get("hip"),
        "device": dev.get("name"),
        "capability": dev.get("capability"),
        "packages": env.get("packages") or {},
        "code": store.short_hash(
            {f: store.code_hash((code_dir / f).read_text()) for f in LEVER_CODE if (code_dir / f).exists()}
        ),
    }


def folder(env: dict, root: Path | None = None) -> Path:
    """<root>/<device>-<hash of key()>: one folder per valid combination; root is COMPILE_CACHE or
    .cache/compile/."""
    if root is None:
        root = Path(os.environ[VAR]) if os.environ.get(VAR) else ROOT / ".cache" / "compile"
    name = re.sub(r"[^a-z0-9]+", "-", str((env.get("device") or {}).get("name") or "device").lower()).strip("-")
    return root / f"{name}-{store.short_hash(key(env))}"


def env_vars(env: dict, run_folder: Path | None = None) -> dict:
    """The variables that point a measuring process at the run's cache folder."""
    base = run_folder or folder(env)
    return {"TORCHINDUCTOR_CACHE_DIR": str(base / "inductor"), "TRITON_CACHE_DIR": str(base / "triton")}


def outcome(counters, cold_compile: dict | None = None) -> dict:
    """How this process's compilation went, from torch's counters: {state, fx_hits, fx_misses,
    aot_hits, aot_misses, aot_bypasses} and, for a warm one, the cold compile the ledger remembers."""
    ind, aot = counters.get("inductor", {}), counters.get("aot_autograd", {})
    hits, misses = ind.get("fxgraph_cache_hit", 0), ind.get("fxgraph_cache_miss", 0)
    state = "not compiled" if not hits + misses else "cold" if not hits else "warm" if not misses else "partial"
    out = {
        "state": state,
        "fx_hits": hits,
        "fx_misses": misses,
        "aot_hits": aot.get("autograd_cache_hit", 0),
        "aot_misses": aot.get("autograd_cache_miss", 0),
        "aot_bypasses": aot.get("autograd_cache_bypass", 0),
    }
    if state in ("warm", "partial") and cold_compile:
        out["cold"] = cold_compile
    return out


def ledger(env: dict) -> dict:
    try:
        return json.loads((folder(env) / LEDGER).read_text())
    except (OSError, ValueError):
        return {}


def remember(env: dict, rec: dict) -> None:
    """After a record: where it compiled cold, keep its first step as the configuration's cold compile."""
    cache = rec.get("compile_cache") or {}
    if cache.get("state") != "cold" or not rec.get("first_step_s") or not rec.get("fingerprint"):
        return
    book = ledger(env)
    book[rec["fingerprint"]] = {
        "first_step_s": rec["first_step_s"],
        "finished_at": rec.get("finished_at"),
        "commit": (rec.get("provenance") or {}).get("commit"),
        "host_id": (rec.get("provenance") or {}).get("host_id"),
    }
    store.write_atomic(folder(env) / LEDGER, book)
