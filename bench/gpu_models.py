"""The model-family checks on a CUDA GPU, with a report: ``python bench/gpu_models.py [--out DIR]``.

The CPU suite proves the adapters exact in float32; this runs the same tests (tests/models) on the device path that
real runs take, once per dtype, and measures the numbers behind them:
- float32 on CUDA (TF32 off): the tight check, streamed vs one-pass log-probs within 1e-4 as on the CPU;
- bfloat16 on CUDA: the dtype of real runs; its tolerance only catches gross errors on the tiny models.
Per family and dtype it records the streamed vs one-pass log-prob gap, argmax agreement, the chunked vs whole vision
encoding gap, stream time and peak CUDA memory. Writes ``report.json``, ``report.md``, the pytest logs and JUnit XML
to ``--out`` (default results/gpu_models/). Exit status 1 if a test failed, 2 if there is no GPU.
``INFINIPOTV_ATTN=flash_attention_2 ... --dtypes bfloat16`` checks flash attention (it has no float32 kernels);
``--device cpu`` is a dry run of the script itself where there is no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DTYPES = ("float32", "bfloat16")


def measure() -> list[dict]:
    """Gaps and costs per family, on the device and dtype that INFINIPOTV_DEVICE / INFINIPOTV_DTYPE name."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT))
    from infinipotv.stream.reference import DTYPE, FAMILIES, PROMPT, one_shot_logprobs, stream, tiny_adapter

    rng = np.random.default_rng(0)
    video = rng.integers(0, 255, size=(12, 112, 168, 3)).astype(np.uint8)
    cuda = torch.cuda.is_available()
    rows = []
    for family in FAMILIES:
        adapter = tiny_adapter(family)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        answer = stream(adapter, video, 2).ask(PROMPT, max_new_tokens=1)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        reference = one_shot_logprobs(adapter, video, fps=2.0)
        whole = adapter.encode_frames(video[:8], 0, 2.0, 0).embeds.float()
        parts = torch.cat([adapter.encode_frames(video[i : i + 2], i, 2.0, 0).embeds for i in range(0, 8, 2)]).float()
        rows.append(
            {
                "family": family,
                "dtype": DTYPE,
                "logprob_gap": float((answer.first_logprobs - reference).abs().max()),
                "argmax_agrees": int(answer.first_logprobs.argmax()) == int(reference.argmax()),
                "vision_gap": float((parts - whole).abs().max()),
                "stream_seconds": round(seconds, 3),
                "peak_cuda_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
            }
        )
    return rows


def junit_summary(path: Path) -> dict:
    if not path.exists():
        return {"tests": 0, "failures": 0, "errors": 1, "skipped": 0, "failed": ["pytest did not write its report"]}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    failed = [
        f"{c.get('classname')}::{c.get('name')}"
        for c in suite.iter("testcase")
        if c.find("failure") is not None or c.find("error") is not None
    ]
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")} | {"failed": failed}


def run_dtype(device: str, dtype: str, out: Path) -> dict:
    """pytest tests/models, then the measurements, in fresh processes (the test helpers read the env at import)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # keep packages put on it
    env = {**os.environ, "INFINIPOTV_DEVICE": device, "INFINIPOTV_DTYPE": dtype, "PYTHONPATH": path}
    junit = out / f"junit_{dtype}.xml"
    with (out / f"pytest_{dtype}.log").open("w") as log:
        subprocess.run(
            [sys.executable, "-m", "pytest", "tests/models", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    measured = subprocess.run(
        [sys.executable, __file__, "--measure"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    rows = json.loads(measured.stdout.strip().splitlines()[-1]) if measured.returncode == 0 else []
    return {
        "device": device,
        "dtype": dtype,
        "tests": junit_summary(junit),
        "measurements": rows,
        "measure_error": measured.stderr[-2000:] if measured.returncode else None,
    }


def markdown(report: dict) -> str:
    lines = [
        f"# Model families on {report['gpu']}",
        "",
        f"torch {report['torch']}, transformers {report['transformers']}, attention "
        f"{report['attn_implementation']}, {report['date']}",
        "",
        "| dtype | tests | failed | skipped |",
        "|---|---|---|---|",
    ]
    for r in report["runs"]:
        t = r["tests"]
        lines.append(f"| {r['dtype']} | {t['tests']} | {t['failures'] + t['errors']} | {t['skipped']} |")
    lines += [
        "",
        "| family | dtype | log-prob gap | argmax agrees | vision gap | stream s | peak CUDA MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        for m in r["measurements"]:
            lines.append(
                f"| {m['family']} | {m['dtype']} | {m['logprob_gap']:.2e} | {m['argmax_agrees']} | "
                f"{m['vision_gap']:.2e} | {m['stream_seconds']} | {m['peak_cuda_mib']} |"
            )
    failed = [name for r in report["runs"] for name in r["tests"]["failed"]]
    lines += ["", "Failed: " + (", ".join(failed) if failed else "none"), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu_models")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of this script where there is no GPU")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    if args.measure:
        print(json.dumps(measure()))
        return 0
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "error: no CUDA device visible (check CUDA_VISIBLE_DEVICES and that torch is a CUDA build); "
            "--device cpu runs the script itself",
            file=sys.stderr,
        )
        return 2
    import transformers

    args.out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"
    report = {
        "gpu": gpu,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "attn_implementation": os.environ.get("INFINIPOTV_ATTN", "sdpa"),
        "host": platform.node(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "runs": [run_dtype(args.device, dtype, args.out) for dtype in args.dtypes],
    }
    (args.out / "report.json").write_text(json.dumps(report, indent=2))
    (args.out / "report.md").write_text(markdown(report))
    print(markdown(report))
    return int(any(r["tests"]["failures"] or r["tests"]["errors"] or r["measure_error"] for r in report["runs"]))


if __name__ == "__main__":
    sys.exit(main())
