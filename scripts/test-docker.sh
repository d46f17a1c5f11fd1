#!/usr/bin/env bash
# `make test-docker`: the test suite against the 3-server ZooKeeper ensemble of docker/docker-compose.yml.
#
#  1. installs docker.io and a compose tool when missing (root, apt), starting no system service;
#  2. uses the Docker engine that answers, or starts a private dockerd (its own socket, data-root,
#     exec-root and pidfile) and stops it at the end;
#  3. uses $ZK_IMAGE, else the official zookeeper image if it can be had, else builds docker/Dockerfile
#     (Debian's zookeeper package) FROM a Debian image that is pulled, or made with debootstrap from this
#     machine's apt mirror and `docker import`ed (the tarball is cached in $ZK_DOCKER_CACHE);
#  4. brings the ensemble up, waits for every health check, runs the suite with ZK_HOSTS and
#     ZK_DOCKER_CONTAINERS (so the kit can stop, kill and pause servers through Docker);
#  5. takes everything down (compose down -v), pass or fail, and says what it left: images only.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
COMPOSE_FILE=docker/docker-compose.yml
PROJECT="${ZK_COMPOSE_PROJECT:-zkrecipes-test}"
OFFICIAL_IMAGE=zookeeper:3.9.4                     # the compose file's default
LOCAL_IMAGE=zkrecipes/zookeeper:debian             # docker/Dockerfile
SUITE="${ZK_DEBIAN_SUITE:-bookworm}"
BASE_IMAGE="${ZK_BASE_IMAGE:-debian:${SUITE}-slim}"
BOOTSTRAP_IMAGE="zkrecipes/debian:${SUITE}"        # made by debootstrap when no Debian image can be pulled
CACHE="${ZK_DOCKER_CACHE:-/var/cache/zkrecipes}"
RUN_DIR="${ZK_DOCKERD_RUN:-/run/zkrecipes-docker}"          # private dockerd: socket, pidfile, exec-root
DATA_ROOT="${ZK_DOCKERD_DATA:-/var/lib/zkrecipes-docker}"   # its images stay here between runs
ZK_HOSTS_DOCKER=127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183
SERVICES=(zk1 zk2 zk3)                             # in the order of ZK_HOSTS_DOCKER
SERVER_LOG="${TMPDIR:-/tmp}/zkrecipes-test-docker-servers.log"   # written when the run fails

say() { echo "test-docker: $*" >&2; }
die() { say "error: $*"; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }

# -- 1. tools ---------------------------------------------------------------------------------------------
# What we install starts no service: docker.io's postinst would start a system dockerd (and containerd)
# that outlives the run. Debian's policy layer (invoke-rc.d, deb-systemd-invoke) asks policy-rc.d; we
# write one that refuses (exit 101) when the machine has none, and remove it after each install.
POLICY_RC=/usr/sbin/policy-rc.d
POLICY_MARK="written by zkrecipes scripts/test-docker.sh during apt-get install"
drop_policy() {  # by its mark, not a variable: debootstrap's install runs in a $(...) subshell
  if grep -qsF "$POLICY_MARK" "$POLICY_RC"; then rm -f "$POLICY_RC"; fi
}
trap drop_policy EXIT   # replaced by cleanup (which calls it too) once the engine is up
apt_updated=0
apt_install() {
  is_root && command -v apt-get >/dev/null 2>&1 || die "need $* and cannot install it (not root, or no apt-get)"
  if [ $apt_updated = 0 ]; then apt-get -o DPkg::Lock::Timeout=300 update -qq >&2; apt_updated=1; fi
  say "apt-get install $* (starting no service)"
  if [ ! -e "$POLICY_RC" ]; then
    printf '#!/bin/sh\n# %s\nexit 101\n' "$POLICY_MARK" >"$POLICY_RC"
    chmod 755 "$POLICY_RC"
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 \
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq "$@" >/dev/null || rc=$?
  drop_policy
  return $rc
}
apt_candidate() {  # prints the candidate version of a package, nothing when apt has none
  apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)" {print $2}'
}

if ! command -v docker >/dev/null 2>&1 || { ! command -v dockerd >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; }; then
  apt_install docker.io
fi
COMPOSE=()
if docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  COMPOSE=(docker-compose)
else
  [ $apt_updated = 1 ] || { apt-get -o DPkg::Lock::Timeout=300 update -qq >&2; apt_updated=1; }
  if [ -n "$(apt_candidate docker-compose-plugin)" ]; then apt_install docker-compose-plugin; COMPOSE=(docker compose)
  elif [ -n "$(apt_candidate docker-compose)" ]; then apt_install docker-compose; COMPOSE=(docker-compose)
  else die "no compose tool: apt has neither docker-compose-plugin nor docker-compose"; fi
