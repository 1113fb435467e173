#!/usr/bin/env bash
# Trainer job, setup (idempotent): Node.js (>= 22) and the Vime workspace (the rollout server), msgpack for the
# bridge, the policy checkpoint, its conversion to Megatron's torch_dist layout (slime's --ref-load) with
# slime's own converter, and slime's prompt data.
#   MODEL_DIR          checkpoint folder under /root (default Qwen3-14B)
#   MODEL_HF_REPO      Hugging Face repository it is fetched from (default Qwen/Qwen3-14B)
#   MODEL_SCRIPT       slime's scripts/models/<script> with the architecture flags (default qwen3-14B.sh)
#   SWESMITH_DATASET   SWE-smith rows (.jsonl or .parquet; default: the offline task set)
#   SWESMITH_REPOS     space-separated repo substrings to keep (default: all)
#   SWESMITH_PER_REPO  rows kept per repo (default: all)
set -euo pipefail
cd "$(dirname "$0")/../../.."
MODEL_DIR="${MODEL_DIR:-Qwen3-14B}"
MODEL_SCRIPT="${MODEL_SCRIPT:-qwen3-14B.sh}"

# Node >= 22: the machine's, or the pinned LTS that bootstrap.sh fetches from the npm registry (needs npm).
command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq npm; }
source scripts/bootstrap.sh main
pip install -q msgpack

# The checkpoint (the same fetch as the engines'), then slime's --ref-load: /root/<MODEL_DIR>_torch_dist.
bash examples/slime-bridge/launch/engine-setup.sh
if [ ! -d "/root/${MODEL_DIR}_torch_dist" ]; then
  (
    cd /root/slime
    # shellcheck disable=SC1090
    source "scripts/models/${MODEL_SCRIPT}"
    PYTHONPATH=/root/Megatron-LM python3 tools/convert_hf_to_torch_dist.py "${MODEL_ARGS[@]}" \
      --hf-checkpoint "/root/${MODEL_DIR}" --save "/root/${MODEL_DIR}_torch_dist"
  )
fi

# slime's --prompt-data: one line per instance, the SWE-smith row in `metadata`.
node --import tsx --conditions=@vime/source examples/slime-bridge/launch/prepare-data.ts \
  --out "$HOME/sky_workdir/swesmith.jsonl" ${SWESMITH_DATASET:+--dataset "$SWESMITH_DATASET"} \
  ${SWESMITH_PER_REPO:+--per-repo "$SWESMITH_PER_REPO"} \
  $(for r in ${SWESMITH_REPOS:-}; do printf -- '--repo %s ' "$r"; done)
