#!/usr/bin/env bash
# A private Docker engine for the sandbox tests, with no registry and no network setup.
# Usage (as root, Debian's docker.io installed by scripts/bootstrap.sh): source scripts/docker-up.sh
#
# Reuses an engine that already answers on $VIME_DOCKER_DIR/docker.sock; otherwise starts dockerd with a
# private data root and socket, no bridge and no iptables, and stops it on exit. Imports the image
# vime/sandbox-base:latest: a few empty folders plus /etc/passwd, labelled dev.vime.host-usr=true so that
# dockerProvider() bind-mounts the host's /usr read-only (python3, pytest and git come from the host).
# Exports DOCKER_HOST.

VIME_DOCKER_DIR=${VIME_DOCKER_DIR:-${TMPDIR:-/tmp}/vime-docker}
VIME_DOCKER_IMAGE=${VIME_DOCKER_IMAGE:-vime/sandbox-base:latest}
export DOCKER_HOST="unix://$VIME_DOCKER_DIR/docker.sock"

_vime_docker_log() { printf '\033[2m[vime docker]\033[0m %s\n' "$*" >&2; }

_vime_docker_ping() {
  [ -S "$VIME_DOCKER_DIR/docker.sock" ] && timeout 5 docker version >/dev/null 2>&1
}

_vime_docker_down() {
  local pid
  pid=$(cat "$VIME_DOCKER_DIR/dockerd.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    # Containers left by a failed test would keep mounts busy: remove ours first.
    local ids
    ids=$(docker ps -aq --filter label=vime.run 2>/dev/null || true)
    [ -n "$ids" ] && docker rm -f $ids >/dev/null 2>&1 || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # What dockerd leaves behind even after a clean stop.
  rm -rf "$VIME_DOCKER_DIR/exec" "$VIME_DOCKER_DIR/docker.sock" "$VIME_DOCKER_DIR/dockerd.pid" /etc/docker/key.json
  for cg in /sys/fs/cgroup/*/docker; do [ -d "$cg" ] && rmdir "$cg" 2>/dev/null; done
  return 0
}

_vime_docker_up() {
  if ! command -v dockerd >/dev/null; then
    echo "docker-up: dockerd not found; install Debian's docker.io (scripts/bootstrap.sh test does, as root)" >&2
    return 1
  fi
  mkdir -p "$VIME_DOCKER_DIR"
  if _vime_docker_ping; then
    _vime_docker_log "reusing the engine at $DOCKER_HOST"
  else
    _vime_docker_log "starting dockerd ($VIME_DOCKER_DIR)"
    rm -f "$VIME_DOCKER_DIR/docker.sock" "$VIME_DOCKER_DIR/dockerd.pid"
    dockerd --iptables=false --ip6tables=false --bridge=none --ip-forward=false --ip-masq=false \
      --storage-driver=overlay2 --data-root="$VIME_DOCKER_DIR/data" --exec-root="$VIME_DOCKER_DIR/exec" \
      --pidfile="$VIME_DOCKER_DIR/dockerd.pid" -H "$DOCKER_HOST" >"$VIME_DOCKER_DIR/dockerd.log" 2>&1 &
    for _ in $(seq 300); do _vime_docker_ping && break; sleep 0.1; done
    if ! _vime_docker_ping; then
      echo "docker-up: dockerd did not answer within 30 s; last log lines:" >&2
      tail -n 20 "$VIME_DOCKER_DIR/dockerd.log" >&2
      _vime_docker_down
      return 1
    fi
    trap _vime_docker_down EXIT
  fi

  if ! docker image inspect "$VIME_DOCKER_IMAGE" >/dev/null 2>&1; then
    _vime_docker_log "importing $VIME_DOCKER_IMAGE (host-/usr image, no registry)"
    local tree
    tree=$(mktemp -d)
    mkdir -p "$tree"/{usr,etc,proc,sys,dev,tmp,root,sbin,home/sandbox,var/tmp}
    chmod 1777 "$tree/tmp" "$tree/var/tmp"
    # Real /sbin: docker-init is bind-mounted at /sbin/docker-init, which must not resolve into /usr.
    for link in bin lib lib32 lib64 libx32; do
      [ -L "/$link" ] && ln -s "$(readlink "/$link")" "$tree/$link"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n' >"$tree/etc/passwd"
    printf 'root:x:0:\nsandbox:x:1000:\n' >"$tree/etc/group"
    chown 1000:1000 "$tree/home/sandbox"
    tar -C "$tree" --numeric-owner -cf "$tree.tar" .
    docker import --change 'LABEL dev.vime.host-usr=true' "$tree.tar" "$VIME_DOCKER_IMAGE" >/dev/null
    rm -rf "$tree" "$tree.tar"
  fi
}

_vime_docker_up
