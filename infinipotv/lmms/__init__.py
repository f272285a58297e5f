"""lmms-eval integration: our streaming models as an lmms-eval model, local-data task overrides, score parity.

- ``lmms-eval --model infinipotv --model_args model=tiny_qwen2vl,compress=tar_van_pool,compress.budget=200,quant=int4``
  runs lmms-eval's own tasks through a :class:`~infinipotv.stream.session.StreamingSession` (the plugin is found
  through the ``lmms_eval.models`` entry point, :mod:`infinipotv.lmms.manifest`).
- ``--include_path $(python -m infinipotv.lmms)`` adds ``videomme_local``, ``mlvu_dev_local``,
  ``egoschema_subset_local`` and ``longvideobench_val_v_local``: lmms-eval's tasks read from local files under
  ``$HF_HOME`` (:mod:`infinipotv.lmms.local_task`).
- ``python -m infinipotv.lmms.parity SAMPLES_FILE --task TASK`` scores an lmms-eval samples file with our benchmark
  code, beside lmms-eval's own number.

Only the plugin and the task class import lmms-eval; composing configs and the parity command do not need it.
See docs/lmms_eval.md.
"""

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent / "tasks"  # pass to lmms-eval as --include_path

__all__ = ["TASKS_DIR"]
