# The README's two commands: `make study` and `make test`. Both install into .venv first
# (a no-op when nothing changed).
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install study test bench docs clean-venv help
help:
	@echo "make study   install if needed, then run the main job (gendergap study)"
	@echo "make test    install if needed, then run the test suite"
	@echo "make bench   run the speed benchmarks (ratios against the naive way)"
	@echo "make docs    build the documentation site into site/ (warnings are errors)"

install:
	@bash scripts/install.sh

study: install
	$(BIN)/gendergap study $(STUDY_ARGS)

test: install
	@bash scripts/run_tests.sh $(TEST_ARGS)

bench: install
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

docs: install
	$(BIN)/mkdocs build --strict

clean-venv:
	rm -rf $(VENV)
