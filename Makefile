# gpt2-levers: what each optimisation lever buys when training GPT-2 on *your* GPU.
# `make help` lists the targets (the `## ` text after each one) and the options of `make report`.
#
# Setup happens on first use and is skipped when done. Two environment modes:
#   venv     (default) .venv/ with requirements.txt, PyTorch included
#   existing a host whose python3 already has a CUDA/ROCm PyTorch: that interpreter is used as
#            is, and only the missing packages go into .deps/ (from wheelhouse/ when offline)
# User-supplied values (GPU, BATCHES, ...) reach Python through the environment, never through
# the shell line, so no name can inject a command.

SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
export GPU GPUS BATCHES STAGES CHAPTERS DEPTH COMPILE_CACHE MEASURE_FOR PRICE_PER_GPU_HOUR OVERRIDE REPORTS FORCE MEASURE_ONLY NNODES NODE_RANK RDZV

ENV_MODE ?= $(shell $(PYTHON) -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1 && echo existing || echo venv)
ifeq ($(ENV_MODE),existing)
  # JUPYTER_PATH: nbconvert's templates and ipykernel's spec live in .deps/share/jupyter
  PY := PYTHONPATH=$(CURDIR)/.deps:$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} \
        JUPYTER_PATH=$(CURDIR)/.deps/share/jupyter$${JUPYTER_PATH:+:$$JUPYTER_PATH} $(PYTHON)
  SETUP_STAMP := .deps/.stamp
else
  PY := PYTHONPATH=$(CURDIR) $(CURDIR)/.venv/bin/python
  SETUP_STAMP := .venv/.stamp
endif
PIP_QUIET := 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# what measuring and rendering import; the test tools are checked by `make test` alone, so a GPU host
# that only measures needs no linter
HOST_IMPORTS := numpy tiktoken pandas scipy matplotlib yaml papermill nbformat nbconvert ipykernel
TEST_IMPORTS := pytest ruff
# the lever packages' modules, from the stage registry (lib/core/stages.py needs only the standard library)
LEVER_IMPORTS = $(shell PYTHONPATH=$(CURDIR) $(PYTHON) -m lib.core.stages modules)

.PHONY: help setup report test test-fast lab wheelhouse pdf render compare clean corpus-long
help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | sed -E 's/^([a-z-]+):.*## /  make \1\t/' | expand -t 16
	@echo "options of make report: GPU=h100 MODEL=gpt2-xl BATCHES=\"16 32\" STAGES=\"fp32 vocab ddp\" CHAPTERS=\"batch_sweep autotune\" DEPTH=full PRICE_PER_GPU_HOUR=2.49 MEASURE_ONLY=1 MEASURE_FOR=480 COMPILE_CACHE=dir FORCE=1 OVERRIDE=1 REPORTS=dir NNODES=2 NODE_RANK=0 RDZV=host:port"

# A bad input of `make report` (profile, batch sizes, stages, reports folder) stops make itself,
# so its one-line reason is the last thing printed (a failing recipe would add make's own
# "Error 2" line after it). Checked once the environment exists; the CLI checks again anyway.
ifneq ($(filter report,$(MAKECMDGOALS)),)
ifneq ($(wildcard $(SETUP_STAMP)),)
# make 4.3 passes no command-line variable to $(shell), and no value may go through a shell line:
# the values travel in a file that only Python reads.
INPUT_FILE := $(shell mktemp)
$(file >$(INPUT_FILE),GPU=$(GPU))
$(file >>$(INPUT_FILE),MODEL=$(MODEL))
$(file >>$(INPUT_FILE),BATCHES=$(BATCHES))
$(file >>$(INPUT_FILE),STAGES=$(STAGES))
$(file >>$(INPUT_FILE),CHAPTERS=$(CHAPTERS))
$(file >>$(INPUT_FILE),DEPTH=$(DEPTH))
$(file >>$(INPUT_FILE),PRICE_PER_GPU_HOUR=$(PRICE_PER_GPU_HOUR))
$(file >>$(INPUT_FILE),REPORTS=$(REPORTS))
$(file >>$(INPUT_FILE),NNODES=$(NNODES))
$(file >>$(INPUT_FILE),NODE_RANK=$(NODE_RANK))
$(file >>$(INPUT_FILE),RDZV=$(RDZV))
INPUT_ERROR := $(shell $(PY) -m lib.cli check $(INPUT_FILE) 2>/dev/null; rm -f $(INPUT_FILE))
ifneq ($(INPUT_ERROR),)
$(error $(INPUT_ERROR))
endif
endif
endif

