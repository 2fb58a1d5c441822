"""Where a warm FP8 first step goes (issue 29): with the report's compile cache warm, torch.compile's first step of
the FP8 lm_head stage takes about 10 s on an H100 against about 3 s for the same model without FP8, and a default
report runs some 24 such processes. AOTAutograd's cache is bypassed for torchao's float8 graphs; this says why
(the bypass reason torch logs), where the first step's seconds go (torch._dynamo.utils.compile_times), and whether
letting those graphs into AOTAutograd's cache shortens it without moving the step time.

Run on a GPU host after `make setup`, with the report's compile cache in .cache/compile (tools/device_call.sh
<gpu> 0 unpacks a carried one): `PYTHONPATH=.deps:. python3 tools/probe_fp8_warm.py [batch]`. One JSON line per
process: stage, whether AOTAutograd's cache was opened to custom autograd Functions, first step, median of 10
steps, the cache counters, the bypass reasons and the compile-time table's largest entries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONE = """
import json, logging, statistics, sys, time
sys.path.insert(0, {root!r})
import torch
reasons = []
class Keep(logging.Handler):
    def emit(self, record):
        reasons.append(record.getMessage()[:300])
log = logging.getLogger("torch._functorch._aot_autograd.autograd_cache")
log.setLevel(logging.INFO); log.addHandler(Keep())
import torch._functorch.config
import torch._inductor.config
if {open_cache!r} == "mark":  # the bypass names torchao's ScaledMMConfig, a namedtuple of flags: mark it cacheable
    torch._functorch.config.autograd_cache_allow_custom_autograd_functions = True  # and its autograd Function
    torch._inductor.config.unsafe_marked_cacheable_functions = {{
        name: "torchao-0.17"
        for name in (
            "torchao.float8.float8_training_tensor.ScaledMMConfig", "torchao.float8.float8_training_tensor.LinearMMConfig",
            "torchao.float8.float8_training_tensor.GemmInputRole", "torchao.float8.float8_training_tensor.Float8TrainingTensor",
            "torchao.float8.config.CastConfig", "torchao.float8.config.ScalingType", "torchao.float8.config.ScalingGranularity",
            "torchao.float8.config.Float8GemmConfig", "torchao.float8.config.Float8LinearConfig",
            "torch._dynamo.variables.misc.trampoline_autograd_apply",
        )
    }}
elif {open_cache!r}:
    torch._functorch.config.autograd_cache_allow_custom_autograd_functions = True
from lib.core import config, data, stages
from lib.train import step
params = config.load({profile!r}, [{batch}])
stage = stages.get({stage!r})
t = time.perf_counter(); train = step.build(params, stage, "cuda"); build = time.perf_counter() - t
xs, ys = data.device_batches(params, {batch}, 13, "cuda")
t = time.perf_counter(); train(xs[0], ys[0]); torch.cuda.synchronize(); first = time.perf_counter() - t
for i in (1, 2): train(xs[i], ys[i])
times = []
for i in range(3, 13):
    torch.cuda.synchronize(); t = time.perf_counter(); train(xs[i], ys[i]); torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
from torch._dynamo.utils import compilation_time_metrics as table, counters
top = sorted(((k, sum(v)) for k, v in table.items()), key=lambda kv: -kv[1])[:12]
print(json.dumps({{
    "stage": {stage!r}, "batch": {batch}, "aot_cache_open": {open_cache!r}, "build_s": round(build, 2),
    "first_step_s": round(first, 2), "step_ms_median": round(1000 * statistics.median(times), 2),
    "aot": dict(counters["aot_autograd"]), "inductor_fx": {{k: v for k, v in counters["inductor"].items() if "cache" in k}},
    "bypass_reasons": sorted(set(r for r in reasons if "Bypass" in r or "bypass" in r)),
    "compile_times_s": {{k: round(v, 2) for k, v in top}},
}}))
"""


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    profile = os.environ.get("PROFILE", "h100")
    from lib.measure import compile_cache
    from lib.run import runner

    env = runner.capture_environment()
    cache_vars = compile_cache.env_vars(env)
    print(json.dumps({"cache_folder": str(compile_cache.folder(env)), "exists": compile_cache.folder(env).is_dir()}))
    cases = [("loss_only", False), ("fp8_head", False), ("fp8_head", False), ("fp8_head", True), ("fp8_head", True)]
    if os.environ.get("CASES") == "mark":
        cases = [("fp8_head", "mark")] * 2
    for stage, open_cache in cases:
        code = ONE.format(root=str(ROOT), profile=profile, stage=stage, batch=batch, open_cache=open_cache)
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **cache_vars}, capture_output=True, text=True
        )
        print(proc.stdout.strip() or json.dumps({"stage": stage, "error": proc.stderr.strip().splitlines()[-3:]}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
