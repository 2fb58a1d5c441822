#!/usr/bin/env bash
# The device tool sends the working tree (64 MiB at most), and the committed reports alone pass that (reports/archive
# keeps every superseded sitting). Before a sitting's calls: `tools/device_tree.sh out` moves every folder under
# reports/ to a stash beside the checkout; after the last call: `tools/device_tree.sh back` returns them. Make no
# commit in between (git would see the reports as deleted). A sitting writes its report under runs/ on the device.
set -euo pipefail
cd "$(dirname "$0")/.."
stash=${DEVICE_STASH:-../.reports-stash}
case "${1:-}" in
  out)
    # the long quality tests travel (carry .carry): a sitting chooses its recipe with them (tools/device_call.sh)
    for l in reports/*/long; do
      [ -d "$l" ] || continue
      g=$(basename "$(dirname "$l")")
      mkdir -p .carry/long && rm -rf ".carry/long/$g" && cp -r "$l" ".carry/long/$g"
    done
    mkdir -p "$stash"
    for d in reports/*/; do mv "$d" "$stash/"; done
    echo "reports moved to $stash: $(ls "$stash" | tr '\n' ' ')" ;;
  back)
    for d in "$stash"/*/; do mv "$d" reports/; done
    rmdir "$stash" && git status --short reports | head -5 ;;
  *) echo "usage: tools/device_tree.sh out|back" >&2; exit 2 ;;
esac
