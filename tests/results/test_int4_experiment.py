"""The INT4 study's experiment runs both of its comparisons: its two documented sweeps compose jobs that fill the
equal-tokens rows (FP16 and INT4 at |M| = 6K) and the equal-bytes row (INT4 at FP16's 6K bytes), each row matched by
exactly one job per benchmark, and the byte budget it names is what 6K tokens take in FP16 on Qwen2-VL-7B."""

from __future__ import annotations

import itertools
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from infinipotv.config import QuantConfig, as_run_config, register_configs
from infinipotv.kv import Storage, tokens_for_bytes
from infinipotv.results.collect import _flatten
from infinipotv.results.report import load_experiment
from infinipotv.results.tables import matches

ROOT = Path(__file__).resolve().parents[2]
EQUAL_BYTES = ["quant=int4", "compress.budget=null", "compress.budget_mib=331.5152"]  # the file's second sweep
QWEN2VL_7B = (28, 4, 128)  # layers, KV heads, head_dim of the checkpoint (config.json)
QWEN2VL_PREFIX = 15  # system prompt ... <|vision_start|> (tests/models check the adapter's prefix)


def _jobs(command: list[str]) -> list[dict]:
    """The jobs of ``run.py -m +experiment=int4_vs_fp16 COMMAND``: the experiment's sweep params crossed, command
    overrides winning; each job as the fields a table row matches on."""
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        master = compose("config", overrides=["+experiment=int4_vs_fp16", *command], return_hydra_config=True)
        given = {o.split("=")[0] for o in command}
        params = {k: str(v).split(",") for k, v in master.hydra.sweeper.params.items() if k not in given}
        jobs = []
        for combo in itertools.product(*params.values()):
            overrides = [f"{k}={v}" for k, v in zip(params, combo)]
            cfg = as_run_config(compose("config", overrides=["+experiment=int4_vs_fp16", *command, *overrides]))
            plain = OmegaConf.to_container(OmegaConf.structured(cfg))
            jobs.append(
                {
                    **_flatten(plain),
                    "policy": cfg.compress.name,
                    "kv": cfg.quant.name,
                    "budget_tokens": cfg.compress.budget,  # a byte budget's |M| is set when the model loads
                    "benchmark": cfg.benchmark.name,
                }
            )
    return jobs


def test_both_comparisons_have_their_rows_and_jobs() -> None:
    _, spec = load_experiment(ROOT / "experiments" / "int4_vs_fp16.yaml")
    jobs = _jobs([]) + _jobs(EQUAL_BYTES)
    assert len(jobs) == 6  # fp16 and int4 at 6K tokens, int4 at equal bytes; Video-MME and MLVU
    tables = {t.name: t for t in spec.tables}
    rows = {(t, r.id): r for t in ("main", "mlvu_tasks", "equal_bytes") for r in tables[t].rows if r.match}
    assert {("main", "int4"), ("mlvu_tasks", "int4"), ("equal_bytes", "int4_bytes")} <= set(rows)
    for (table, row_id), row in rows.items():
        if row.match.get("policy") == "full":
            continue  # the full-KV reference row has its own command
        for bench in ("videomme", "mlvu"):
            hits = [j for j in jobs if j["benchmark"] == bench and matches(j, row.match)]
            assert len(hits) == 1, (table, row_id, bench, len(hits))
    assert "equal tokens" in tables["main"].caption and "equal KV bytes" in tables["equal_bytes"].caption


def test_the_byte_budget_is_fp16s_6k_tokens() -> None:
    def storage(name: str) -> Storage:
        conf = OmegaConf.merge(OmegaConf.structured(QuantConfig), OmegaConf.load(ROOT / "conf/quant" / f"{name}.yaml"))
        return Storage.from_config(OmegaConf.to_object(conf), torch.bfloat16)

    mib = float(EQUAL_BYTES[-1].split("=")[1])
    assert tokens_for_bytes(mib * 2**20, *QWEN2VL_7B, storage("fp16")) - QWEN2VL_PREFIX == 6000
    assert tokens_for_bytes(mib * 2**20, *QWEN2VL_7B, storage("int4")) - QWEN2VL_PREFIX > 3 * 6000
