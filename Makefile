# The two commands of the README: `make demo` (the main job on built-in synthetic data) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test bench clean
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/bootstrap.sh
	scripts/bootstrap.sh $(VENV)
	touch $@

demo: install
	$(PY) -m dali_backend demo --out out/demo

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) out .pytest_cache
