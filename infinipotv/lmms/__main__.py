"""``python -m infinipotv.lmms`` prints the folder of our task overrides, for ``lmms-eval --include_path``."""

from infinipotv.lmms import TASKS_DIR

print(TASKS_DIR)
