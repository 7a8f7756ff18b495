# The two commands a new user needs: `make demo` and `make test`.
# Both run scripts/setup.sh first, which installs what is missing and is a
# no-op when everything is there.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test bench docs reference clean-lab

setup:
	@bash scripts/setup.sh

demo: setup
	@$(VENV)/bin/quictp-demo

test: setup
	@$(PY) -m pytest -ra -p no:cacheprovider --durations=25 -n 4 --dist loadgroup --no-loadscope-reorder tests

# The generated pages committed in docs/ (CLI and schema reference, benchmarks chart, the results page's
# tables: each stack now, what held the traced runs back), made anew from the
# code and data; commit what changes (a test fails while they are stale).
reference: setup
	@$(PY) -m docs_build.committed

# The manual as a site (out/docs/index.html); the tests build it the same way.
docs: reference
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet && echo "manual: out/docs/index.html"

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean-lab: setup
	@$(VENV)/bin/qscan lab down
