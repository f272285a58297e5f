"""A test-only lmms-eval model that answers with fixed replies, chosen to hit every parser quirk.

Registered in the test's lmms-eval subprocess through the same ``lmms_eval.models`` entry-point group as our plugin
(a throwaway dist-info folder on PYTHONPATH), so lmms-eval's whole pipeline -- reasoning-tag stripping, its task
parsers and aggregators, its samples and results files -- scores them. Replies are per task, in document order;
``tests/lmms/test_parity.py`` knows what each should score.
"""

from __future__ import annotations

from lmms_eval.api.model import lmms
from lmms_eval.models.registry_v2 import ModelManifest

REPLIES = {
    "videomme_local": ["the answer is B, Dog", "DATA shows", "Bees and Cats", "<think>C</think> A"],
    "mlvu_dev_local": ["B) green", "(D) a dog, A.", "A"],
    "egoschema_subset_local": ["C", "no idea at all"],
    "longvideobench_val_v_local": ["Answer: B", "The best answer is E"],
}


def manifest() -> ModelManifest:
    return ModelManifest(model_id="scripted_replies", simple_class_path="tests.lmms.scripted_replies.ScriptedReplies")


class ScriptedReplies(lmms):
    is_simple = True

    def __init__(self, **_: object) -> None:
        super().__init__()

    def generate_until(self, requests) -> list[str]:
        return [REPLIES[r.args[4]][r.args[3]] for r in requests]  # args: prompt, kwargs, visual, doc_id, task, split

    def loglikelihood(self, requests):
        raise NotImplementedError

    def generate_until_multi_round(self, requests):
        raise NotImplementedError
