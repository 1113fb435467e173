#!/usr/bin/env bash
# What every folder carried to a machine without Node or network needs (sourced by the bundle scripts):
#   vime_bundle_tools OUT CACHE   puts OUT/tools/node.xz (the pinned LTS of scripts/node.sh, sha512-checked,
#                                 xz-packed once into CACHE) and OUT/tools/bwrap (Debian's bubblewrap .deb,
#                                 downloaded once into CACHE, unpacked).
# Needs: npm (for Node, once), apt-get and dpkg (for bubblewrap, once), xz.
vime_bundle_tools() {
  local out=$1 cache=$2 node_home deb
  mkdir -p "$out/tools" "$cache"
  source "$(dirname "${BASH_SOURCE[0]}")/node.sh"
  if [ ! -f "$cache/node-$VIME_NODE_LTS.xz" ]; then
    node_home=$(vime_node_fetch "$VIME_NODE_LTS")
    xz -T0 -9 -c "$node_home/bin/node" >"$cache/node-$VIME_NODE_LTS.xz.tmp"
    mv "$cache/node-$VIME_NODE_LTS.xz.tmp" "$cache/node-$VIME_NODE_LTS.xz"
  fi
  cp "$cache/node-$VIME_NODE_LTS.xz" "$out/tools/node.xz"
  deb=$(ls "$cache"/bubblewrap_*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    (cd "$cache" && apt-get download bubblewrap 2>/dev/null)
    deb=$(ls "$cache"/bubblewrap_*.deb | head -1)
  fi
  dpkg -x "$deb" "$out/tools/bwrap"
  rm -rf "$out/tools/bwrap/usr/share/man" "$out/tools/bwrap/usr/share/bash-completion" "$out/tools/bwrap/usr/share/zsh"
}
