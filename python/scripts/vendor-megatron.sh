#!/usr/bin/env bash
# Put megatron.core's source into the ignored .vendor/ folder, for a GPU machine that cannot
# `pip install megatron-core` (no internet). Takes a Megatron-LM git checkout or bare repository.
#
#   python/scripts/vendor-megatron.sh <path to NVIDIA/Megatron-LM git dir> [commit]
#
# The closed loop puts python/.vendor/megatron-lm on PYTHONPATH when it is there; so does
# examples/megatron-trainer/run.sh when megatron.core is not installed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repo=${1:?usage: vendor-megatron.sh <Megatron-LM git dir> [commit]}
commit=${2:-d98e8a64ddf34856e74b24714e3bedb2f5a39553} # megatron.core 0.20.0, the version the evidence ran
dest="$here/.vendor/megatron-lm"
rm -rf "$dest" && mkdir -p "$dest"
git -C "$repo" archive "$commit" megatron/core LICENSE | tar -x -C "$dest"
echo "$commit" >"$dest/COMMIT"
echo "megatron/core at $commit -> $dest ($(du -sh "$dest" | cut -f1))"
