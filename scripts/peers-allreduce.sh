#!/usr/bin/env bash
# Runs the allreduce comparison peers (bench/peers/: Gloo over loopback TCP, OpenMPI over TCP and shared memory)
# for each process count and prints their CSV lines:
#   <peer>,<algorithm|transport>,<procs>,<bytes>,<seconds_per_iteration>,<algbw_GBps>,<busbw_GBps>,ok
# Usage: scripts/peers-allreduce.sh BUILD_DIR "2,4" "1024,65536,1048576,16777216" [SECONDS]
#   (SECONDS: timed seconds per size and algorithm, default 3). Exits non-zero if a peer fails or a sum check
#   fails. A peer that was not built (library missing) is skipped with a note on stderr.
# STRAGGLE=STOP_MS,PERIOD_MS in the environment makes the last rank a straggler: SIGSTOP for STOP_MS of every
# PERIOD_MS while it runs (bench/straggler).
set -euo pipefail

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  echo "usage: $0 BUILD_DIR PROCS SIZES [SECONDS]   e.g. $0 build \"2,4\" \"1024,1048576\" 3" >&2
  exit 2
fi
build=$1
procs=$2
sizes=$3
seconds=${4:-3}
gloo="$build/bench/peers/bench_gloo_allreduce"
mpi="$build/bench/peers/bench_mpi_allreduce"

pids=()      # Gloo ranks still to reap; killed by PID if we stop early
tmpdirs=()
stop_peers() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
  stop_straggle
  stop_peers
  [ ${#tmpdirs[@]} -eq 0 ] || rm -rf "${tmpdirs[@]}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # runs the EXIT trap

failed=0

# The straggler's duty cycle, on `$1`, in the background; its PID goes to `duty`. Ends when the rank does.
duty=""
straggle() {
  [ -n "${STRAGGLE:-}" ] || return 0
  local stop_ms=${STRAGGLE%,*} period_ms=${STRAGGLE#*,} victim=$1
  (
    while kill -STOP "$victim" 2> /dev/null; do
      sleep "$(awk -v m="$stop_ms" 'BEGIN { print m / 1000 }')"
      kill -CONT "$victim" 2> /dev/null || break
      sleep "$(awk -v m="$((period_ms - stop_ms))" 'BEGIN { print m / 1000 }')"
    done
  ) &
  duty=$!
}
stop_straggle() {
  [ -n "$duty" ] || return 0
  kill "$duty" 2> /dev/null || true
  wait "$duty" 2> /dev/null || true
  duty=""
}
# Prints a peer's CSV output and flags any line that is not a passed check.
emit() {
  local line
  while IFS= read -r line; do
    echo "$line"
    [[ $line == *,ok ]] || { echo "error: unexpected peer output: $line" >&2; failed=1; }
  done < "$1"
}

# Gloo: P processes sharing a fresh FileStore folder. Polls them so that the first one to fail stops the rest at
# once (otherwise the others would wait out Gloo's 30 s timeout).
run_gloo() {
  local p=$1 dir r pid rc alive
  dir=$(mktemp -d "${TMPDIR:-/tmp}/gloo-peers.XXXXXX")
  tmpdirs+=("$dir")
  pids=()
  for ((r = 0; r < p; r++)); do
    "$gloo" --rank "$r" --size "$p" --store "$dir/store" --floats "$sizes" --seconds "$seconds" --algorithm all \
      > "$dir/out.$r" &
    pids+=($!)
  done
  straggle "${pids[$((p - 1))]}"
  rc=0
  while [ ${#pids[@]} -gt 0 ] && [ $rc -eq 0 ]; do
    sleep 0.2
    alive=()
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then
        alive+=("$pid")
      else
        wait "$pid" || rc=$?
      fi
    done
    pids=("${alive[@]}")
  done
  stop_straggle
  if [ $rc -ne 0 ]; then
    echo "error: gloo with $p processes failed (exit $rc)" >&2
    stop_peers
    failed=1
  fi
  emit "$dir/out.0"   # what rank 0 measured before any failure is still valid
}

# OpenMPI: one mpirun per transport. Runs in the background so that the traps can stop it by PID.
run_mpi() {
  local p=$1 label=$2 dir rc=0
  shift 2
  local root=()
  [ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/mpi-peers.XXXXXX")
  tmpdirs+=("$dir")
  # Oversubscribed (more processes than cores) and unbound, so OpenMPI yields when idle instead of spinning. The
  # malloc tunables keep OpenMPI's per-call temporaries mapped, so large sizes do not measure page faults.
  mpirun "${root[@]}" -np "$p" --oversubscribe --bind-to none "$@" \
    -x GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4000000000 \
    "$mpi" --floats "$sizes" --seconds "$seconds" --label "$label" ${MPI_ROUND:+--elastic-rate "$MPI_ROUND"} \
    ${MPI_ROUND_CHUNK:+--round-chunk-floats "$MPI_ROUND_CHUNK"} > "$dir/out" &
  pids=($!)
  if [ -n "${STRAGGLE:-}" ]; then
    local victim=""
    for _ in $(seq 100); do
      # mpirun matches too; its ranks start after it, so the newest PID is a rank.
      victim=$(pgrep -f -- "$mpi" | sort -n | tail -1 || true)
      [ -n "$victim" ] && [ "$(pgrep -f -- "$mpi" | wc -l)" -gt "$p" ] && break
      sleep 0.1
    done
    [ -n "$victim" ] && straggle "$victim"
  fi
  wait "${pids[0]}" || rc=$?
  stop_straggle
  pids=()
  if [ $rc -ne 0 ]; then
    echo "error: mpi ($label) with $p processes failed (exit $rc)" >&2
    failed=1
  fi
  emit "$dir/out"
}

IFS=, read -r -a proc_list <<< "$procs"
for p in "${proc_list[@]}"; do
  if ! [[ $p =~ ^[1-9][0-9]*$ ]]; then echo "error: bad process count '$p'" >&2; exit 2; fi
done

for p in "${proc_list[@]}"; do
  if [ -x "$gloo" ]; then run_gloo "$p"; else echo "note: $gloo not built; skipping Gloo" >&2; fi
  if [ -x "$mpi" ]; then
    run_mpi "$p" tcp --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
    run_mpi "$p" shm --mca btl vader,self
    # The averaging round a training node runs (snapshot, allreduce, elastic update with α = 0.5), done with MPI
    # over TCP: the same job as a gridtrain round, where the rows above time a bare buffer reduction. Twice: the
    # whole model at once, and in pieces of gridtrain's chunk size (each piece's passes in the cache); the table
    # keeps the better.
    local_tcp=(--mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
    MPI_ROUND=0.5 run_mpi "$p" tcp-round "${local_tcp[@]}"
    MPI_ROUND=0.5 MPI_ROUND_CHUNK=262144 run_mpi "$p" tcp-round "${local_tcp[@]}"
  else
    echo "note: $mpi not built; skipping MPI" >&2
  fi
done
exit $failed
