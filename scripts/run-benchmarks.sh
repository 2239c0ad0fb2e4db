#!/usr/bin/env bash
# Runs every benchmark and prints its figures (`make bench`). Long: minutes, not part of `make test`.
# Usage: scripts/run-benchmarks.sh [BUILD_DIR] [NAME...]   (NAME: grid_moves, learner_gflops, convergence, ...)
set -euo pipefail
build=${1:-build}
shift || true
cd "$(dirname "$0")/.."

selected=("$@")
want() { [ ${#selected[@]} -eq 0 ] && return 0; local n; for n in "${selected[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1; }
run() {
  local name=$1; shift
  want "$name" || return 0
  echo "=== $name: $*"
  "$@"
  echo
}

run grid_moves "$build/bench/bench_grid_moves"
run learner_gflops "$build/bench/bench_learner_gflops"
run convergence "$build/bench/bench_convergence" --epochs 10
run allreduce_compare bench/allreduce_compare "$build"
run round_passes "$build/bench/bench_round_passes"
run control_plane bench/control_plane_scale "$build"
run overlap bench/overlap "$build" 2 6                       # the default pacing, allreduce.cpu_share
