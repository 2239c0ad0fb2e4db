#!/usr/bin/env bash
# Runs every fuzz target of a GRIDTRAIN_FUZZ build (libFuzzer) for SECONDS each and prints what each did.
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]
# Each target starts from its corpus in tests/fuzz/corpus/NAME, copied to BUILD_DIR/fuzz-corpus/NAME, where
# libFuzzer adds what it finds (the repository's corpus stays small). A crash leaves its input as
# BUILD_DIR/fuzz-crashes/NAME/crash-*, and the script fails.
set -euo pipefail
build=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(config idx checkpoint handshake frame messages ports)
here=$(cd "$(dirname "$0")/.." && pwd)
failed=0
for t in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$t"
  crashes="$build/fuzz-crashes/$t"
  mkdir -p "$corpus" "$crashes"
  cp -n "$here/tests/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null || true
  log="$build/fuzz-$t.log"
  if ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" \
      -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1; then
    verdict="no crash"
  else
    verdict="FAILED (see $log and $crashes)"
    failed=1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  echo "fuzz_$t: $runs executions in $seconds s, coverage $cov edges, corpus $(ls "$corpus" | wc -l) inputs: $verdict"
done
exit $failed
