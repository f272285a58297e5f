#!/usr/bin/env bash
# The robustness study of experiments/robustness.yaml: every method at |M| = 144 on seed 0 (200 questions) on each
# setting that removes one artifact of the symbolic benchmark, in two lanes (one core each). The fair study's
# development phase comes first (bash experiments/fair_peers.sh dev): the tuned rows are the ones its rule chose.
# Usage: bash experiments/robustness.sh   (from the repository root, after `make install`)
# Time: ~7 min per 200-question run per core on a 2-core VM (MuKV ~16 min; the background setting's 24-token frames
# about twice that), ~60 runs, then the INT4 field on the kind-cue setting (11 runs): the study spans sittings. Every
# sweep resumes its own run directories under results/runs/robustness; commit them at the end of a sitting as
# experiments/study.sh says. Wall times go to study.log. tests/results/test_fair_peers.py composes every `sweep` line
# below and checks that the lanes fill every row of the table once.
set -euo pipefail
cd "$(dirname "$0")/.."
EXPERIMENT=robustness
source experiments/study.sh

SETTINGS=(cue lengths background)
cue=(benchmark.options.answer_cue=kind)
lengths=('benchmark.options.needle_frames=[3,6]')
background=('benchmark.options.grid=[6,4]' benchmark.options.background_rows=3 model.max_pixels=6144)
# the rows the README's findings rest on run first on every setting, so a study stopped part-way has already tested
# them: InfiniPot-V in FP16 and in INT4 at equal bytes (lane a), VaN and the sliding window (lane b)
FIRST_A=compress=tar_van_pool
FIRST_B=compress=van,swa
# then the rest of the fair study's methods, in halves (experiments/fair_peers.sh), the lighter half with the full cache
REST_A=compress=tar_van,van_pool,rekv,livevlm
REST_B=compress=streamkv,weavetime,mukv,streammem,streamingvlm,streamingtom
TUNED=(swa van tar_van van_pool tar_van_pool rekv livevlm streamkv weavetime mukv streammem streamingtom)
EQUAL_BYTES=(quant=int4 compress.budget=null compress.budget_mib=3.3921)
# the INT4 field on the kind-cue setting (issue 57): every method that takes KIVI at |M| = 144's FP16 bytes
INT4_FIELD=("${EQUAL_BYTES[@]}" label=upstream "${cue[@]}")

setting() {  # the overrides of setting $1
  local -n overrides=$1
  printf '%s\n' "${overrides[@]}"
}

tuned() {  # the fair study's chosen overrides of method $1 (empty: its rule kept the default)
  "$PY" -m infinipotv.results.tuning fair_peers --overrides "$1"
}

lane_a() {
  local name
  for name in "${SETTINGS[@]}"; do
    mapfile -t s < <(setting "$name")
    sweep "$FIRST_A" label=upstream "${s[@]}"
    sweep compress=tar_van_pool "${EQUAL_BYTES[@]}" label=upstream "${s[@]}"
  done
  for name in "${SETTINGS[@]}"; do
    mapfile -t s < <(setting "$name")
    sweep "$REST_A" label=upstream "${s[@]}"
    sweep compress=full compress.budget=null label=upstream "${s[@]}"
  done
  for_tuned 0
  sweep compress=swa,van,tar_van,van_pool,rekv,livevlm "${INT4_FIELD[@]}"
}

lane_b() {
  local name
  for name in "${SETTINGS[@]}"; do
    mapfile -t s < <(setting "$name")
    sweep "$FIRST_B" label=upstream "${s[@]}"
  done
  for name in "${SETTINGS[@]}"; do
    mapfile -t s < <(setting "$name")
    sweep "$REST_B" label=upstream "${s[@]}"
  done
  for_tuned 1
  sweep compress=streamkv,weavetime,mukv,streammem,streamingvlm "${INT4_FIELD[@]}"
}

for_tuned() {  # lane $1 of 2: each of its half of the methods the fair study's rule retuned, on every setting
  local i=0 method chosen name
  for method in "${TUNED[@]}"; do
    i=$((i + 1))
    [ $((i % 2)) -eq "$1" ] || continue
    chosen=$(tuned "$method")
    [ -n "$chosen" ] || continue
    for name in "${SETTINGS[@]}"; do
      mapfile -t s < <(setting "$name")
      # shellcheck disable=SC2086  # the chosen overrides are words
      sweep compress="$method" $chosen label=tuned "${s[@]}"
    done
  done
}

main() {
  local name
  for name in "${SETTINGS[@]}"; do
    mapfile -t s < <(setting "$name")
    generate "${s[@]}"
  done
  run_study
}

main
