#!/usr/bin/env bash
# Set-up of `make bench` beyond `make setup`: redis-server for the Redis baseline, where it can be
# installed (root with apt-get). Without it the bench still runs and reports the baseline as absent.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing redis-server (apt-get install redis-server) for the Redis baseline ..." >&2
  apt-get update -qq
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null; then
    echo "warning: could not install redis-server; the bench reports the Redis baseline as absent" >&2
  fi
else
  echo "note: redis-server not found and apt-get unavailable (or not root); the Redis baseline is skipped" >&2
fi
