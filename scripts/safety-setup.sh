#!/usr/bin/env bash
# Set-up step of `make safety`: the Redis baseline needs redis-server (the redis client comes with the
# test extra). Installed with apt when running as root on Debian/Ubuntu; otherwise the Redis trial is
# skipped and the results say so.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    && apt-cache policy redis-server 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  echo "installing redis-server (apt-get install redis-server) for the Redis baseline ..." >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
else
  echo "note: redis-server is not installed; the Redis baseline will be skipped" >&2
fi
