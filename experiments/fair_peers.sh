#!/usr/bin/env bash
# The fair field study of experiments/fair_peers.yaml, in phases, two lanes (one core each) per phase:
#   dev    the development grid on seed 2 (100 questions, |M| = 144): every method's default and its `tuning` grid
#   tune   python -m infinipotv.results.tuning fair_peers: the rule picks each method's setting (tuning.md/.json)
#   m144   the |M| = 144 rows of seed 0 alone (upstream and tuned): the robustness study's default column
#          (experiments/robustness.sh), before the rest of the test phase
#   test   seed 0 at |M| = 72, 144, 288, 576 at the upstream split, then the tuned rows, INT4 at equal bytes, the
#          full cache, StreamingTOM at |M| = 576's bytes, seed 1 at |M| = 144, the check of each choice at
#          |M| = 288 on the development seed, and StreamKV's layer-adaptive retrieval counts (upstream's
#          retrieve_temp = 0.5) at its upstream split, and every method that takes KIVI in INT4 at |M| = 144's
#          FP16 bytes (the INT4 field)
#   tables python -m infinipotv.results fair_peers
# Usage: bash experiments/fair_peers.sh [dev|m144|test|all]   (from the repository root, after `make install`)
# Time: ~3.5 min per 100-question run and ~6.5 min per 200-question run per core on a 2-core VM: the development
# grid ~30 runs (~1 h), the test phase ~110 runs (~6 h), so the study spans sittings. Every sweep resumes its own run
# directories under results/runs/fair_peers, so running the script again continues where it stopped; commit the
# finished runs at the end of a sitting (python -m infinipotv.results.compact fair_peers, then git add
# results/runs/fair_peers: experiments/study.sh says how a later sitting resumes them). Wall times go to study.log.
# tests/results/test_fair_peers.py composes every `sweep` line below.
set -euo pipefail
cd "$(dirname "$0")/.."
EXPERIMENT=fair_peers
source experiments/study.sh

DEV=(benchmark.seed=2 benchmark.options.n_videos=10)
BUDGETS=(72 144 288 576)
MIB=(1.7853 3.3921 6.6056 13.0326)  # FP16 bytes of each budget + the prefix (experiments/fair_peers.yaml)
TUNED=(swa van tar_van van_pool tar_van_pool rekv livevlm streamkv weavetime mukv streammem streamingtom)

tuned() {  # the chosen overrides of method $1 (empty: the rule kept its default)
  "$PY" -m infinipotv.results.tuning "$EXPERIMENT" --overrides "$1"
}

dev_a() {
  sweep "${DEV[@]}"                                                                             # 13 defaults
  sweep compress=swa,tar_van_pool compress.c_ratio=0.5,0.625 "${DEV[@]}"
  sweep compress=van,tar_van,van_pool compress.c_ratio=0.5 "${DEV[@]}"
}

dev_b() {
  sweep compress=rekv,livevlm,streamkv,weavetime compress.c_ratio=0.25,0.75 "${DEV[@]}"
  sweep compress=weavetime compress.threshold=0,0.3,0.45 "${DEV[@]}"
  sweep compress=streammem compress.prototypes=false "${DEV[@]}"
  sweep compress=mukv compress.topk_segment=24 "${DEV[@]}"
  sweep compress=streamingtom compress.retain=2,6 "${DEV[@]}"
}

# The test lanes take the methods in halves, the |M| = 144 rows first, then 288 and 72, then the tuned rows at 144,
# so a sitting that stops early leaves whole columns and the headline table's tuned rows (each half's sweep crosses
# the line's budget with the half's methods); the tables' test checks the halves cover experiments/fair_peers.yaml's
# methods once.
HALF_A=compress=swa,van,tar_van,van_pool,tar_van_pool,rekv,livevlm
HALF_B=compress=streamkv,weavetime,mukv,streammem,streamingvlm,streamingtom
# StreamKV's upstream retrieval (issue 43): per-layer counts in [R/2, 3R/2] from the question's scores, the same
# total bytes; added after the test rows were run, so it runs last in both lanes.
ADAPTIVE=(compress=streamkv compress.retrieve_temp=0.5 label=adaptive)
# The field at equal bytes in INT4 (issue 57): every method that takes KIVI, in INT4 at |M| = 144's FP16 bytes, each
# paired against its own FP16 row (StreamingTOM refuses: its OQM is its own 4-bit store); added last in both lanes.
INT4_FIELD=(quant=int4 compress.budget=null compress.budget_mib=3.3921 label=upstream)

m144_a() {
  sweep "$HALF_A" label=upstream compress.budget=144
  for_tuned 0 tuned_at 144
}

