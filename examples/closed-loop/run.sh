#!/usr/bin/env bash
# The closed RL loop on one machine: warm start (unless --model is given), eval of the initial weights,
# the RL run (policy server + coding-agent loop in bubblewrap sandboxes + trainer + weight sync), eval
# of the final weights, and the summary. Each phase keeps its output under --out and is skipped when
# run again, so a run cut short continues where it stopped.
#
#   ./run.sh [all|warmstart|eval|train|summary] [flags]     (./run.sh --help lists the flags)
#
# Works in a checkout (node + tsx from node_modules) and in the folder scripts/bundle.sh makes (the
# bundled program, its own Node (the LTS of scripts/node.sh) and bubblewrap; no node_modules, no network). The program puts the
# project's Python (python/ at the root, megatron.core's source when vendored there) on PYTHONPATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export PYTHONUNBUFFERED=1 NO_VCS_VERSION=1
case "${1:-}" in
  all | warmstart | eval | train | summary | -h | --help) ;;
  *) set -- all "$@" ;;
esac
if [ -f "$here/app/cli.mjs" ]; then
  tools="$root/tools"
  node="$tools/node"
  if [ ! -x "$node" ]; then
    xz -dc "$tools/node.xz" >"$node.tmp-$$" && chmod +x "$node.tmp-$$" && mv "$node.tmp-$$" "$node"
  fi
  if ! command -v bwrap >/dev/null 2>&1; then export PATH="$tools/bwrap/usr/bin:$PATH"; fi
  # The trainer's batch reader needs msgpack; its pure-Python fallback comes along for machines without it.
  if ! python3 -c 'import msgpack' 2>/dev/null; then
    export PYTHONPATH="$tools/python${PYTHONPATH:+:$PYTHONPATH}"
  fi
  # Grading runs `python3 -I -m pytest` in the sandboxes (isolated: PYTHONPATH is not read), and their
  # python3 is the one on the sandbox's PATH, not necessarily this shell's: pytest must be there. The bundle
  # carries Debian's, installed where that python3 looks when missing.
  sandbox_python=$(PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v python3 || echo python3)
  if ! "$sandbox_python" -I -c 'import pytest' 2>/dev/null; then
    site=$("$sandbox_python" -I -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    if mkdir -p "$site" 2>/dev/null && [ -w "$site" ]; then
      xz -dc "$tools/pytest.tar.xz" | tar -C "$site" --skip-old-files -xf -
      echo "pytest: $sandbox_python had none; installed the bundled $(cat "$tools/pytest.version") into $site" >&2
    else
      echo "pytest: $sandbox_python has none, and $site is not writable; as root: xz -dc $tools/pytest.tar.xz | tar -C $site -xf -" >&2
      exit 2
    fi
  fi
  exec "$node" "$here/app/cli.mjs" "$@"
fi
exec node --import tsx --conditions=@vime/source "$here/src/cli.ts" "$@"
