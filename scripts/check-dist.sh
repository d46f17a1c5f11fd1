#!/usr/bin/env bash
# `make dist`'s checks on what `python -m build` made in dist/: the wheel installs into a fresh virtualenv
# and works, both carry the licence, and the sdist's test suite is complete (pytest collects it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
wheel=$(ls dist/zkrecipes-*.whl)
sdist=$(ls dist/zkrecipes-*.tar.gz)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

unzip -l "$wheel" > "$tmp/wheel.txt"  # (listed first: grep -q closing a pipe early fails it under pipefail)
grep -q 'dist-info/licenses/LICENSE' "$tmp/wheel.txt" || { echo "dist: no LICENSE in $wheel" >&2; exit 1; }
tar -tzf "$sdist" > "$tmp/sdist.txt"
for f in LICENSE docs/changelog.rst tests/conftest.py tests/lockhelpers.py tests/unit lab/run.py; do
  grep -q "^zkrecipes-[^/]*/$f" "$tmp/sdist.txt" || { echo "dist: $f missing from $sdist" >&2; exit 1; }
done

"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel[test]"
(cd "$tmp" && venv/bin/python -c 'import zkrecipes, zkrecipes.aio, zkrecipes.testing; print("import ok", zkrecipes.__version__)')
"$tmp/venv/bin/zkrecipes" --version
"$tmp/venv/bin/python" -m pip show -v zkrecipes | sed '/^Files:/,$d'

tar -xzf "$sdist" -C "$tmp"
(cd "$tmp"/zkrecipes-*/ && "$tmp/venv/bin/python" -m pytest -p no:cacheprovider -q --collect-only tests | tail -1)
echo "dist: ok ($wheel, $sdist)"
