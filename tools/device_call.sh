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
# A compile cache carried from an earlier sitting (git show compile-cache-<gpu>:cache.tar.xz > .carry/cache.tar.xz,
# .carry/ git-ignored and named in carry): unpacked once, before the first measurement. The tree, the wheelhouse, the
# data and the cache together pass the carry limit (64 MiB), so a first call may carry the cache and the data alone
# with <seconds> = 0: it unpacks and measures nothing; the next calls carry the wheelhouse and the data as usual.
if [ -f .carry/cache.tar.xz ] && [ ! -d .cache/compile ]; then
  mkdir -p .cache && tar xJf .carry/cache.tar.xz -C .cache && echo "compile cache unpacked: $(ls .cache/compile)"
fi
# The report's long quality tests (tools/device_tree.sh out copies them to .carry/long/<gpu>): the sitting chooses its
# recipe with the levers they admit (lib/results/long_choice.py), and the new folder keeps them
if [ -d ".carry/long/$gpu" ] && [ ! -d "runs/reports/$gpu" ]; then
  mkdir -p "runs/reports/$gpu" && cp -r ".carry/long/$gpu" "runs/reports/$gpu/long"
fi
[ "$budget" = 0 ] && exit 0
{
  nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit --format=csv,noheader
  make report GPU="$gpu" MEASURE_ONLY=1 REPORTS=runs/reports MEASURE_FOR="$budget" "$@"
  echo "make exit status: $?"
} 2>&1 | tee -a "runs/measure-log-$gpu.txt"
du -sh .cache/compile 2>/dev/null
# With CACHE_SIZES=1: what carrying the compile cache to another machine would take (the carry limit is 64 MiB)
if [ -n "$CACHE_SIZES" ] && [ -d .cache/compile ]; then
  du -sh .cache/compile/*/* 2>/dev/null
  find .cache/compile -type f | sed 's/.*\.//' | sort | uniq -c | sort -rn | head -12
  echo "whole cache, xz -3: $(tar cf - -C .cache compile | xz -T0 -3 | wc -c) bytes"
  echo "without Triton's intermediate IR (ttir ttgir llir ptx source), xz -3: $(tar cf - --exclude='*.ttir' \
    --exclude='*.ttgir' --exclude='*.llir' --exclude='*.ptx' --exclude='*.source' -C .cache compile | xz -T0 -3 | wc -c) bytes"
fi
# With SAVE_CACHE=1: the compile cache itself, for a warm re-run on a fresh machine (a file back from the device
# may be 16 MiB at most; whole, because Triton finds a kernel only with every file of its group)
if [ -n "$SAVE_CACHE" ] && [ -d .cache/compile ]; then
  tar cf - -C .cache compile | xz -T0 -6 > "$OUT/compile-cache.tar.xz"
  ls -l "$OUT/compile-cache.tar.xz"
fi
tar czf "$OUT/runs.tgz" runs
