#!/usr/bin/env bash
# Engine job, setup: fetch the policy checkpoint onto the engine's local disk once.
#   MODEL_DIR      folder under /root (default Qwen3-14B)
#   MODEL_HF_REPO  Hugging Face repository (default Qwen/Qwen3-14B)
set -euo pipefail
MODEL_DIR="${MODEL_DIR:-Qwen3-14B}"
MODEL_HF_REPO="${MODEL_HF_REPO:-Qwen/Qwen3-14B}"
if [ ! -d "/root/$MODEL_DIR" ]; then
  pip install -q -U "huggingface_hub[cli]"
  hf download "$MODEL_HF_REPO" --local-dir "/root/$MODEL_DIR"
fi
