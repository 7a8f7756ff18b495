# The two commands a new user needs: `make demo` and `make test`.
# Both run scripts/setup.sh first, which installs what is missing and is a
# no-op when everything is there.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test bench clean-lab

setup:
	@bash scripts/setup.sh

demo: setup
	@$(VENV)/bin/quictp-demo

test: setup
	@$(PY) -m pytest -ra -p no:cacheprovider tests

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean-lab: setup
	@$(VENV)/bin/qscan lab down