fi
compose() { "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" "$@"; }
say "compose tool: ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null || echo '?'))"

# -- 2. a Docker engine -----------------------------------------------------------------------------------
started_dockerd=0
dockerd_pid=""
stop_dockerd() {
  [ $started_dockerd = 1 ] || return 0
  say "stopping the private dockerd (pid $dockerd_pid)"
  kill -TERM "$dockerd_pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$dockerd_pid" 2>/dev/null; then say "dockerd did not stop in 30 s: SIGKILL"; kill -KILL "$dockerd_pid" || true; fi
  started_dockerd=0
  # dockerd leaves its network namespace files mounted under the exec-root
  awk -v d="$RUN_DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l
  rm -rf "$RUN_DIR"
}
start_dockerd() {  # $1: storage driver; returns non-zero when the daemon does not answer
  mkdir -p "$RUN_DIR" "$DATA_ROOT"
  export DOCKER_HOST="unix://$RUN_DIR/docker.sock"
  # No default bridge (compose makes its own network), published ports on 127.0.0.1 by default, and the
  # host's firewall and forwarding left alone: the servers talk on their bridge, tests reach them through
  # the published loopback ports, and nothing in a container needs to reach out.
  dockerd --host "$DOCKER_HOST" --data-root "$DATA_ROOT" --exec-root "$RUN_DIR/exec" \
    --pidfile "$RUN_DIR/dockerd.pid" --storage-driver "$1" --bridge none --ip 127.0.0.1 \
    --iptables=false --ip-forward=false >"$RUN_DIR/dockerd.log" 2>&1 &
  dockerd_pid=$!
  started_dockerd=1
  for _ in $(seq 1 150); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.2
  done
  say "dockerd ($1) did not answer; its log ends:"; tail -n 15 "$RUN_DIR/dockerd.log" >&2 || true
  local log; log=$(cat "$RUN_DIR/dockerd.log" 2>/dev/null || true)
  stop_dockerd
  mkdir -p "$RUN_DIR"; printf '%s\n' "$log" >"$RUN_DIR/dockerd-$1.log"
  return 1
}

project_left() {  # containers, networks and volumes of our compose project still present
  local label="label=com.docker.compose.project=$PROJECT"
  { docker ps -aq --filter "$label"; docker network ls -q --filter "$label"; docker volume ls -q --filter "$label"; } 2>/dev/null
}
brought_up=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ $brought_up = 1 ]; then
    if [ $rc != 0 ]; then  # the servers' side of a failure, kept past down -v
      compose logs --no-color --timestamps >"$SERVER_LOG" 2>&1 || true
      say "server logs: $SERVER_LOG"
    fi
    say "taking the ensemble down (down -v)"
    compose down -v --remove-orphans >/dev/null 2>&1 || compose down -v --remove-orphans || true
    if [ -n "$(project_left)" ]; then say "error: left behind by down -v: $(project_left | tr '\n' ' ')"; rc=1; fi
  fi
  stop_dockerd
  drop_policy
  if [ $rc = 0 ]; then say "done: nothing of ours is running (images stay cached)"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if docker info >/dev/null 2>&1; then
  say "using the Docker engine at ${DOCKER_HOST:-the default socket}"
elif [ -S "$RUN_DIR/docker.sock" ] && kill -0 "$(cat "$RUN_DIR/dockerd.pid" 2>/dev/null || echo 0)" 2>/dev/null \
     && DOCKER_HOST="unix://$RUN_DIR/docker.sock" docker info >/dev/null 2>&1; then
  export DOCKER_HOST="unix://$RUN_DIR/docker.sock"   # ours, left by a run that was killed: reuse, then stop
  dockerd_pid=$(cat "$RUN_DIR/dockerd.pid"); started_dockerd=1
  say "reusing the private dockerd a killed run left (pid $dockerd_pid)"
else
  is_root || die "no Docker engine answers, and starting one needs root"
  say "no Docker engine answers: starting a private dockerd on $RUN_DIR/docker.sock"
  if ! start_dockerd overlay2; then
    say "overlay2 failed; trying the vfs storage driver (slow, uses more disk)"
    start_dockerd vfs || die "dockerd does not start; logs in $RUN_DIR"
  fi
fi

# -- 3. the image -----------------------------------------------------------------------------------------
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
try_pull() { say "pulling $1 ..."; timeout 120 docker pull -q "$1" >/dev/null 2>&1; }

apt_mirror() {  # the Debian mirror this machine's apt uses for $SUITE
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v s="$SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                                     if ($(i+1) == s) { print $i; exit } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$SUITE" 'BEGIN { RS = ""; FS = "\n" }
      { uri = ""; ok = 0; deb = 0
        for (k = 1; k <= NF; k++) {
          if ($k ~ /^URIs:/) { split($k, a, /[ \t]+/); uri = a[2] }
          if ($k ~ /^Types:/ && $k ~ /[ \t]deb([ \t]|$)/) deb = 1
          if ($k ~ /^Suites:/) { n = split($k, b, /[ \t]+/); for (j = 2; j <= n; j++) if (b[j] == s) ok = 1 }
        }
        if (uri != "" && ok && deb) { print uri; exit } }' "$f"
  done
}

