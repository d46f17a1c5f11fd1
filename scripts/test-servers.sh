#!/usr/bin/env bash
# `make test-servers`: the suites whose outcome the server decides, run twice -- against Debian 12's
# ZooKeeper 3.8.0 (the installed package, which has ZOOKEEPER-4537) and against Debian 13's 3.9 -- then
# one table of both results (passed/failed/skipped per suite). Not part of `make test`.
#
#  1. once: downloads trixie's libzookeeper-java and the packages its Depends names (junit4 aside, which
#     only its integration-test jar uses) with apt-get, through a private apt state under $ZK39_HOME.tmp
#     (no system sources, no install), and unpacks them (dpkg-deb -x). lib/ gets zookeeper.jar and the jars
#     its manifest's Class-Path names, followed transitively, each with that Class-Path removed: Debian's
#     manifests name /usr/share/java/*.jar, which here are bookworm's 3.8 jars, so the classpath is exactly
#     lib/*.jar. Installed 3.8.0 is left alone. A finished $ZK39_HOME (VERSION present) is reused.
#  2. runs pytest on $SUITES with the kit's default install (Debian's 3.8.0), then with ZOOKEEPER_HOME=$ZK39_HOME
#     (ZK_HOSTS, ZOOKEEPER_CLASSPATH unset for both), each after a one-server probe that prints the version
#     that install actually serves (four-letter word srvr);
#  3. prints both results; exits non-zero if either run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
ZK39_HOME=$(realpath -ms "${ZK39_HOME:-.venv/zookeeper-3.9}")
ZK39_SUITE="${ZK39_SUITE:-trixie}"
ZK39_MIRROR="${ZK39_MIRROR:-http://deb.debian.org/debian}"
read -r -a SUITES <<< "${SERVERS_TESTS:-tests/test_locks.py tests/test_election.py tests/test_aio.py tests/test_session_loss.py tests/test_doubt_clock.py tests/test_once_per.py}"

say() { echo "test-servers: $*" >&2; }
die() { say "error: $*"; exit 1; }

