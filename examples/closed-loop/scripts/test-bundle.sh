#!/usr/bin/env bash
# Check the bundle as the GPU machine gets it: copied to a temporary folder and run with its own Node,
# on a PATH without node, npm, pnpm, tsx or bwrap (so no node_modules and the bundled bubblewrap), on
# CPU with the tiny model: every phase (warm start of 1 step, eval, 1 RL step, eval, summary).
#
#   scripts/test-bundle.sh [bundle-dir] [procedural]      (default .bundle/vime-closed-loop)
#
# With `procedural`, the run uses the procedural family generated there (2 per operator family: the
# machine's python3 with pytest), the debugger's warm start, fresh draws and an eval of every step.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bundle=${1:-$here/.bundle/vime-closed-loop}
tasks=()
if [ "${2:-}" = procedural ]; then
  tasks=(--tasks procedural --procedural-seed 3 --per-family 2 --eval-every 1)
fi
tmp=$(mktemp -d)
chmod 755 "$tmp" # as a user's folder would be: a 0700 run folder stalled the warm pool here
trap 'rm -rf "$tmp"' EXIT
cp -r "$bundle" "$tmp/bundle"
mkdir "$tmp/bin"
for d in /usr/bin /bin /usr/sbin /sbin; do
  for f in "$d"/*; do
    n=$(basename "$f")
    case $n in node | nodejs | npm | npx | pnpm | pnpx | tsx | bwrap | corepack) continue ;; esac
    [ -e "$tmp/bin/$n" ] || ln -s "$f" "$tmp/bin/$n"
  done
done
# Debian's python3 (torch, msgpack) first: the one on a developer's PATH may lack them.
ln -sf /usr/bin/python3 "$tmp/bin/python3"
env -i PATH="$tmp/bin" HOME="$tmp" bash "$tmp/bundle/run.sh" --out "$tmp/run" --device cpu --backend torch \
  --train-tasks 2 --heldout-tasks 1 --steps 1 --prompts 2 --samples 2 --eval-samples 2 --concurrency 4 \
  --max-turns 1 --max-tokens 8 --max-context 4096 --no-validate --quiet \
  --warm-steps 1 --warm-prompts 3 --warm-samples 1 --warm-init tiny --warm-epochs 1 \
  --sft-arg=--max-steps --sft-arg=1 --sft-arg=--batch-tokens --sft-arg=2048 ${tasks[@]+"${tasks[@]}"}
/usr/bin/python3 - "$tmp/run/summary.json" "${2:-offline}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
if sys.argv[2] == "procedural":
    names = [c["name"] for c in s["eval"]["curve"]]
    assert names[0] == "initial" and "step-1" in names and "final" in names, names
    assert all(c["heldoutFamily"] is not None for c in s["eval"]["curve"]), s["eval"]["curve"]
c = s["claims"]
assert s["steps"] and s["eval"]["initial"] and s["eval"]["final"], "a phase left no record"
for k in ("everyDumpPassesCheck", "everyStepPassesTokenAudit", "everyRowCarriesItsVersion", "versionChangesEveryStep"):
    assert c[k], f"{k} is false"
assert "plain torch" in (s["trainer"]["label"] or ""), s["trainer"]
print(f"bundle check passed: node {s['machine']['node']}, trainer {s['trainer']['label']}, code {s['code']}")
PY
