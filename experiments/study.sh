# What the CPU studies' scripts share (sourced by experiments/cpu_symbolic.sh and cpu_peers.sh, never run alone):
# one core per lane, a timed Hydra sweep per line, the two lanes run side by side, the wall times and the commit in
# the study's log, then its runs compacted for git and its tables. Set EXPERIMENT and define lane_a and lane_b
# before calling run_study (or call run_lanes with two lane functions of its own, as fair_peers.sh does).
# The runs are committed: results/runs/$EXPERIMENT/ is where they are written and what git keeps, in compact form
# (python -m infinipotv.results.compact: config, provenance, predictions, metrics; a finished run's step trace trimmed
# to one video; its own .gitignore keeps the rest out; refused over 30 MiB). A study may span sittings: stop it, run
# `python -m infinipotv.results.compact $EXPERIMENT`, commit results/runs/$EXPERIMENT, and the next sitting (this script
# again, on any clone) skips the finished runs as committed and resumes the unfinished ones. From a fresh clone,
# `python -m infinipotv.results $EXPERIMENT --force` re-renders every table and figure without running anything.
set -euo pipefail
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
LOG=results/runs/$EXPERIMENT/study.log
mkdir -p "$(dirname "$LOG")"

sweep() {  # one Hydra sweep of the study, timed
  local start=$SECONDS
  "$PY" run.py -m +experiment="$EXPERIMENT" "$@" >/dev/null
  echo "$(date -u +%FT%TZ) $((SECONDS - start)) s: $*" >>"$LOG"
}

generate() {  # one stream's videos, before the lanes (they would otherwise write the same folders at once)
  "$PY" -m infinipotv.data.check +experiment="$EXPERIMENT" "$@" >/dev/null
}

run_lanes() {  # two lane functions side by side, timed and logged with the commit (its -dirty by provenance.json's
  # own rule, asked of infinipotv.runs.provenance). Both lanes are waited for; then a failed lane fails the study, so
  # nothing is compacted or rendered while a lane still runs or after one failed.
  local start=$SECONDS a b failed=()
  echo "$(date -u +%FT%TZ) $1 + $2 start at $("$PY" -m infinipotv.runs.provenance --short)" >>"$LOG"
  "$1" & a=$!
  "$2" & b=$!
  wait "$a" || failed+=("$1")
  wait "$b" || failed+=("$2")
  echo "$(date -u +%FT%TZ) $1 + $2 done: $((SECONDS - start)) s wall for the runs${failed[*]:+; failed: ${failed[*]}}" >>"$LOG"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "error: lane ${failed[*]} of $EXPERIMENT failed (its last sweep's error is above); the study stops before compacting or rendering: fix it and run the script again (finished runs are kept and resumed)" >&2
    return 1
  fi
}

run_study() {  # lane_a and lane_b side by side, then the runs compacted for git and the tables
  run_lanes lane_a lane_b
  "$PY" -m infinipotv.results.compact "$EXPERIMENT"
  "$PY" -m infinipotv.results "$EXPERIMENT" --force
}