# -- 1. Debian 13's ZooKeeper, beside the installed one ------------------------------------------------------
fetch_zk39() {
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "needs apt-get and dpkg-deb (Debian/Ubuntu)"
  local tmp="$ZK39_HOME.tmp" keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -r "$keyring" ] || die "no $keyring (apt-get install debian-archive-keyring)"
  rm -rf "$tmp" && mkdir -p "$tmp"/apt/{state/lists/partial,cache/archives/partial,preferences.d} "$tmp/debs" "$tmp/root"
  echo "deb [signed-by=$keyring] $ZK39_MIRROR $ZK39_SUITE main" > "$tmp/apt/sources.list"
  : > "$tmp/apt/state/status"
  local apt=(-q -o Dir::Etc::sourcelist="$tmp/apt/sources.list" -o Dir::Etc::sourceparts=-
             -o Dir::Etc::preferences="$tmp/apt/preferences" -o Dir::Etc::preferencesparts="$tmp/apt/preferences.d" -o Dir::State="$tmp/apt/state"
             -o Dir::State::status="$tmp/apt/state/status" -o Dir::Cache="$tmp/apt/cache"
             -o APT::Sandbox::User="$(id -un)")
  say "apt-get update ($ZK39_SUITE, private state in $tmp/apt)"
  apt-get "${apt[@]}" update >/dev/null
  local deps
  deps=$(apt-cache "${apt[@]}" show libzookeeper-java | sed -n 's/^Depends: //p' | head -1 \
         | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/[[:space:]]//g' | grep -vx 'junit4')
  say "apt-get download libzookeeper-java $(echo $deps)"
  (cd "$tmp/debs" && apt-get "${apt[@]}" download libzookeeper-java $deps >/dev/null)
  for deb in "$tmp"/debs/*.deb; do
    dpkg-deb -x "$deb" "$tmp/root"
    dpkg-deb -f "$deb" Package Version | paste -sd' ' >> "$tmp/PACKAGES"
  done
  mkdir -p "$tmp/lib"
  "$PY" - "$tmp/root/usr/share/java" "$tmp/lib" <<'EOF'
import os, re, sys, zipfile
src, lib = sys.argv[1:]
def real(name):  # a symlink in the unpacked tree, absolute ones taken inside it
    path = os.path.join(src, name)
    while os.path.islink(path):
        target = os.readlink(path)
        path = os.path.join(src, os.path.basename(target)) if os.path.isabs(target) else \
            os.path.join(os.path.dirname(path), target)
    return path if os.path.isfile(path) else None
todo, seen, missing = ["zookeeper.jar"], set(), []
while todo:
    name = todo.pop()
    if name in seen:
        continue
    seen.add(name)
    path = real(name)
    if path is None:
        missing.append(name)
        continue
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(os.path.join(lib, name), "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "META-INF/MANIFEST.MF":  # drop Class-Path and its continuation lines
                kept, cp, in_cp = [], b"", False
                for line in data.splitlines(keepends=True):
                    if line.startswith(b"Class-Path: "):
                        cp, in_cp = line[12:].rstrip(b"\r\n"), True
                    elif in_cp and line.startswith(b" "):
                        cp += line[1:].rstrip(b"\r\n")
                    else:
                        in_cp = False
                        kept.append(line)
                todo += [os.path.basename(entry) for entry in cp.decode().split()]
                data = b"".join(kept)
            zout.writestr(item, data)
print(f"test-servers: lib/: {len(seen) - len(missing)} jars; named by a manifest but not in these packages "
      f"(so not loaded): {', '.join(sorted(missing)) or 'none'}", file=sys.stderr)
EOF
  dpkg-deb -f "$tmp"/debs/libzookeeper-java_*.deb Version > "$tmp/VERSION"
  rm -rf "$tmp/apt" "$tmp/debs" "$tmp/root"
  rm -rf "$ZK39_HOME" && mv "$tmp" "$ZK39_HOME"
  say "Debian $ZK39_SUITE's ZooKeeper $(cat "$ZK39_HOME/VERSION") in $ZK39_HOME ($(ls "$ZK39_HOME/lib" | wc -l) jars)"
}
[ -f "$ZK39_HOME/VERSION" ] || fetch_zk39

# -- 2. both runs ---------------------------------------------------------------------------------------------
out=$(mktemp -d "${TMPDIR:-/tmp}/zkrecipes-test-servers.XXXXXX")
trap 'rm -rf "$out"' EXIT
PROBE='
from zkrecipes.testing.ensemble import Ensemble, four_letter
with Ensemble(size=1) as ens:
    srvr = four_letter(ens.client_ports[0], "srvr")
print(next((line.split(":", 1)[1].split("-")[0].strip() for line in srvr.splitlines()
            if line.startswith("Zookeeper version:")), "unknown"))'
run() {  # run LABEL [VAR=VALUE...]: probe, then pytest, with ZK_HOSTS/ZOOKEEPER_* cleared and the given settings
  local label=$1; shift
  local env_=(env -u ZK_HOSTS -u ZK_DOCKER_CONTAINERS -u ZOOKEEPER_HOME -u ZOOKEEPER_CLASSPATH "$@")
  local version
  version=$("${env_[@]}" "$PY" -c "$PROBE") || version="unknown (the probe failed)"
  echo "$label $version" >> "$out/versions"
  say "== ZooKeeper $version ($label): ${SUITES[*]}"
  local t0=$SECONDS rc=0
  "${env_[@]}" "$PY" -m pytest -p no:cacheprovider -q --junitxml="$out/$label.xml" "${SUITES[@]}" || rc=$?
  echo "$label $rc $((SECONDS - t0))" >> "$out/runs"
}
run debian12
run debian13 ZOOKEEPER_HOME="$ZK39_HOME"

# -- 3. both results --------------------------------------------------------------------------------------------
"$PY" - "$out" <<'EOF'
import collections, os, sys, xml.etree.ElementTree as ET
out = sys.argv[1]
versions = dict(line.split(" ", 1) for line in open(os.path.join(out, "versions")).read().splitlines())
runs = {lab: (int(rc), int(sec)) for lab, rc, sec in (l.split() for l in open(os.path.join(out, "runs")))}
counts = {}
for label in runs:
    c = counts[label] = collections.defaultdict(collections.Counter)
    path = os.path.join(out, label + ".xml")
    if not os.path.exists(path):
        continue
    for case in ET.parse(path).iter("testcase"):
        module = [p for p in case.get("classname", "").split(".") if p.startswith("test_")][:1]
        suite = f"tests/{module[0]}.py" if module else case.get("classname", "?")
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        c[suite][outcome] += 1
suites = sorted({s for c in counts.values() for s in c})
heads = [f"ZooKeeper {versions[lab]} ({lab})" for lab in runs]
width = max(len(s) for s in suites + ["suite"])
cell = lambda n: f"{n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped"
print("\n" + "suite".ljust(width) + "  " + "  ".join(h.ljust(40) for h in heads))
for s in suites + ["total"]:
    row = [sum((counts[lab][x] for x in suites), collections.Counter()) if s == "total" else counts[lab][s]
           for lab in runs]
    print(s.ljust(width) + "  " + "  ".join(cell(n).ljust(40) for n in row))
print("pytest exit codes and wall time: " + ", ".join(f"{lab} {rc} ({sec} s)" for lab, (rc, sec) in runs.items()))
EOF
awk '$2 != 0 { bad = 1 } END { exit bad }' "$out/runs"
