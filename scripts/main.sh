#!/usr/bin/env bash
# The main job: installs what it needs, builds, and runs the coding-agent example on its embedded defaults.
# Extra arguments go to the example (see `pnpm coding-agent -- --help`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh" main
exec pnpm run coding-agent "$@"
