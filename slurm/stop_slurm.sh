#!/usr/bin/env bash
# Stop the daemons slurm/start_slurm.sh started (listed in /run/local-slurm/started), by the pid in each daemon's
# pid file, in reverse start order; daemons it found already running (a system munged, say) are left alone.
# Idempotent. Jobs still in the queue are cancelled first, so no job process outlives slurmd.
# The next fresh start wipes the old job state and accounting records itself.
set -uo pipefail

STATE=/run/local-slurm
log() { echo "[stop_slurm $(date +%T)] $*"; }
# A killed daemon stays a zombie until PID 1 reaps it: a pid counts as running only when it is not one.
running() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
# alive PIDFILE COMM: the pid file names a running process of that program (not a stale file or a reused pid).
alive() { local p; p=$(cat "$1" 2>/dev/null) || return 1; running "$p" && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ]; }
ours() { grep -qx "$1" "$STATE/started" 2>/dev/null; }

# stop PIDFILE COMM: SIGTERM, up to 30 s to exit, then SIGKILL.
stop() {
  local pf=$1 comm=$2 p
  ours "$comm" || return 0
  if alive "$pf" "$comm"; then
    p=$(cat "$pf")
    log "stopping $comm (pid $p)"
    kill -TERM "$p"
    for _ in $(seq 60); do running "$p" || break; sleep 0.5; done
    if running "$p"; then log "$comm (pid $p) ignored SIGTERM for 30 s: SIGKILL"; kill -KILL "$p" 2>/dev/null; fi
  else
    log "$comm is not running"
  fi
  sed -i "/^$comm\$/d" "$STATE/started"
}

if [ ! -s "$STATE/started" ]; then log "nothing to stop: start_slurm.sh started no daemon here"; exit 0; fi
if ours slurmctld && alive /run/slurmctld.pid slurmctld; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs: $jobs"
    scancel $jobs 2>/dev/null
    for _ in $(seq 60); do [ -z "$(squeue -h -t running,completing -o %i 2>/dev/null)" ] && break; sleep 0.5; done
  fi
fi
stop /run/slurmd.pid slurmd
stop /run/slurmctld.pid slurmctld  # its child slurmscriptd exits with it
stop /run/slurmdbd.pid slurmdbd
stop /run/mysqld/mysqld.pid mariadbd
stop /run/munge/munged.pid munged
log "done"
