#!/usr/bin/env bash
# Run the trainer on a GPU machine with PyTorch.
#
#   ./run.sh <batch.msgpack> <out-dir> [trainer options, see python -m vime_megatron.train --help]
#
# The trainer is the project's Python (python/ at the repository root). megatron.core comes from
# `pip install megatron-core` when it is installed, otherwise from the source that
# python/scripts/vendor-megatron.sh put under python/.vendor/megatron-lm (for machines without internet).
set -euo pipefail
python_dir=$(cd "$(dirname "$0")/../../python" && pwd)
batch=${1:?usage: run.sh <batch.msgpack> <out-dir> [options]}
out=${2:?usage: run.sh <batch.msgpack> <out-dir> [options]}
shift 2
export NO_VCS_VERSION=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$python_dir/src${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c 'import megatron.core' 2>/dev/null; then
  vendor="$python_dir/.vendor/megatron-lm"
  [ -d "$vendor/megatron/core" ] || {
    echo "megatron.core is neither installed (pip install megatron-core) nor vendored ($vendor);" \
      "run python/scripts/vendor-megatron.sh first" >&2
    exit 2
  }
  export PYTHONPATH="$PYTHONPATH:$vendor"
fi
exec python3 -m vime_megatron.train --batch "$batch" --out "$out" "$@"
