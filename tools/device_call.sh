#!/usr/bin/env bash
# One call of a report measured on a device machine in several calls (a call there lasts at most 10 minutes):
# `make report` resumes the run kept in runs/reports (the machine keeps ignored folders between calls), stops
# between configurations once MEASURE_FOR seconds are spent, and everything under runs/ is packed into $OUT.
# Usage: GPT2_LEVERS_COMMIT=<sha> GPT2_LEVERS_TREE=<tree hash> tools/device_call.sh <gpu> <seconds> [make options]
set -o pipefail
gpu=$1 budget=$2
shift 2
export PYTHONUNBUFFERED=1
mkdir -p runs
{
  nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit --format=csv,noheader
  make report GPU="$gpu" MEASURE_ONLY=1 REPORTS=runs/reports MEASURE_FOR="$budget" "$@"
  echo "make exit status: $?"
} 2>&1 | tee -a "runs/measure-log-$gpu.txt"
du -sh .cache/compile 2>/dev/null
tar czf "$OUT/runs.tgz" runs
