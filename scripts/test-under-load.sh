#!/usr/bin/env bash
# The test suite on a busy machine: two CPU burners and an I/O burner run beside it, started and stopped
# by pid, so a check that passes only on an idle machine fails here. Arguments go to scripts/test.sh
# (e.g. `bash scripts/test-under-load.sh unit`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scratch=$(mktemp -d "${TMPDIR:-/tmp}/vime-load-XXXXXX")
burners=()
stop_burners() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait "${burners[@]}" 2>/dev/null || true
  rm -rf "$scratch"
}
trap stop_burners EXIT
for _ in 1 2; do
  yes >/dev/null &
  burners+=($!)
done
# Writes and syncs 64 MiB over and over: the page cache and the disk stay busy.
(while :; do dd if=/dev/zero of="$scratch/io" bs=1M count=64 conv=fsync status=none; done) &
burners+=($!)
printf '\033[2m[vime load]\033[0m burners %s beside the suite (load: %s)\n' "${burners[*]}" "$(cut -d' ' -f1-3 /proc/loadavg)" >&2
bash scripts/test.sh "$@"
