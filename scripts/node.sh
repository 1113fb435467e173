#!/usr/bin/env bash
# The Node.js the scripts run on. Vime needs Node >= 22. When the machine's Node is older, or VIME_NODE
# asks for a pinned release, that release is taken from the npm registry (package node-linux-<arch>, which
# ships bin/node), checked against the sha512 pinned below, unpacked into the repository's .node/ folder
# (git-ignored, kept for the next run), run once to prove it works here, and put first on PATH.
#
#   source scripts/node.sh && vime_use_node [auto|lts|oldest|system]
#
# auto (the default, or $VIME_NODE): the machine's Node when it is >= 22, else the LTS below.
# Needs npm (any version) to fetch a release; nothing else of the machine's Node is used.

VIME_NODE_LTS=26.12.1    # the Active LTS
VIME_NODE_OLDEST=22.23.5 # the oldest maintained line: CI builds and runs the unit tier on it
VIME_NODE_MIN_MAJOR=22

# sha512 (hex) of the registry's tarball node-linux-<arch>-<version>.tgz (its dist.integrity).
_vime_node_sha512() {
  case "$1-$2" in
    26.12.1-x64) echo 8e4e4b3009a01e53e53cc5a9b14ad23aa35a1191bed7550d777e61590fa9e7f5c669e956b93a89ebd21c032ff9c6d3cf37877965104d38607a80b30287690bf4 ;;
    26.12.1-arm64) echo f0ec6ce98eeb0dc2ae7d520cff36114b0cad8f8e963ab664ef21422d328372cd7b6c18c0783f47300aa8f7b84c7cccb1a3322e7744b8bd90ace5607fde26af35 ;;
    22.23.5-x64) echo de3842fb07285b1299c5c46a176b144a5d1cf47117167babfe7b883f1e8ee8258a5748ce516426ec7b70e52b97aaa94c084862d1c26ac9b14f11be6185c06233 ;;
    22.23.5-arm64) echo 7b52ce506295aee3c6b8b56eb67f3e0a09b9a48d403e6e0abe1fb36dbfea7bf6690fdb3e4d06f2e6252064e5a63e96d22a98f44ddf033f53743449d76ac1e2ce ;;
    *) return 1 ;;
  esac
}

_vime_node_log() { printf '\033[2m[vime setup]\033[0m %s\n' "$*" >&2; }

_vime_node_arch() {
  case "$(uname -m)" in
    x86_64 | amd64) echo x64 ;;
    aarch64 | arm64) echo arm64 ;;
    *) return 1 ;;
  esac
}

# The folder of the pinned release <version> for <arch> (its bin/node inside).
_vime_node_home() { echo "${VIME_NODE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.node}/$1-linux-$2"; }

# Prints the folder whose bin/node is the pinned release <version>, fetching it once.
vime_node_fetch() {
  local version=$1 arch home sha tmp tgz
  arch=$(_vime_node_arch) || {
    echo "no Node.js build of the npm registry for this machine ($(uname -m)); install Node >= $VIME_NODE_MIN_MAJOR yourself" >&2
    return 1
  }
  home=$(_vime_node_home "$version" "$arch")
  if [ ! -x "$home/bin/node" ]; then
    sha=$(_vime_node_sha512 "$version" "$arch") || {
      echo "Node $version is not pinned in scripts/node.sh (pinned: $VIME_NODE_LTS, $VIME_NODE_OLDEST)" >&2
      return 1
    }
    command -v npm >/dev/null || {
      echo "fetching Node $version needs npm (Debian/Ubuntu: apt-get install npm), or install Node >= $VIME_NODE_MIN_MAJOR yourself" >&2
      return 1
    }
    _vime_node_log "fetching Node $version (npm package node-linux-$arch) into ${home%/*}/"
    mkdir -p "${home%/*}"
    tmp=$(mktemp -d "${home%/*}/.fetch.XXXXXX")
    tgz="$tmp/node-linux-$arch-$version.tgz"
    if ! (cd "$tmp" && npm pack --silent "node-linux-$arch@$version" >/dev/null) ||
      ! echo "$sha  $tgz" | sha512sum -c --quiet - >&2 ||
      ! tar -xzf "$tgz" -C "$tmp" package/bin/node package/LICENSE; then
      rm -rf "$tmp"
      echo "could not fetch Node $version from the npm registry (node-linux-$arch@$version, sha512 pinned)" >&2
      return 1
    fi
    # Another run may have finished the same fetch meanwhile: keep whichever landed first.
    mv -T "$tmp/package" "$home" 2>/dev/null || true
    rm -rf "$tmp"
  fi
  if ! "$home/bin/node" -e 'process.exit(process.versions.node === process.argv[1] ? 0 : 1)' "$version"; then
    echo "$home/bin/node does not run on this machine" >&2
    return 1
  fi
  echo "$home"
}

_vime_node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

# Puts the chosen Node first on PATH (exported) and says which one it is.
vime_use_node() {
  local want=${1:-${VIME_NODE:-auto}} version='' home machine root
  root=$(dirname "$(_vime_node_home x x)")
  # Drop a release put on PATH before, so switching between them never stacks up.
  PATH=$(printf %s "$PATH" | tr ':' '\n' | { grep -v "^$root/" || true; } | paste -sd:)
  machine=$(node -v 2>/dev/null || echo none)
  case $want in
    auto) [ "$(_vime_node_major)" -ge "$VIME_NODE_MIN_MAJOR" ] || version=$VIME_NODE_LTS ;;
    system) ;;
    lts) version=$VIME_NODE_LTS ;;
    oldest) version=$VIME_NODE_OLDEST ;;
    *)
      echo "VIME_NODE=$want: expected auto, lts, oldest or system" >&2
      return 2
      ;;
  esac
  if [ -n "$version" ]; then
    home=$(vime_node_fetch "$version") || return 1
    PATH="$home/bin:$PATH"
  elif [ "$(_vime_node_major)" -lt "$VIME_NODE_MIN_MAJOR" ]; then
    echo "VIME_NODE=system: this machine's Node is $machine; Vime needs >= $VIME_NODE_MIN_MAJOR (unset VIME_NODE to fetch $VIME_NODE_LTS)" >&2
    return 1
  fi
  export PATH
  hash -r
  if [ -n "$version" ]; then
    _vime_node_log "Node $(node -v): $(command -v node) (npm package node-linux-$(_vime_node_arch)@$version; the machine's: $machine)"
  else
    _vime_node_log "Node $(node -v): $(command -v node) (the machine's)"
  fi
}