setup: $(SETUP_STAMP)  ## create the environment and fetch the data (every target does this first)
	@$(PY) -m lib.core.data

.venv/.stamp: requirements.txt
	@echo "setup: creating .venv (first use only)"; start=$$SECONDS; \
	$(PYTHON) -m venv .venv && \
	.venv/bin/python -m pip install --quiet --upgrade pip $(PIP_QUIET) && \
	.venv/bin/python -m pip install --quiet -r requirements.txt $(PIP_QUIET) && \
	touch $@ && echo "setup: .venv ready in $$((SECONDS - start)) s"

.deps/.stamp: requirements-host.txt requirements-levers.txt
	@echo "setup: existing environment ($(PYTHON), its own PyTorch is kept)"; start=$$SECONDS; \
	mkdir -p .deps; \
	if ! PYTHONPATH=.deps $(PYTHON) -c "import $(shell echo $(HOST_IMPORTS) | tr ' ' ',')" 2>/dev/null; then \
	  if ls wheelhouse/*.whl >/dev/null 2>&1; then \
	    echo "setup: installing missing packages from wheelhouse/ (offline)"; \
	    $(PYTHON) -m pip install --quiet --no-index --no-deps --no-compile --target .deps wheelhouse/*.whl || exit 1; \
	  else \
	    $(PYTHON) -m pip install --quiet --target .deps -r requirements-host.txt $(PIP_QUIET) || { \
	      echo "error: packages missing and no wheelhouse/: run 'make wheelhouse' on a machine with network and copy wheelhouse/ here" >&2; exit 1; }; \
	  fi; \
	fi; \
	PYTHONPATH=.deps $(PYTHON) -c "import $(shell echo $(HOST_IMPORTS) | tr ' ' ',')" || exit 1; \
	if ! PYTHONPATH=.deps $(PYTHON) -c "import $(shell echo $(LEVER_IMPORTS) | tr ' ' ',')" 2>/dev/null; then \
	  $(PYTHON) -m pip install --quiet --no-deps --no-compile --target .deps \
	    $$([ -d wheelhouse ] && echo --no-index --find-links wheelhouse) -r requirements-levers.txt $(PIP_QUIET) \
	    || echo "setup: lever packages not installed; their stages will say 'not applicable'"; \
	fi; \
	touch $@ && echo "setup: packages ready in $$((SECONDS - start)) s"

report: setup  ## measure and render reports/<gpu>/report.{html,pdf} (options below)
	@start=$$SECONDS; $(PY) -m lib.cli report; rc=$$?; \
	[ $$rc = 2 ] || echo "run phase: $$((SECONDS - start)) s"; exit $$rc

pdf: setup  ## render report.pdf from an existing report.html [GPU= MODEL=]
	@$(PY) -m lib.cli pdf

render: setup  ## redraw a report from its results, measuring nothing [GPU= MODEL=]
	@$(PY) -m lib.cli render

compare: setup  ## one report across GPUs from existing reports [GPUS="h100 h200"]
	@$(PY) -m lib.cli compare

test: setup  ## the linter, then the test suite (the whole pipeline on the CPU default)
	@$(PY) -c "import $(shell echo $(TEST_IMPORTS) | tr ' ' ',')" 2>/dev/null || { \
	  echo "error: the test tools ($(TEST_IMPORTS)) are missing: pip install them (or the wheelhouse's)" >&2; exit 1; }
	@$(PY) -m ruff check lib tests tools && $(PY) -m ruff format --check -q lib tests tools && $(PY) -m pytest -q tests

test-fast: setup  ## the pure-Python tests only (no pipeline, no measuring process): the inner loop
	@$(PY) -m ruff check lib tests tools && $(PY) -m ruff format --check -q lib tests tools && $(PY) -m pytest -q -m "not slow" tests

# JupyterLab listens on LAB_PORT and nowhere else (port_retries=0: a port in use stops it rather than moving it to
# one the message does not name); the port reaches the command through the environment, checked as a number.
export LAB_PORT ?= 8888
lab: setup  ## JupyterLab at http://localhost:8888/lab: the chapter template, the summary, every report's notebooks [LAB_PORT=8888]
	@case "$$LAB_PORT" in ''|*[!0-9]*) echo "error: LAB_PORT must be a port number, not '$$LAB_PORT'" >&2; exit 1;; esac
	@$(PY) -c "import jupyterlab" 2>/dev/null || { \
	  if [ "$(ENV_MODE)" = existing ]; then $(PYTHON) -m pip install --quiet --target .deps jupyterlab $(PIP_QUIET); \
	  else .venv/bin/python -m pip install --quiet jupyterlab $(PIP_QUIET); fi; }
	@echo "lab: JupyterLab on port $$LAB_PORT: open http://localhost:$$LAB_PORT/lab (with the token in the URL it prints)"
	$(PY) -m jupyterlab --ServerApp.root_dir=. --ServerApp.port="$$LAB_PORT" --ServerApp.port_retries=0 \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# The long quality test's corpus (lib/core/long_corpus.py): pinned Debian packages fetched with apt-get,
# checked by sha256, tokenized into data/long/ (about 20 MiB, xz). Only the long test reads it; data/
# travels to an offline GPU host like wheelhouse/ does.
corpus-long: setup  ## the long quality test's corpus into data/long/ (apt-get; copy data/ to an offline GPU host)
	@$(PY) -m lib.core.long_corpus

# Wheels for an offline host with its own PyTorch: every package of requirements-host.txt and
# its dependencies, and the lever packages of requirements-levers.txt (no dependencies), for WHEEL_PYTHON on manylinux x86-64. HOST_FREEZE=<file of 'name' or
# 'name==version' lines, e.g. the host's `pip freeze`> leaves out what the host already has.
WHEEL_PYTHON ?= 3.12
WHEEL_PLATFORMS ?= manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 linux_x86_64 any
wheelhouse:  ## wheels for an offline GPU host [WHEEL_PYTHON=3.12 HOST_FREEZE=freeze.txt]
	@rm -rf wheelhouse && mkdir -p wheelhouse
	$(PYTHON) -m pip download --quiet --only-binary=:all: --python-version $(WHEEL_PYTHON) --implementation cp \
	  $(foreach p,$(WHEEL_PLATFORMS),--platform $(p)) -d wheelhouse -r requirements-host.txt $(PIP_QUIET)
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version $(WHEEL_PYTHON) --implementation cp \
	  $(foreach p,$(WHEEL_PLATFORMS),--platform $(p)) -d wheelhouse -r requirements-levers.txt $(PIP_QUIET)
	@if [ -n "$(HOST_FREEZE)" ]; then $(PYTHON) tools/prune_wheelhouse.py wheelhouse "$(HOST_FREEZE)"; fi
	@if command -v apt-get >/dev/null; then tools/pdf_sysroot.sh wheelhouse/sysroot; \
	 else echo "wheelhouse: no apt-get here, so no PDF libraries for hosts without Pango"; fi
	@echo "wheelhouse: $$(ls wheelhouse | wc -l) wheels, $$(du -sh wheelhouse | cut -f1); copy it next to the Makefile on the GPU host"

clean:  ## remove .venv, .deps and reports/lab
	rm -rf .venv .deps reports/lab
