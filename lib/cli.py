"""The command line of `make report`, `make render`, `make pdf` and `make compare`: arguments,
defaults from the environment (the Makefile never pastes user text into a shell line), and one
line on stderr with exit code 2 for every bad input (lib/run/pipeline.py does the work)."""

from __future__ import annotations

import argparse
import os
import sys

from lib.core import cli_args, config, data
from lib.run import pipeline


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.cli")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report", help="measure every stage and render the report")
    # Defaults come from the environment so the Makefile never pastes user text into a shell line.
    env = os.environ
    r.add_argument("--gpu", default=env.get("GPU") or None, help="profile name (params/<name>.yaml); default: detect")
    r.add_argument(
        "--model",
        default=env.get("MODEL") or None,
        help="model preset of params/models.yaml, e.g. gpt2-xl (default: the profile's)",
    )
    r.add_argument(
        "--batches", default=env.get("BATCHES") or None, help="batch sizes, e.g. '16 32 64' (default: the profile's)"
    )
    r.add_argument(
        "--stages",
        default=env.get("STAGES") or None,
        help="measure only these stages, e.g. 'fp32 vocab ddp' (the first is the baseline)",
    )
    r.add_argument(
        "--chapters",
        default=env.get("CHAPTERS") or None,
        help="measure only these chapters, in this order, e.g. 'batch_sweep autotune' (resuming the report)",
    )
    r.add_argument(
        "--depth",
        default=env.get("DEPTH") or None,
        help="'full' adds the depth the default leaves out (params' full_depth: max-autotune, the size sweep...)",
    )
    r.add_argument(
        "--override",
        action="store_true",
        default=env.get("OVERRIDE", "") not in ("", "0"),
        help="run a profile on a device it does not name",
    )
    r.add_argument("--reports", default=env.get("REPORTS") or None, help="reports folder (default: reports/)")
    r.add_argument(
        "--force",
        action="store_true",
        default=env.get("FORCE", "") not in ("", "0"),
        help="re-measure everything (the earlier report is archived, not overwritten)",
    )
    r.add_argument(
        "--measure-only",
        action="store_true",
        default=env.get("MEASURE_ONLY", "") not in ("", "0"),
        help="measure every chapter but render nothing (then `make render` here or elsewhere)",
    )
    r.add_argument("--nnodes", default=env.get("NNODES") or None, help="nodes of the DDP stage (default 1)")
    r.add_argument(
        "--node-rank",
        default=env.get("NODE_RANK") or None,
        help="this node's rank, 0..NNODES-1 (default 0; node 0 writes the DDP record)",
    )
    r.add_argument(
        "--rdzv",
        default=env.get("RDZV") or None,
        help="host:port of torchrun's rendezvous, every node the same (required when NNODES > 1)",
    )
    for name, text in (
        ("pdf", "render report.pdf from an existing report.html"),
        ("render", "redraw notebooks, HTML and PDF from existing results, measuring nothing"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--gpu", default=env.get("GPU") or None)
        p.add_argument("--model", default=env.get("MODEL") or None)
        p.add_argument("--reports", default=env.get("REPORTS") or None)
    k = sub.add_parser("check", help="check the report's inputs that need no device; print the first error")
    k.add_argument("inputs", nargs="?", help="a file of NAME=value lines (the Makefile's), else the environment")
    c = sub.add_parser("compare", help="one report across GPUs from existing reports")
    c.add_argument("--gpus", default=env.get("GPUS") or None, help="e.g. 'h100 h200'")
    c.add_argument("--reports", default=env.get("REPORTS") or None)
    args = ap.parse_args(argv)
    if args.cmd == "check":  # the Makefile's early check: the reason on stdout, nothing when fine
        given = dict(env)
        if args.inputs:
            lines = open(args.inputs, encoding="utf-8").read().splitlines()
            given = dict(line.split("=", 1) for line in lines if "=" in line)
        try:
            pipeline.check_inputs(
                given.get("GPU") or None,
                given.get("BATCHES") or None,
                given.get("STAGES") or None,
                given.get("REPORTS") or None,
                nnodes=given.get("NNODES") or None,
                node_rank=given.get("NODE_RANK") or None,
                rdzv=given.get("RDZV") or None,
                chapter_list=given.get("CHAPTERS") or None,
                price=given.get("PRICE_PER_GPU_HOUR") or None,
                model=given.get("MODEL") or None,
                depth=given.get("DEPTH") or None,
            )
            pipeline.check_device(given.get("GPU") or None)
            return 0
        except (config.ConfigError, data.DataError) as e:
            print(f"error: {e}")
            return 2
    try:
        cli_args.parse_price(env.get("PRICE_PER_GPU_HOUR"))  # used when drawing: refused before anything runs
        return {"report": pipeline.report, "pdf": pipeline.pdf, "render": pipeline.render, "compare": pipeline.compare}[
            args.cmd
        ](args)
    except (config.ConfigError, data.DataError) as e:  # UsageError is a ConfigError
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
