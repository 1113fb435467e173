#!/usr/bin/env bash
# Trainer job, run: wait for every engine, start the Vime rollout server (coding-agent rollouts in sandboxes,
# through the capture proxy, graded in fresh sandboxes), then run slime as a Ray job whose custom generate
# function (vime_bridge.generate) sends each sample to that server.
#   VIME_LAUNCH_CONFIG  the launch config the Job Group was rendered from (JSON; the render sets it)
#   VIME_ROLLOUT_PORT   rollout server port (default 8600)
# The rollout server reads the agent, grading, pool and dataset settings from this environment:
# AGENT_MAX_TURNS, AGENT_EVAL_TIMEOUT_SEC, SANDBOX_POOL_REPLICAS, SANDBOX_NO_POOL, SWESMITH_PER_REPO,
# SWESMITH_POOL_SUFFIX, SWESMITH_DATASET, VIME_SANDBOX and VIME_ENGINE_URLS (set below).
set -euo pipefail
cd "$(dirname "$0")/../../.."
# The Node trainer-setup.sh chose (the machine's when >= 22, else the LTS it fetched into .node/).
source scripts/node.sh
vime_use_node
vime() { node --import tsx --conditions=@vime/source packages/launch/src/cli.ts "$@"; }
CONFIG="$(mktemp --suffix=.json)"
if [ -n "${VIME_LAUNCH_CONFIG:-}" ]; then printf '%s' "$VIME_LAUNCH_CONFIG" >"$CONFIG"; else echo '{}' >"$CONFIG"; fi

# The plan's engines, once each is healthy (stdout: one "<url><TAB>healthy after …" line per engine).
VIME_ENGINE_URLS="$(vime engines wait -c "$CONFIG" --timeout 30m | cut -f1 | tr '\n' ' ')"
export VIME_ENGINE_URLS

PORT="${VIME_ROLLOUT_PORT:-8600}"
node --import tsx --conditions=@vime/source packages/slime/src/serve.ts --host 127.0.0.1 --port "$PORT" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do kill -0 $SERVER || exit 1; sleep 1; done

# The bridge finds the server and its Python module; `vime ray submit` merges this PYTHONPATH into the
# job's runtime env (Ray workers take their environment from there, not from this shell).
export VIME_ROLLOUT_URL="http://127.0.0.1:$PORT"
export PYTHONPATH="$PWD/packages/slime/python${PYTHONPATH:+:$PYTHONPATH}"
ray start --head --disable-usage-stats
vime ray submit -c "$CONFIG" --submission-id "${SKYPILOT_JOBGROUP_NAME:-vime}-slime"
