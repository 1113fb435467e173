#!/usr/bin/env bash
# The whole test suite: installs what it needs (system packages, a private Docker engine when root), builds,
# and runs every test. Extra arguments go to vitest.
set -euo pipefail
if [ "${VIME_BOOTSTRAPPED:-}" = test ]; then cd "$(dirname "${BASH_SOURCE[0]}")/.."; else source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh" test; fi
if [ -x scripts/docker-up.sh ] && [ "$(id -u)" -eq 0 ]; then
  source scripts/docker-up.sh
fi
pnpm exec vitest run "$@"
