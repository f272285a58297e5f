#!/usr/bin/env bash
# The field's CPU study of experiments/cpu_peers.yaml, whole: 42 runs in two lanes (one core each), then its tables.
# Lane A: the 1/8 rows on the plain stream, seeds 0 and 1 (24 runs); lane B: the 1/4 rows and the 1/8 rows on the
# background stream kind (18 runs). The 1/4 rows are trimmed to six runs so that the study fits 150 minutes on two
# cores (issue 34): sliding window, VaN and InfiniPot-V (FP16 and INT4 at equal bytes), ReKV and LiveVLM; the full
# cache is budget-free, so the 1/8 lines' run serves both. tests/results/test_peer_experiments.py composes and checks
# every `sweep` line below.
# Usage: bash experiments/cpu_peers.sh   (from the repository root, after `make install`)
# Time: planned from a one-video smoke run of every line on a 2-core VM (15-26 s a video and method, StreamMem the
# slowest): ~115-125 min a lane; the study's log (below) holds the measured figure.
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
  sweep compress.budget=144 benchmark.seed=1                                                    # 10: seed 1
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib=3.3921 benchmark.seed=1
  sweep compress=full compress.budget=null benchmark.seed=1
}

lane_b() {
  sweep compress=swa,van,tar_van_pool,rekv,livevlm compress.budget=288                          # 5: FP16 at 1/4
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib=6.6056        # INT4, 1/4 bytes
  sweep compress.budget=144 benchmark.options.background_rows=1 'benchmark.options.grid=[4,4]' model.max_pixels=4096  # 10: background
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib=3.3921 benchmark.options.background_rows=1 'benchmark.options.grid=[4,4]' model.max_pixels=4096
  sweep compress=full compress.budget=null benchmark.options.background_rows=1 'benchmark.options.grid=[4,4]' model.max_pixels=4096
}

# The three streams' videos first: the lanes would otherwise write the same folders at the same time.
generate benchmark.seed=0
generate benchmark.seed=1
generate benchmark.options.background_rows=1 'benchmark.options.grid=[4,4]' model.max_pixels=4096
run_study
