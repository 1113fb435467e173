#!/usr/bin/env bash
# Trainer job, run: wait for every engine, start the Vime rollout server (coding-agent rollouts in Docker
# sandboxes, through the capture proxy, against the engines), then run slime as a Ray job whose custom
# generate function (generate.generate → vime_bridge) sends each sample to that server.
#   VIME_LAUNCH_CONFIG   the launch config this Job Group was rendered from (default: the 1-engine one)
#   VIME_ROLLOUT_PORT    rollout server port (default 8600)
set -euo pipefail
cd "$(dirname "$0")/../../.."
CONFIG="${VIME_LAUNCH_CONFIG:-examples/slime-bridge/launch/1-engine.yaml}"
vime() { node --import tsx --conditions=@vime/source packages/launch/src/cli.ts "$@"; }

vime engines wait -c "$CONFIG" --timeout 30m
ENGINE_URLS=""
for m in ${SGLANG_MEMBERS:-sglang}; do ENGINE_URLS+="--engine-url http://${m}-0.${SKYPILOT_JOBGROUP_NAME}:30000 "; done

PORT="${VIME_ROLLOUT_PORT:-8600}"
# shellcheck disable=SC2086
node --import tsx --conditions=@vime/source examples/coding-agent/src/serve.ts $ENGINE_URLS \
  --host 127.0.0.1 --port "$PORT" --sandbox "${VIME_SANDBOX:-docker}" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do kill -0 $SERVER || exit 1; sleep 1; done

# Ray workers inherit this environment: the bridge finds the server and its Python module.
export VIME_ROLLOUT_URL="http://127.0.0.1:$PORT"
export PYTHONPATH="$PWD/examples/slime-bridge/python${PYTHONPATH:+:$PYTHONPATH}"
ray start --head --disable-usage-stats
vime ray submit -c "$CONFIG" --submission-id "${SKYPILOT_JOBGROUP_NAME:-vime}-slime"
