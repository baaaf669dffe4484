# make demo: install, then run the flywheel on the embedded default (offline, CPU).
# make test: install, then run the test suite.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python

# Keep Prefect and Hugging Face state inside the checkout, offline and quiet.
export PREFECT_HOME := $(CURDIR)/.prefect
export HF_HOME := $(CURDIR)/.hf
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export DO_NOT_TRACK := 1

.PHONY: install demo test clean

install: $(VENV)/.installed

# torch first, pinned: a looser requirement resolved first would pull the CUDA build.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

demo: install
	$(VENV)/bin/flywheel run

test: install
	$(PY) -m pytest

clean:
	rm -rf data/runs .prefect .hf .pytest_cache
