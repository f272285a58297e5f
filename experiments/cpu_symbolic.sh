#!/usr/bin/env bash
# The CPU study of experiments/cpu_symbolic.yaml, whole: 32 runs in two lanes (one core each), then its tables.
# The budget curve's FP16 rows at |M| = 288 (1/4 of a stream, 6 runs) are split over the two lanes; CURVE=0 skips
# them (26 runs).
# Usage: bash experiments/cpu_symbolic.sh   (from the repository root, after `make install`; ~70 min on 2 cores)
# Each lane is a sequence of Hydra sweeps; a killed study resumes where it stopped when run again (each sweep job
# resumes its own run directory under results/runs/cpu_symbolic). Wall times go to results/runs/cpu_symbolic/study.log.
set -euo pipefail
cd "$(dirname "$0")/.."
EXPERIMENT=cpu_symbolic
source experiments/study.sh

lane_a() {
  sweep compress.budget=144                                                # 6: FP16 at 1/8
  sweep compress=full compress.budget=null                                 # the full cache
  sweep compress.budget=144 benchmark.seed=1                               # 6: FP16 at 1/8, seed 1
  sweep compress=full compress.budget=null benchmark.seed=1                # the full cache, seed 1
  curve compress=swa,uniform_frames,random                                 # 3: FP16 at 1/4
}

lane_b() {
  sweep quant=int4 compress.budget=144                                     # 6: INT4 at equal tokens
  sweep quant=int4 compress.budget=null compress.budget_mib=3.3921         # 6: INT4 at equal bytes
  curve compress=tar,van,tar_van_pool                                      # 3: FP16 at 1/4
}

curve() {  # the budget curve: FP16 at |M| = 288, unless CURVE=0
  if [ "${CURVE:-1}" = 1 ]; then sweep compress.budget=288 "$@"; fi
}

# Both seeds' videos first: the lanes would otherwise write the same folders at the same time.
generate benchmark.seed=0
generate benchmark.seed=1
run_study
