#!/usr/bin/env bash
# The field's CPU study of experiments/cpu_peers.yaml, whole: 47 runs in two lanes (one core each), then its tables.
# Lane A: the 1/8 rows on the plain stream, seeds 0 and 1 (23 runs); lane B: the INT4 row at 1/8, the 1/4 rows and
# the 1/8 rows on the background stream kind (24 runs). tests/results/test_peer_experiments.py composes and checks
# every `sweep` line below.
# Usage: bash experiments/cpu_peers.sh   (from the repository root, after `make install`)
# Time: not measured yet. At cpu_symbolic's measured rates on an idle 2-core VM (results/cpu_symbolic/README.md:
# ~3.7 min per FP16 run and ~4.6 min per INT4 run of 200 questions per lane, 4-5 min per full-cache run) the lanes
# come to ~88 and ~92 min; the peer methods' and the background kind's (16 tokens a frame, not 12) rates are not
# measured, so the study's log (below) is the figure to quote.
# Each lane is a sequence of Hydra sweeps; a killed study resumes where it stopped when run again (each sweep job
# resumes its own run directory under results/runs/cpu_peers). Wall times go to results/runs/cpu_peers/study.log.
set -euo pipefail
cd "$(dirname "$0")/.."
EXPERIMENT=cpu_peers
source experiments/study.sh

lane_a() {
  sweep compress.budget=144                                                                     # 10: FP16 at 1/8
  sweep compress=full compress.budget=null                                                      # the full cache
  sweep compress.budget=144 benchmark.seed=1                                                    # 10: seed 1
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib=3.3921 benchmark.seed=1
  sweep compress=full compress.budget=null benchmark.seed=1
}

lane_b() {
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib=3.3921        # INT4, 1/8 bytes
  sweep compress.budget=288                                                                     # 10: FP16 at 1/4
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
