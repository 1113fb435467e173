#!/usr/bin/env bash
# Installs what Vime needs on a Debian/Ubuntu machine with Node 20, then installs and builds the workspace.
# Usage: source scripts/bootstrap.sh <main|test>
set -euo pipefail
VIME_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$VIME_ROOT"
PNPM_VERSION=12.4.2

log() { printf '\033[2m[vime setup]\033[0m %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

node_ok=$(node -e 'const [a,b]=process.versions.node.split(".").map(Number); console.log(a>20||(a===20&&b>=19)?1:0)' 2>/dev/null || echo 0)
if [ "$node_ok" != 1 ]; then
  echo "Vime needs Node.js >= 20.19 (found: $(node -v 2>/dev/null || echo none)). Install it, then run this again." >&2
  exit 1
fi

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
