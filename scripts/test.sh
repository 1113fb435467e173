#!/usr/bin/env bash
# The whole test suite: installs what it needs (system packages, a private Docker engine when root), builds,
# and runs the three tiers in one vitest run: unit, then integration, then attack (one file at a time).
#   bash scripts/test.sh                 every tier
#   bash scripts/test.sh unit            one tier: unit | integration | attack
#   bash scripts/test.sh unit -t codec   further arguments go to vitest
set -euo pipefail
tiers=()
while [ $# -gt 0 ]; do
  case "$1" in
  unit | integration | attack) tiers+=(--project "$1") ;;
  *) break ;;
  esac
  shift
done
if [ "${VIME_BOOTSTRAPPED:-}" = test ]; then cd "$(dirname "${BASH_SOURCE[0]}")/.."; else source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh" test; fi
# The unit tier uses no sandbox, container or browser: no engine to start for it alone.
if [ -x scripts/docker-up.sh ] && [ "$(id -u)" -eq 0 ] && [ "${tiers[*]:-}" != "--project unit" ]; then
  source scripts/docker-up.sh
fi
pnpm exec vitest run "${tiers[@]}" "$@"
