#!/usr/bin/env bash
# `make test`'s second interpreter tier: on every other supported Python found under pyenv (3.10-3.13;
# the default interpreter, in .venv, runs the whole suite), the unit tier and a lean cut of the asyncio
# and lock suites -- what differs between Pythons (asyncio.wait_for's inner task before 3.12,
# threading, typing at import). Each gets a venv in .venv-pythons/<version> (made once per setup.cfg).
# Says which Pythons it ran, and which it did not find (under CI=true a missing one fails it, as tests/toolskip.py
# fails a test whose tool is missing).
# `test-pythons.sh prepare` only makes the venvs (make test starts it in the background first, so they are
# ready by the time the tests need them); a run waits for a prepare still making the same venv (flock).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"
PYENV_ROOT="${PYENV_ROOT:-/root/.pyenv}"
SUPPORTED="3.10 3.11 3.12 3.13"   # python_requires and the classifiers name exactly these
default=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
SUBSET=(tests/unit tests/test_aio.py tests/test_locks.py)  # ownership suites: the default interpreter only (make test time)
LEAN="not across_processes and not container_parent_is_reclaimed and not stalled_process and not service_example \
and not hundreds_of_tasks"
ran=() missing=() pids=() outs=()
for minor in $SUPPORTED; do
  [ "$minor" = "$default" ] && continue
  py=$(ls -d "$PYENV_ROOT"/versions/"$minor".*/bin/python 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$py" ]; then missing+=("$minor"); continue; fi
  venv=".venv-pythons/$minor"
  stamp="$venv/.zkrecipes-$(cksum < setup.cfg | cut -d' ' -f1)"
  mkdir -p .venv-pythons
  (
    flock 9  # one maker per venv: a run waits here for a background prepare of the same venv
    if [ ! -f "$stamp" ]; then
      rm -rf "$venv" && "$py" -m venv "$venv"
      "$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v '^WARNING: Location' || true
      "$venv/bin/python" -c 'import zkrecipes, pytest, puresasl' && touch "$stamp"
    fi
  ) 9>".venv-pythons/$minor.lock"
  [ "$mode" = prepare ] && continue
  version=$("$venv/bin/python" -c 'import platform; print(platform.python_version())')
  # the Pythons run side by side (each its own ensemble; mostly waiting on ZooKeeper), reported in order
  ( echo "== Python $version: ${SUBSET[*]} (-k lean cut)"
    "$venv/bin/python" -m pytest -p no:cacheprovider -q "${SUBSET[@]}" -k "$LEAN" ) > "$venv.out" 2>&1 &
  pids+=($!) outs+=("$venv.out")
  ran+=("$version")
done
[ "$mode" = prepare ] && exit 0
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed=1
  cat "${outs[$i]}"
done
[ "$failed" = 0 ] || { echo "error: a Python's cut failed (above)" >&2; exit 1; }
echo "== Pythons: the whole suite on $(.venv/bin/python -c 'import platform; print(platform.python_version())') (.venv);" \
     "unit + asyncio/lock cut on: ${ran[*]:-none}${missing:+; not found: ${missing[*]}}"
# CI (CI=true, as .ci/run sets) has every supported Python under pyenv: one missing is a broken set-up, not a skip
if [ ${#missing[@]} -gt 0 ] && [[ "${CI:-}" =~ ^([Tt][Rr][Uu][Ee]|1|[Yy][Ee][Ss])$ ]]; then
  echo "error: CI=true and Python ${missing[*]} not found under $PYENV_ROOT/versions" >&2
  exit 1
fi
