#!/usr/bin/env bash
# Installs what Vime needs on a Debian/Ubuntu machine, then installs and builds the workspace. A machine whose
# Node is older than 22 gets the current LTS from the npm registry in .node/ (scripts/node.sh; VIME_NODE picks).
# Usage: source scripts/bootstrap.sh <main|test>
set -euo pipefail
VIME_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$VIME_ROOT"
PNPM_VERSION=12.4.2

log() { printf '\033[2m[vime setup]\033[0m %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Node >= 22: the machine's, or the pinned LTS fetched from the npm registry into .node/ (scripts/node.sh).
source "$VIME_ROOT/scripts/node.sh"
vime_use_node

if ! command -v pnpm >/dev/null || [ "$(pnpm -v 2>/dev/null)" != "$PNPM_VERSION" ]; then
  log "installing pnpm $PNPM_VERSION"
  npm install -g "pnpm@$PNPM_VERSION" >/dev/null 2>&1 || as_root npm install -g "pnpm@$PNPM_VERSION" >/dev/null
fi

# System packages: command or file that proves presence -> Debian package.
want=(bwrap:bubblewrap git:git /usr/bin/python3:python3 /usr/lib/python3/dist-packages/pytest:python3-pytest /usr/lib/python3/dist-packages/msgpack:python3-msgpack patch:patch)
if [ "${1:-main}" = test ]; then
  want+=(/usr/lib/python3/dist-packages/numpy:python3-numpy /usr/lib/python3/dist-packages/yaml:python3-yaml
    /usr/lib/python3/dist-packages/jinja2:python3-jinja2
    /usr/lib/python3/dist-packages/torch:python3-torch chromium:chromium curl:curl
    /usr/lib/python3/dist-packages/google/protobuf:python3-protobuf)
  # The registry a test pushes its images to and pulls them from, and skopeo for an OCI archive of one.
  [ "$(id -u)" -eq 0 ] && want+=(dockerd:docker.io /usr/bin/docker-registry:docker-registry skopeo:skopeo)
fi
missing=()
for item in "${want[@]}"; do
  probe=${item%%:*} pkg=${item#*:}
  if [[ $probe == /* ]]; then [ -e "$probe" ] || missing+=("$pkg"); else command -v "$probe" >/dev/null || missing+=("$pkg"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Wait (bounded) for another apt or dpkg that holds the lock instead of failing at once.
  apt_wait=(-o DPkg::Lock::Timeout=600)
  as_root apt-get "${apt_wait[@]}" update -qq >/dev/null
  as_root apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

log "installing workspace dependencies"
CI=true pnpm install --frozen-lockfile >/dev/null
log "building packages"
pnpm run build >/dev/null
# Lets a caller that already ran this (.ci/run) skip a second install and build in scripts/test.sh.
export VIME_BOOTSTRAPPED="${1:-main}"
