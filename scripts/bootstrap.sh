#!/usr/bin/env bash
# Idempotent set-up for `make demo` / `make test` on a fresh Debian machine (as root) or any machine that
# already has Python 3.9+, Java and ZooKeeper. Installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${EXTRAS:-test,docs,dev}"
PY="${PYTHON:-python3}"

have_root_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_updated=0
apt_install() {
  if [ $apt_updated = 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# 1. Python with venv
if ! command -v "$PY" >/dev/null 2>&1; then
  if have_root_apt; then apt_install python3 python3-venv python3-pip; else
    echo "error: no python3 found; install Python 3.9+ and re-run" >&2; exit 1; fi
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv 2>/dev/null; then
    rm -rf .venv
    if have_root_apt; then apt_install python3-venv && "$PY" -m venv .venv; else
      echo "error: '$PY -m venv' failed; install the venv module (Debian: apt-get install python3-venv)" >&2; exit 1; fi
  fi
fi

# 2. the package and its extras, re-installed when setup.cfg changes
stamp=".venv/.zkrecipes-$(cat setup.cfg | cksum | cut -d' ' -f1)-${EXTRAS//,/_}"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${EXTRAS}]"
  touch "$stamp"
fi

# 3. ZooKeeper (not needed with an external ensemble in ZK_HOSTS)
if [ -z "${ZK_HOSTS:-}" ] && [ -z "${ZOOKEEPER_HOME:-}" ] && [ -z "${ZOOKEEPER_CLASSPATH:-}" ]; then
  if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null 2>&1; then
    if have_root_apt; then
      echo "installing ZooKeeper (apt-get install zookeeper) ..." >&2
      apt_install zookeeper
    else
      cat >&2 <<'MSG'
error: no ZooKeeper server found, and apt-get is not available (needs root on Debian/Ubuntu).
Either install one and point at it:   export ZOOKEEPER_HOME=/path/to/apache-zookeeper-3.8.x-bin
or run the 3-node ensemble in Docker:  docker compose -f docker/docker-compose.yml up -d
                                       export ZK_HOSTS=127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183
MSG
      exit 1
    fi
  fi
fi

# 4. for the tests: a JDK and Apache Curator (tests/test_interop.py compiles a Curator worker with javac)
if [[ ",$EXTRAS," == *",test,"* ]]; then
  if [ ! -f /usr/share/java/curator-recipes.jar ] || ! command -v javac >/dev/null 2>&1; then
    if have_root_apt; then
      echo "installing Curator and a JDK for the interop tests (apt-get install libcurator-recipes-java default-jdk-headless) ..." >&2
      apt_install libcurator-recipes-java default-jdk-headless
    else
      echo "note: no Curator jars or javac and no root apt-get: the Curator interop tests will be skipped" >&2
    fi
  fi
fi
