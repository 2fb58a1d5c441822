"""Which of Inductor's modules, imported in a process that has not touched the GPU, leave a child forked after it
unable to use the GPU (the launcher, lib/measure/preload.py, forks one child per measurement), and what the import
and torch.compile's own construction cost. Run on a GPU host: `python3 tools/probe_preload.py`; one JSON line per
module, then the timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = (
    "triton",
    "torch._inductor.config",
    "torch._inductor.utils",
    "torch._inductor.codecache",
    "torch._inductor.async_compile",
    "torch._inductor.lowering",
    "torch._inductor.compile_fx",
)
ONE = """
import sys, time, json
sys.path.insert(0, {root!r})
import torch
from lib.measure import preload
import torch._dynamo
t = time.perf_counter()
why = preload.trial_import({name!r})
print(json.dumps({{"module": {name!r}, "fork_after_import": why or "clean", "trial_s": round(time.perf_counter() - t, 2)}}))
"""
COST = """
import sys, time, json
sys.path.insert(0, {root!r})
import torch, torch._dynamo
t = time.perf_counter(); import torch._inductor.compile_fx; imp = time.perf_counter() - t
m = torch.nn.Linear(8, 8)
t = time.perf_counter(); torch.compile(m); wrap = time.perf_counter() - t
print(json.dumps({{"import_compile_fx_s": round(imp, 2), "torch_compile_call_s": round(wrap, 3)}}))
"""
# Where a compiled stage's build phase goes (lib/train/step.py, build), in a process that preloaded what the
# launcher does: the model made on the CPU, moved to the GPU, the optimizer, torch.compile's wrapper.
BUILD = """
import sys, time, json
sys.path.insert(0, {root!r})
import torch, torch._dynamo
from lib.core import config, stages
from lib.train import step
from lib.train.model import GPT
params, out = config.load("h100"), {{}}
t = time.perf_counter(); torch.cuda.init(); out["cuda_init_s"] = time.perf_counter() - t
t = time.perf_counter(); torch.manual_seed(0); m = GPT(step.model_config(params, stages.get("loss_only")))
out["model_on_cpu_s"] = time.perf_counter() - t
t = time.perf_counter(); m = m.to("cuda"); torch.cuda.synchronize(); out["to_gpu_s"] = time.perf_counter() - t
t = time.perf_counter(); torch.optim.AdamW(m.parameters(), fused=True); out["adamw_s"] = time.perf_counter() - t
t = time.perf_counter(); torch.compile(m); out["torch_compile_call_s"] = time.perf_counter() - t
t = time.perf_counter(); step.build(params, stages.get("loss_only"), "cuda"); out["whole_build_again_s"] = time.perf_counter() - t
print(json.dumps({{k: round(v, 2) for k, v in out.items()}}))
"""

if __name__ == "__main__":
    for name in MODULES:
        out = subprocess.run(
            [sys.executable, "-c", ONE.format(root=str(ROOT), name=name)], capture_output=True, text=True
        )
        print(
            out.stdout.strip() or json.dumps({"module": name, "error": out.stderr.strip().splitlines()[-1:]}),
            flush=True,
        )
    for code in (COST, BUILD):
        out = subprocess.run([sys.executable, "-c", code.format(root=str(ROOT))], capture_output=True, text=True)
        print(out.stdout.strip() or out.stderr[-500:], flush=True)
