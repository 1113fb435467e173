#!/usr/bin/env bash
# Engine job, run: one SGLang server, reached by the trainer at <job>-0.$SKYPILOT_JOBGROUP_NAME:30000.
#   MODEL_DIR            folder under /root (default Qwen3-14B)
#   ENGINE_TP            tensor parallel size of this engine (default 1)
#   SGLANG_MEM_FRACTION  static memory fraction (default 0.7)
set -euo pipefail
exec python3 -m sglang.launch_server --model-path "/root/${MODEL_DIR:-Qwen3-14B}" --tp "${ENGINE_TP:-1}" \
  --host 0.0.0.0 --port 30000 --mem-fraction-static "${SGLANG_MEM_FRACTION:-0.7}"
