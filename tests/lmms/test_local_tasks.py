"""Our task overrides: lmms-eval's own task configs reading local files under $HF_HOME, failing clearly without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from infinipotv.data.toy_lmms import FAMILIES
from tests.lmms.lmms_data import NO_LMMS

pytestmark = pytest.mark.lmms
pytest.importorskip("lmms_eval", reason=NO_LMMS)

from lmms_eval.tasks import TaskManager  # noqa: E402

from infinipotv.lmms import TASKS_DIR  # noqa: E402
from infinipotv.lmms.local_task import local_config  # noqa: E402

VIDEOMME = {
    "task": "videomme_local",
    "base": "videomme/videomme.yaml",
    "dataset_path": "parquet",
    "dataset_kwargs": {"data_files": {"test": "$HF_HOME/videomme/videomme/test-00000-of-00001.parquet"}},
}


def test_lmms_eval_indexes_our_tasks() -> None:
    manager = TaskManager(include_path=str(TASKS_DIR))
    assert {t: manager.task_index[t]["type"] for t in FAMILIES} == {t: "python_task" for t in FAMILIES}


def test_the_override_keeps_lmms_evals_task_and_changes_only_the_data(hf_home: Path) -> None:
    cfg = local_config({**VIDEOMME, "class": object})
    assert cfg["task"] == "videomme_local" and "class" not in cfg and "base" not in cfg
    assert cfg["dataset_path"] == "parquet"
    annotations = hf_home / "videomme" / "videomme" / "test-00000-of-00001.parquet"
    assert cfg["dataset_kwargs"] == {"data_files": {"test": str(annotations)}}
    assert cfg["doc_to_text"].__name__ == "videomme_doc_to_text"  # lmms-eval's own function
    assert cfg["generation_kwargs"]["max_new_tokens"] == 16


@pytest.mark.parametrize(
    "change, error, message",
    [
        (
            {"dataset_kwargs": {"data_files": {"test": "$HF_HOME/nowhere.parquet"}}},
            FileNotFoundError,
            "nowhere.parquet",
        ),
        ({"dataset_kwargs": {"data_files": {"test": "$NO_SUCH_VAR/x.parquet"}}}, ValueError, r"\$NO_SUCH_VAR"),
        ({"dataset_kwargs": {}}, ValueError, "data_files must map"),
        ({"base": "videomme/nope.yaml"}, FileNotFoundError, "not a task config"),
    ],
)
def test_missing_pieces_are_named(hf_home: Path, change: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        local_config({**VIDEOMME, **change})


def test_missing_video_folder_is_named(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'videomme'}, which does not exist"):
        local_config(VIDEOMME)