debian_base() {  # prints a Debian image to build FROM, making one with debootstrap if need be
  if have_image "$BASE_IMAGE"; then echo "$BASE_IMAGE"; return; fi
  if have_image "$BOOTSTRAP_IMAGE"; then echo "$BOOTSTRAP_IMAGE"; return; fi
  if try_pull "$BASE_IMAGE"; then echo "$BASE_IMAGE"; return; fi
  local tarball="$CACHE/debian-$SUITE-minbase.tar"
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
    local mirror; mirror="${ZK_DEBIAN_MIRROR:-$(apt_mirror | head -n 1)}"
    [ -n "$mirror" ] || die "no Debian mirror for '$SUITE' in /etc/apt/sources.list*; set ZK_DEBIAN_MIRROR"
    say "no Debian image can be pulled: debootstrap $SUITE from $mirror (cached in $tarball)"
    local root; root=$(mktemp -d /var/tmp/zkrecipes-debootstrap.XXXXXX)
    if ! debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >"$root.log" 2>&1; then
      tail -n 20 "$root.log" >&2; rm -rf "$root" "$root.log"; die "debootstrap failed"
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    mkdir -p "$CACHE"
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root" "$root.log"
  fi
  say "docker import $tarball as $BOOTSTRAP_IMAGE"
  docker import "$tarball" "$BOOTSTRAP_IMAGE" >/dev/null
  echo "$BOOTSTRAP_IMAGE"
}

if [ -n "${ZK_IMAGE:-}" ] && [ "$ZK_IMAGE" != "$LOCAL_IMAGE" ]; then
  have_image "$ZK_IMAGE" || try_pull "$ZK_IMAGE" || die "ZK_IMAGE=$ZK_IMAGE cannot be pulled"
elif [ -z "${ZK_IMAGE:-}" ] && { have_image "$OFFICIAL_IMAGE" || try_pull "$OFFICIAL_IMAGE"; }; then
  ZK_IMAGE=$OFFICIAL_IMAGE
else
  say "building $LOCAL_IMAGE from docker/Dockerfile (Debian's zookeeper package)"
  base=$(debian_base)
  # the machine's own apt settings for its mirror (a snapshot mirror's Release files may be past Valid-Until)
  apt_options=$(apt-config dump 2>/dev/null | awk '/^Acquire::Check-(Valid-Until|Date) / {
      gsub(/[";]/, "", $2); printf "-o %s=%s ", $1, $2 }')
  docker build -q --network host --build-arg "BASE_IMAGE=$base" --build-arg "APT_OPTIONS=$apt_options" \
    -t "$LOCAL_IMAGE" docker/ >/dev/null
  ZK_IMAGE=$LOCAL_IMAGE
fi
export ZK_IMAGE
say "image: $ZK_IMAGE"

# -- 4. the ensemble and the suite ------------------------------------------------------------------------
compose down -v --remove-orphans >/dev/null 2>&1 || true   # what a killed earlier run may have left
brought_up=1
up_at=$SECONDS
compose up -d
deadline=$((SECONDS + 180))
containers=()
for svc in "${SERVICES[@]}"; do
  id=$(compose ps -q "$svc")
  [ -n "$id" ] || die "compose started no container for $svc"
  containers+=("$(docker inspect -f '{{.Name}}' "$id" | sed 's|^/||')")
done
for c in "${containers[@]}"; do
  until [ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$c")" = healthy ]; do
    if [ $SECONDS -gt $deadline ]; then compose logs --tail 30 >&2 || true; die "$c not healthy within 180 s"; fi
    sleep 1
  done
done
say "healthy: ${containers[*]} ($((SECONDS - up_at)) s after up, $SECONDS s after start)"

export ZK_HOSTS=$ZK_HOSTS_DOCKER
ZK_DOCKER_CONTAINERS=$(IFS=,; echo "${containers[*]}")
export ZK_DOCKER_CONTAINERS
say "ZK_HOSTS=$ZK_HOSTS ZK_DOCKER_CONTAINERS=$ZK_DOCKER_CONTAINERS"
# shellcheck disable=SC2086  # PYTEST_ARGS holds several arguments
# only the tests that reach these containers: those that start servers of their own ran in make test
ZKRECIPES_ENSEMBLE_TESTS_ONLY=1 "$PY" -m pytest -p no:cacheprovider -rs ${PYTEST_ARGS:-} --ignore=tests/unit ${TESTS:-tests}
