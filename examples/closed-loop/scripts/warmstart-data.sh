#!/usr/bin/env bash
# Warm-start transcripts: run the coding-agent main job with its stand-in policy (a scripted mix of gold
# fixes, wrong fixes and malformed replies on the offline task set) and keep its step batches.
#
#   scripts/warmstart-data.sh [out-dir] [steps] [prompts] [samples]
#
# Defaults: 6 steps x 8 prompts x 4 samples = 192 rollouts; step k takes tasks (k-1)*8 .. k*8-1 of the
# offline set (46 tasks, cycling), so the default run covers every task. The batches land in
# <out-dir>/steps/<step>.msgpack, ready for `python -m vime_policy.sft --data <out-dir>/steps`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-runs/warmstart}
steps=${2:-6}
prompts=${3:-8}
samples=${4:-4}
cd "$repo"
pnpm --silent coding-agent -- --steps "$steps" --prompts "$prompts" --samples "$samples" --out "$out" --quiet
echo "warm-start batches: $(ls "$out"/steps/*.msgpack | wc -l) files, $(du -sh "$out/steps" | cut -f1) in $out/steps"
