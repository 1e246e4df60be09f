# mfattn: the two commands of the README are `make book` and `make test`.
# Each creates .venv on first use and installs the pinned dependencies.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHAPTERS := $(wildcard notebooks/*.md)

# Tool state stays in the build folder, never in the user's home.
STATE := $(CURDIR)/_build/.state
export MPLCONFIGDIR := $(STATE)/matplotlib
export IPYTHONDIR := $(STATE)/ipython
export JUPYTER_RUNTIME_DIR := $(STATE)/jupyter-runtime
export JUPYTER_CONFIG_DIR := $(STATE)/jupyter-config
export JUPYTER_DATA_DIR := $(STATE)/jupyter-data
export XDG_CACHE_HOME := $(STATE)/cache
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# Progress bars write rates to stderr; committed and re-executed outputs must compare exactly.
export TQDM_DISABLE := 1

# nbval compares every committed chapter with a fresh run, through nbval-sanitize.cfg.
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with nbval-sanitize.cfg --nbval-cell-timeout=900
# The nbval pass of `make test` runs on another kernel path than the one `make execute` takes:
# ATen's scalar kernels instead of the CPU's vector ones, one thread instead of all, MKL held to
# AVX2 (the path it takes on AMD CPUs). A chapter that prints a figure its run does not determine (a
# last digit of rounding, the outcome of a search that depends on it) fails here, on this machine,
# and not first on a reader's CPU. One thread per kernel lets two chapters run at once
# (pytest-xdist, a notebook per worker, the longest first: notebooks/conftest.py).
ALT_PATH := ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MKL_ENABLE_INSTRUCTIONS=AVX2
NBVAL_WORKERS ?= 2

.PHONY: help venv test test-unit test-other-path unit nbval nbval-alt book check-html execute device-check clean
help:
	@echo "make book     build the book into _build/html from the committed chapters (executes none)"
	@echo "make test     unit and oracle tests, the docstrings' examples (doctests), chapter sync check;"
	@echo "              beside them nbval over the committed notebooks on another kernel path than the one"
	@echo "              that executed them (make nbval-alt), two chapters at a time"
	@echo "make nbval    nbval on this CPU's own kernels and thread count (not part of make test)"
	@echo "make check-html  open every page of _build/html in headless Chromium (Debian's chromium package)"
	@echo "              and fail on console errors, remote requests, unrendered math, images without alt"
	@echo "              text or caption, anything wider than the text column (builds nothing)"
	@echo "make execute  re-execute notebooks/*.md into the committed notebooks/*.ipynb (ci profile)"
	@echo "make device-check  on a GPU machine with torch and triton (no venv): the Triton pass against its"
	@echo "              oracles, timed against the torch path and the card's roofline, the CUDA tests;"
	@echo "              about 8 minutes, into device-check/ (tools/device_check.py)"
	@echo "make clean    remove _build and runs"

$(STAMP): requirements.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	@mkdir -p $(STATE)
	touch $@

venv: $(STAMP)

# `make test` runs two streams side by side on the machine's cores: the unit, oracle and doctests;
# nbval on the other kernel path, two chapters at a time. Validating each chapter once, on a path
# other than the one that executed it, checks more than a second pass on the executing path would
# (that pass, `make nbval`, is kept for a reader's own CPU) at half the cost. OMP_WAIT_POLICY=PASSIVE
# keeps the two streams' waiting threads from spinning on each other's core. Each stream's lines are
# printed whole, prefixed with its name; make waits for both and fails if one fails.
STREAM = set -o pipefail; $(1) 2>&1 | sed -u 's/^/[$(2)] /'
test: $(STAMP)
	@mkdir -p $(STATE)
	@# the compiled kernels once, into numba's disk cache, before the test processes would each compile them
	@echo "fused kernels: compiled on first use (about a minute), loaded from numba's disk cache after"
	@$(BIN)/python -c "from mfattn.models import fused; fused.compile_seconds()"
	@OMP_WAIT_POLICY=PASSIVE $(MAKE) --no-print-directory -j2 test-unit test-other-path

test-unit: $(STAMP)
	@$(call STREAM,$(BIN)/python -m pytest -p no:cacheprovider tests src/mfattn --doctest-modules,unit)

test-other-path: $(STAMP)
	@$(call STREAM,$(MAKE) --no-print-directory nbval-alt,nbval other path)

unit: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider tests src/mfattn --doctest-modules

nbval: $(STAMP)
	@mkdir -p $(STATE)
	$(BIN)/python -m pytest -p no:cacheprovider notebooks $(NBVAL)

nbval-alt: $(STAMP)
	@mkdir -p $(STATE)
	@echo "nbval on another kernel path: $(ALT_PATH)"
	env $(ALT_PATH) $(BIN)/python -m pytest -p no:cacheprovider notebooks $(NBVAL) \
		-n $(NBVAL_WORKERS) --dist loadfile --no-loadscope-reorder

book: $(STAMP)
	@mkdir -p $(STATE)
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "open _build/html/index.html"

check-html: $(STAMP)
	@test -f _build/html/index.html || { echo "no _build/html: run make book first"; exit 1; }
	$(BIN)/python -m mfattn check-html _build/html

execute: $(STAMP)
	@mkdir -p $(STATE)
	# status 3: the chapter ran to its end and a claim failed; that is a result, and the run is kept
	for md in $(CHAPTERS); do $(BIN)/python -m mfattn run $$md --inplace --quiet || [ $$? -eq 3 ] || exit 1; done

# Runs with the machine's own python (a GPU machine has torch and triton, not this venv); each part of
# the check has its own time limit, so the whole stays within about 8 minutes.
DEVICE_CHECK_OUT ?= device-check
device-check:
	PYTHONPATH=src $(PYTHON) tools/device_check.py --out $(DEVICE_CHECK_OUT)

clean:
	rm -rf _build runs
