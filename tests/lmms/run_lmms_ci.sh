#!/usr/bin/env bash
# The lmms-eval integration tests, in their own venv (.venv-lmms): lmms-eval 0.7.3 brings ~140 packages and pins
# (wandb==0.25.0) that the main venv must not carry. Called by .ci/run after `make test`; runnable by hand.
# The venv is reused while its install stamp is newer than pyproject.toml and constraints-lmms.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3}
VENV=${LMMS_VENV:-.venv-lmms}
PY="$VENV/bin/python"
# constraints-lmms.txt pins torch==2.13.0 (a local CPU wheel here): pip never pulls another torch build.
PIP=("$PY" -m pip install -q --disable-pip-version-check -c constraints-lmms.txt)

if [[ ! -f "$VENV/.installed" || pyproject.toml -nt "$VENV/.installed" || constraints-lmms.txt -nt "$VENV/.installed" ]]; then
  [[ -x "$PY" ]] || "$PYTHON" -m venv "$VENV"
  "${PIP[@]}" torch==2.13.0
  "${PIP[@]}" -e '.[dev,lmms]'
  "${PIP[@]}" --no-deps qwen-agent==0.0.34  # the Qwen2 BPE ranks of the tiny model's tokenizer (a data carrier)
  # lmms-eval requires torchvision, but PyPI's build does not load beside the CPU torch 2.13.0 ("operator
  # torchvision::nms does not exist"), and transformers imports torchvision whenever it is installed: drop a broken one.
  if ! "$PY" -c "import torchvision" >/dev/null 2>&1; then
    "$PY" -m pip uninstall -y -q torchvision
  fi
  touch "$VENV/.installed"
fi

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec "$PY" -m pytest tests/lmms -m lmms