m144_b() {
  sweep "$HALF_B" label=upstream compress.budget=144
  for_tuned 1 tuned_at 144
}

test_a() {
  for budget in 144 288 72; do
    sweep "$HALF_A" label=upstream compress.budget="$budget"
  done
  for_tuned 0 tuned_at 144
  sweep "$HALF_A" label=upstream compress.budget=576
  sweep compress=full compress.budget=null label=upstream
  for i in 0 1 2 3; do
    sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib="${MIB[$i]}" label=upstream
  done
  for_tuned 0 tuned_at 72,288,576
  for_tuned 0 tuned_check
  sweep "$HALF_A" label=upstream compress.budget=144 benchmark.seed=1
  sweep compress=full compress.budget=null label=upstream benchmark.seed=1
  sweep "${ADAPTIVE[@]}" compress.budget=144
  sweep "${ADAPTIVE[@]}" compress.budget=144 benchmark.seed=1
  sweep compress=swa,van,tar_van,van_pool,rekv,livevlm "${INT4_FIELD[@]}"
}

test_b() {
  for budget in 144 288 72; do
    sweep "$HALF_B" label=upstream compress.budget="$budget"
  done
  for_tuned 1 tuned_at 144
  sweep "$HALF_B" label=upstream compress.budget=576
  # StreamingTOM at the bytes of |M| = 576: its OQM keeps every frame (7.07 MiB at 96 frames, G = 3), so no |M|
  # meets the smaller budgets' bytes; 263 is the largest |M| whose peak stays under 13.0326 MiB (a one-video probe
  # of seed 0 measured 12.976 MiB at 263 and 13.042 MiB at 264; the run's Accel. MiB column is the proof)
  sweep compress=streamingtom compress.budget=263 label=equal_bytes
  for_tuned 1 tuned_at 72,288,576
  for_tuned 1 tuned_check
  sweep "$HALF_B" label=upstream compress.budget=144 benchmark.seed=1
  sweep compress=tar_van_pool quant=int4 compress.budget=null compress.budget_mib="${MIB[1]}" label=upstream \
    benchmark.seed=1
  sweep "${ADAPTIVE[@]}" compress.budget=72,288,576
  sweep compress=streamkv,weavetime,mukv,streammem,streamingvlm "${INT4_FIELD[@]}"
}

for_tuned() {  # lane $1 of 2: for each of its half of the methods the development rule retuned, run "${@:2}" with
  # the method and its chosen overrides appended (a failing `tuned` stops the lane, as set -e does everywhere)
  local i=0 method chosen
  for method in "${TUNED[@]}"; do
    i=$((i + 1))
    [ $((i % 2)) -eq "$1" ] || continue
    chosen=$(tuned "$method")
    [ -n "$chosen" ] || continue
    # shellcheck disable=SC2086  # the chosen overrides are words
    "${@:2}" "$method" $chosen
  done
}

tuned_at() {  # budgets $1 (comma-separated), method $2, its chosen overrides: the tuned rows of seed 0
  local budgets=$1 method=$2
  shift 2
  sweep compress="$method" "$@" label=tuned compress.budget="$budgets"
}

tuned_check() {  # method $1, its chosen overrides: the choice beside the default at |M| = 288 on the dev seed, and
  # the tuned row on seed 1
  local method=$1
  shift
  sweep compress="$method" "$@" compress.budget=288 "${DEV[@]}"
  sweep compress="$method" compress.budget=288 "${DEV[@]}"
  sweep compress="$method" "$@" label=tuned compress.budget=144 benchmark.seed=1
}

phase=${1:-all}
case $phase in
  dev | m144 | test | all) ;;
  *)
    echo "error: unknown phase '$phase'; the phases: dev, m144, test, all (the default): bash experiments/fair_peers.sh [dev|m144|test|all]" >&2
    exit 2
    ;;
esac
generate benchmark.seed=0
generate "${DEV[@]}"
generate benchmark.seed=1
if [ "$phase" = dev ] || [ "$phase" = all ]; then
  run_lanes dev_a dev_b
  "$PY" -m infinipotv.results.tuning "$EXPERIMENT"
  "$PY" -m infinipotv.results.compact "$EXPERIMENT"
fi
if [ "$phase" = m144 ]; then
  run_lanes m144_a m144_b
  "$PY" -m infinipotv.results.compact "$EXPERIMENT"
fi
if [ "$phase" = test ] || [ "$phase" = all ]; then
  run_lanes test_a test_b
  "$PY" -m infinipotv.results.tuning "$EXPERIMENT"   # again: the check column, from the runs at |M| = 288
  "$PY" -m infinipotv.results.compact "$EXPERIMENT"
  "$PY" -m infinipotv.results "$EXPERIMENT" --force
fi
