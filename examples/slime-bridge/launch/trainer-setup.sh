#!/usr/bin/env bash
# Trainer job, setup: Node.js 20 and the Vime workspace (for the rollout server), msgpack for the bridge,
# slime's wheel, the model checkpoint and the prompt data.
#   MODEL_DIR, MODEL_HF_REPO   as in engine-setup.sh
#   SWESMITH_DATASET           SWE-smith rows (.jsonl or .parquet; default: the offline task set)
#   SWESMITH_REPOS             space-separated repo substrings to keep (default: all)
set -euo pipefail
cd "$(dirname "$0")/../../.."
node_ok=$(node -e 'const [a,b]=process.versions.node.split(".").map(Number);console.log(a>20||(a===20&&b>=19)?1:0)' 2>/dev/null || echo 0)
if [ "$node_ok" != 1 ]; then
  curl -fsSL https://deb.nodesource.com/setup_20.x | bash -
  apt-get install -y nodejs
fi
bash scripts/bootstrap.sh main
pip install -q msgpack
if ls /wheels/*.whl >/dev/null 2>&1; then pip install -q /wheels/*.whl; fi
bash examples/slime-bridge/launch/engine-setup.sh
node --import tsx --conditions=@vime/source examples/slime-bridge/launch/prepare-data.ts \
  --out "$HOME/sky_workdir/swesmith.jsonl" ${SWESMITH_DATASET:+--dataset "$SWESMITH_DATASET"} \
  $(for r in ${SWESMITH_REPOS:-}; do printf -- '--repo %s ' "$r"; done)
