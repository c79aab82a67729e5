# The two commands of the README: `make demo` (the main job on built-in synthetic data) and `make test`.
# `make test` is what CI runs: every test, the slow ones included. `make test-fast` leaves out the tests
# marked slow (soaks, whole-benchmark runs, fault tests that wait on purpose) for a quick check while
# working; `make mutants` runs the hand-written mutants of scripts/mutants.py (minutes; on demand).
# `make docs` builds the documentation site into site/ (mkdocs, offline, warnings are errors; the test
# extra includes the docs tools, and tests/docs/test_docs.py builds it too).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test test-fast mutants bench docs clean
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/bootstrap.sh
	scripts/bootstrap.sh $(VENV)
	touch $@

demo: install
	$(PY) -m dali_backend demo --out out/demo

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow"

mutants: install
	$(PY) scripts/mutants.py

bench: install
	$(PY) -m bench

docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) out .pytest_cache site
