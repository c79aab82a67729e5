# The two commands of the README: `make demo` (the main job on built-in synthetic data) and `make test`.
# `make demo` installs the package and its own dependencies only (`make install`: what the demo runs on);
# `make test` adds the test extra (`make install-test`: pytest, Lightning, Accelerate, Ray, moto's server,
# the docs tools, TensorBoard), into the same .venv. `make test` is what CI runs: every test, the slow
# ones included. `make test-fast` leaves out the tests marked slow (soaks, whole-benchmark runs, fault tests
# that wait on purpose) for a quick check while working; `make mutants` runs the hand-written mutants of
# scripts/mutants.py (minutes; on demand). `make docs` builds the documentation site into site/ (mkdocs,
# offline, warnings are errors; the test extra includes the docs tools, and tests/docs/test_docs.py builds it too).
# WITH_TORCHVISION=1 make ... also installs the torchvision built for the env's torch (scripts/bootstrap.sh).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install install-test demo test test-fast mutants bench docs clean
install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

$(VENV)/.installed: pyproject.toml scripts/bootstrap.sh
	scripts/bootstrap.sh $(VENV) ""
	touch $@

$(VENV)/.installed-test: pyproject.toml scripts/bootstrap.sh
	scripts/bootstrap.sh $(VENV) test
	touch $(VENV)/.installed $@

demo: install
	$(PY) -m dali_backend demo --out out/demo

test: install-test
	$(PY) -m pytest -q

test-fast: install-test
	$(PY) -m pytest -q -m "not slow"

mutants: install-test
	$(PY) scripts/mutants.py

bench: install-test
	$(PY) -m bench

docs: install-test
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) out .pytest_cache site
