#!/usr/bin/env bash
# The partition cases, in the suite: `gridnode chaos --partitions` with 6 probe nodes and 6 faults, a kill, stop or
# restart before each of three cuts of the network: one node from the rest, a minority of 2 from a majority of 4
# (with the GridMaster's node), two halves of 3 (neither side may elect). It passes when the run exits 0 (every
# fault recovered, no two GridMasters at once, no election without a majority) and it reports each cut, its heal,
# and no split brain. The 30-minute run is `make chaos` with CHAOS_ARGS=--partitions, not part of `make test`.
# Needs root and network namespaces: skipped (exit 77) where it cannot make them.
#
#   tests/app/chaos_partitions.sh BUILD_DIR
set -euo pipefail

build=$(cd "${1:?usage: tests/app/chaos_partitions.sh BUILD_DIR}" && pwd)
[ -x "$build/gridnode" ] || { echo "error: $build/gridnode: not built" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "skipped: network namespaces need root"; exit 77; }
probe=gtprobe$$
ip netns add "$probe" 2> /dev/null || { echo "skipped: cannot make a network namespace here"; exit 77; }
ip netns del "$probe"

out=$(mktemp -d /tmp/gridtrain-partitions-XXXXXX)
chaos_pid=""
cleanup() {
  local rc=$?
  if [ -n "$chaos_pid" ] && kill -0 "$chaos_pid" 2> /dev/null; then
    kill -TERM "$chaos_pid" 2> /dev/null || true
    sleep 2
    kill -KILL "$chaos_pid" 2> /dev/null || true
  fi
  # The lab's namespaces (named after the chaos process), had it no chance to delete them itself.
  if [ -n "$chaos_pid" ]; then
    for ns in $(ip netns list | awk -v p="gtc$chaos_pid-" 'index($1, p) == 1 { print $1 }'); do
      for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null || true; done
      ip netns del "$ns" 2> /dev/null || true
    done
  fi
  rm -rf "$out"
  exit "$rc"
}
trap cleanup EXIT

"$build/gridnode" chaos --partitions --nodes 6 --faults 6 --every 6 --cut-seconds 8 --random-seed 3 \
  --set learner.kind=probe --set learner.probe_floats=10000 --out "$out/run" > "$out/log" 2>&1 &
chaos_pid=$!
status=0
wait "$chaos_pid" || status=$?
grep -v '^\[node' "$out/log"
fail() {
  echo "error: $*" >&2
  for f in "$out"/run/node-*.log; do [ -e "$f" ] && { echo "--- $f (last 20 lines)"; tail -n 20 "$f"; }; done
  exit 1
}
[ "$status" = 0 ] || fail "gridnode chaos --partitions exited $status"
for kind in "one node from the rest" "a minority from a majority" "two halves"; do
  grep -q "cut $kind" "$out/log" || fail "no cut of $kind"
done
[ "$(grep -c '^chaos: one grid again after' "$out/log")" = 3 ] || fail "not every cut healed into one grid"
grep -q "^split brain: 0 sweeps with two GridMasters answering, 0 cuts with a GridMaster elected without a majority" \
  "$out/log" || fail "split brain"
if ip netns list | grep -q "^gtc$chaos_pid-"; then fail "the run left its namespaces behind"; fi
echo "chaos_partitions: passed"
