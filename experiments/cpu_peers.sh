#!/usr/bin/env bash
# The field's CPU study of experiments/cpu_peers.yaml, whole: 38 runs in two lanes (one core each), then its tables.
# Lane A: the 1/8 rows on the plain stream (seed 0), the 1/4 rows, and ReKV, LiveVLM, StreamMem and VaN + pooling on
# the background stream kind (19 runs); lane B: the 1/8 rows on seed 1 and the rest of the background kind (19 runs).
# The 1/4 rows are trimmed to InfiniPot-V in FP16 and INT4 at equal bytes so that the study fits 150 minutes on two
# cores (issue 34); the full cache is budget-free, so the 1/8 line's run serves both tables.
# tests/results/test_peer_experiments.py composes and checks every `sweep` line below.
# Usage: bash experiments/cpu_peers.sh   (from the repository root, after `make install`)
# Time: planned from a one-video run of every method (15-26 s a video on a 2-core VM, StreamMem the slowest, the
# background kind's 16 tokens a frame ~1.25x): ~135-140 min a lane; the study's log (below) holds the measured figure.
# Each lane is a sequence of Hydra sweeps; a killed study resumes where it stopped when run again (each sweep job
# resumes its own run directory under results/runs/cpu_peers). Wall times go to results/runs/cpu_peers/study.log.
set -euo pipefail
cd "$(dirname "$0")/.."
EXPERIMENT=cpu_peers
source experiments/study.sh

lane_a() {
  sweep compress.budget=144                                                                     # 10: FP16 at 1/8
  sweep compress=full compress.budget=null                                                      # the full cache
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib=3.3921        # INT4, 1/8 bytes
  sweep compress=tar_van_pool compress.budget=288                                               # FP16 at 1/4
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib=6.6056        # INT4, 1/4 bytes
  sweep compress=rekv,livevlm,streammem,van_pool compress.budget=144 benchmark.options.background_rows=1 'benchmark.options.grid=[4,4]' model.max_pixels=4096          # 4: background
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib=3.3921 benchmark.options.background_rows=1 'benchmark.options.grid=[4,4]' model.max_pixels=4096
}

lane_b() {
  sweep compress.budget=144 benchmark.seed=1                                                    # 10: seed 1
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib=3.3921 benchmark.seed=1
  sweep compress=full compress.budget=null benchmark.seed=1
  sweep compress=swa,van,tar_van,tar_van_pool,streamingvlm,streamingtom compress.budget=144 benchmark.options.background_rows=1 'benchmark.options.grid=[4,4]' model.max_pixels=4096  # 6
  sweep compress=full compress.budget=null benchmark.options.background_rows=1 'benchmark.options.grid=[4,4]' model.max_pixels=4096
}

# The three streams' videos first: the lanes would otherwise write the same folders at the same time.
generate benchmark.seed=0
generate benchmark.seed=1
generate benchmark.options.background_rows=1 'benchmark.options.grid=[4,4]' model.max_pixels=4096
run_study
