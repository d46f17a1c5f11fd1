# README's commands: `make demo` (the main job) and `make test` (the whole default suite).
# Both do their own set-up (venv in .venv, pip install -e .[test,docs,dev], apt-get install zookeeper).
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo unit test test-docker test-servers lint docs bench safety dist clean

setup:
	@bash scripts/bootstrap.sh

demo: setup
	$(PY) -m zkrecipes.cli demo

# the ZooKeeper-free tests (rules, names, gate, protocol driven by scripted replies): seconds
unit: setup
	$(PY) -m pytest -p no:cacheprovider -q tests/unit

# the kazoo seam is also tested on the oldest kazoo that setup.cfg allows
KAZOO_OLDEST := 2.9.0
OLDEST_KAZOO_DIR := .venv/kazoo-$(KAZOO_OLDEST)

$(OLDEST_KAZOO_DIR):
	rm -rf $@.tmp && $(PY) -m pip install -q --disable-pip-version-check --target $@.tmp kazoo==$(KAZOO_OLDEST) six
	mv $@.tmp $@

# the main pytest runs in TEST_JOBS processes (pytest-xdist, one file per process at a time, each process its
# own ensemble; most tests wait on ZooKeeper, not a CPU): TEST_JOBS=1 for one process
TEST_JOBS ?= 2
XDIST_ARGS := $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile)

test: setup $(OLDEST_KAZOO_DIR)
	@mkdir -p .venv-pythons && bash scripts/test-pythons.sh prepare >.venv-pythons/prepare.log 2>&1 &  # the other Pythons' venvs, made meanwhile
	$(PY) -m ruff check zkrecipes tests bench lab
	$(PY) -m mypy --strict zkrecipes  # the whole installed package (the lab lives outside it, in lab/)
	$(PY) -m mypy --strict tests/typing_check.py  # a misspelt constructor keyword is a type error (both fronts)
	$(PY) -m pytest -p no:cacheprovider -q tests/unit
	ZKRECIPES_EXPECT_KAZOO=$(KAZOO_OLDEST) PYTHONPATH=$(OLDEST_KAZOO_DIR) \
		$(PY) -m pytest -p no:cacheprovider -q tests/test_kazoo_seam.py
	$(PY) -m pytest -p no:cacheprovider $(XDIST_ARGS) $(PYTEST_ARGS) --ignore=tests/unit tests
	@bash scripts/test-pythons.sh  # unit tier + asyncio/lock cut on every other Python 3.10-3.13 found (pyenv)
	$(MAKE) --no-print-directory docs

# the suite against docker/docker-compose.yml's 3 containers (installs Docker, starts and stops its own engine)
test-docker: setup
	@bash scripts/test-docker.sh

# the lock, election, asyncio, session-loss and doubt-clock suites against Debian 12's ZooKeeper 3.8.0 and then
# Debian 13's 3.9 (its jars fetched once into .venv/zookeeper-3.9, beside 3.8.0), and a table of both results
test-servers: setup
	@bash scripts/test-servers.sh

docs: setup
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

bench: export EXTRAS = test,docs,dev,bench
bench: setup
	@bash bench/setup.sh
	$(PY) bench/run.py
	$(PY) bench/per_key.py
	$(PY) bench/aio.py
	$(PY) bench/contention.py
	$(PY) bench/service.py
	$(PY) bench/recovery.py
	$(PY) bench/cpu.py

safety: setup
	@bash scripts/safety-setup.sh
	$(PY) -m lab.run --long --out docs/safety-results

# the sdist and wheel, checked: twine, a fresh virtualenv that installs the wheel, the sdist's tests collected
dist: setup
	rm -rf dist build
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*
	@bash scripts/check-dist.sh

clean:
	rm -rf .venv docs/_build build dist *.egg-info
