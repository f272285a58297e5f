#!/usr/bin/env bash
# The lmms-eval integration tests, in their own venv (.venv-lmms): lmms-eval 0.7.3 brings ~140 packages and pins
# (wandb==0.25.0) that the main venv must not carry. Called by .ci/run after `make test`; runnable by hand.
# Installs it as the docs do (`make install-lmms`: reused while its stamp is newer than pyproject.toml and
# constraints-lmms.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3}
VENV=${LMMS_VENV:-.venv-lmms}
PY="$VENV/bin/python"

make --no-print-directory install-lmms PYTHON="$PYTHON" LMMS_VENV="$VENV"  # the documented install, reused while fresh

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec "$PY" -m pytest -n 0 tests/lmms -m lmms  # one process: its fixtures run lmms-eval once per model
