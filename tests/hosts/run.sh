#!/usr/bin/env bash
# The boot path across hosts (make test-hosts): each "host" is a network namespace with an address of its own,
# cabled by a veth to a bridge that lives in a namespace of its own too, so the test's traffic never touches this
# machine's own network. Each host runs deploy/boot/gridtrain-boot --foreground, the script the AWS user data runs,
# with the seed list given as the discovery result (the group's machines, oldest first). Then:
#   1. three hosts boot at once and form one cluster, and train (Fashion-MNIST, the demo's MLP);
#   2. scale-in: host 3's node gets SIGTERM (what an instance's shutdown sends its unit) and leaves cleanly;
#   3. scale-out: a new host 4 boots with the machines there are now, joins, copies a model and averages;
#   4. training goes on: rounds and samples grow on every member, and /metrics answers with them;
#   5. a crash: host 2's node is killed (kill -9); the boot loop starts it again, as the unit would, and it
#      resumes its progress from its checkpoint, rejoins, and averages again.
# Every process started is stopped by PID, and every namespace deleted, on success and on failure.
#
#   tests/hosts/run.sh BUILD_DIR        (root; iproute2; the Fashion-MNIST package)
set -euo pipefail

build=$(cd "${1:?usage: tests/hosts/run.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
gridnode=$build/gridnode
boot=$here/deploy/boot/gridtrain-boot
[ -x "$gridnode" ] || { echo "error: $gridnode: not built" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "error: test-hosts makes network namespaces: run it as root" >&2; exit 2; }
[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  { echo "error: Fashion-MNIST is not installed (Debian: dataset-fashion-mnist)" >&2; exit 2; }

id=$$
net=10.$((id % 200 + 20)).$((id / 200 % 250)).0
prefix=${net%.0}
bridge_ns=gt$id-br
work=$(mktemp -d /tmp/gridtrain-hosts-XXXXXX)
declare -A boot_pid=()
namespaces=()

log() { echo "test-hosts: $*"; }

cleanup() {
  local rc=$?
  for h in "${!boot_pid[@]}"; do kill -TERM "${boot_pid[$h]}" 2>/dev/null || true; done
  sleep 1
  for h in "${!boot_pid[@]}"; do
    pkill -KILL -s "${boot_pid[$h]}" 2>/dev/null || true  # the boot loop and its node share a session
  done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  if [ "$rc" != 0 ]; then
    for f in "$work"/host*.log; do [ -e "$f" ] && { echo "--- $f (last 30 lines)"; tail -n 30 "$f"; }; done
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

ip netns add "$bridge_ns"
namespaces+=("$bridge_ns")
ip -n "$bridge_ns" link add br0 type bridge
ip -n "$bridge_ns" link set br0 up

# A host: namespace gt<id>-h<N> with eth0 at <prefix>.<N>/24 on the bridge.
add_host() {
  local n=$1 ns=gt$id-h$1
  ip netns add "$ns"
  namespaces+=("$ns")
  ip link add "gt${id}h${n}" type veth peer name eth0 netns "$ns"
  ip link set "gt${id}h${n}" netns "$bridge_ns"
  ip -n "$bridge_ns" link set "gt${id}h${n}" master br0 up
  ip -n "$ns" addr add "$prefix.$n/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
}

# Boots host N with the machines `seeds` (host:port,... oldest first), as the user data would.
boot_host() {
  local n=$1 seeds=$2
  mkdir -p "$work/etc$n"
  setsid ip netns exec "gt$id-h$n" env GRIDTRAIN_RESTART_SECONDS=2 OPENBLAS_NUM_THREADS=1 \
    "$boot" --foreground --listen "$prefix.$n:7000" --seeds "$seeds" --config "$work/cluster.yaml" \
    --etc "$work/etc$n" --gridnode "$gridnode" --run-args "--name host$n --set metrics.listen=$prefix.$n:9100 --set checkpoint.dir=$work/ckpt$n --set checkpoint.every=100" \
    > "$work/host$n.log" 2>&1 &
  boot_pid[$n]=$!
}

# `gridnode status --json` asked of host N's node, from inside host N.
status_json() {
  ip netns exec "gt$id-h$1" "$gridnode" status --seed "$prefix.$1:7000" --config "$work/cluster.yaml" --json \
    2>/dev/null || true
}

# Waits up to $2 seconds for the check $1 (a command) to succeed.
wait_for() {
  local check=$1 seconds=$2 start=$SECONDS
  until eval "$check"; do
    if (( SECONDS - start >= seconds )); then return 1; fi
    sleep 0.5
  done
}

members_are() {  # host N sees exactly the hosts given (by address)
  local n=$1; shift
  local want got
  want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
  got=$(status_json "$n" | python3 -c 'import json,sys
try: print(" ".join(sorted(x["address"] for x in json.load(sys.stdin)["nodes"])))
except Exception: print("")' 2>/dev/null | tr -d '\n')
  [ "$got " = "$want" ]
}

metric() {  # host N's /metrics value of a series (first match)
  ip netns exec "gt$id-h$1" curl -s --max-time 5 "http://$prefix.$1:9100/metrics" |
    awk -v s="$2" 'index($1, s) == 1 && !found {print $2; found = 1}'
}

rounds_above() {  # host N's rounds in dimension 0 are above R (false while its /metrics does not answer)
  local r
  r=$(metric "$1" 'gridtrain_rounds_total{dim="0"')
  [ -n "$r" ] && [ "$r" -gt "$2" ]
}

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"
cat > "$work/cluster.yaml" <<YAML
# The multi-host test's cluster: the demo's MLP on Fashion-MNIST, elastic averaging, a token.
cluster:
  listen: 127.0.0.1:0
  token_file: $work/token
  heartbeat_ms: 200
  connection_timeout_ms: 2000
grid:
  dims: 1
allreduce:
  elastic_rate: 0.3
learner:
  kind: model
  device: cpu
  threads: 1
  epochs: 1000
  optimizer:
    learning_rate: 0.04
YAML

for n in 1 2 3; do add_host "$n"; done
# Host 1 cannot reach this machine's loopback or anything but the bridge.
if ip netns exec "gt$id-h1" ip route get 8.8.8.8 >/dev/null 2>&1; then
  echo "error: host 1 has a route out of the test's network" >&2; exit 1
fi

log "1. three hosts boot at once"
t0=$SECONDS
machines="$prefix.1:7000,$prefix.2:7000,$prefix.3:7000"
for n in 1 2 3; do boot_host "$n" "$machines"; done
wait_for "members_are 2 $prefix.1:7000 $prefix.2:7000 $prefix.3:7000" 90 ||
  { echo "error: the three hosts did not form one cluster"; exit 1; }
log "   one cluster of 3 after $((SECONDS - t0)) s (host 1, the oldest, bootstrapped it: $(grep -c 'bootstrapping' "$work/host1.log") time)"
grep -q "bootstrapping" "$work/host1.log" || { echo "error: host 1 did not bootstrap"; exit 1; }
wait_for "grep -q 'no checkpoint at $work/ckpt1/node-host1.ckpt yet: training from the start' '$work/host1.log'" 60 ||
  { echo "error: host 1's first start did not say that it trains from the start"; exit 1; }
for n in 2 3; do
  if grep -q "bootstrapping" "$work/host$n.log"; then echo "error: host $n bootstrapped a cluster of its own"; exit 1; fi
done
wait_for "[ \"\$(metric 1 gridtrain_samples_total)\" != '' ] && [ \"\$(metric 1 'gridtrain_rounds_total')\" != '' ]" 120 ||
  { echo "error: no metrics from host 1"; exit 1; }
rounds_before=$(metric 2 'gridtrain_rounds_total{dim="0"')
rounds_before=${rounds_before:-0}
log "   training: host 1's /metrics: samples $(metric 1 gridtrain_samples_total), rounds $(metric 1 'gridtrain_rounds_total{dim="0"')"

log "2. scale-in: host 3 is told to stop (SIGTERM)"
t1=$SECONDS
kill -TERM "${boot_pid[3]}"
rc=0
wait "${boot_pid[3]}" || rc=$?
unset 'boot_pid[3]'
[ "$rc" = 0 ] || { echo "error: host 3's boot script exited $rc"; exit 1; }
grep -q "leaving" "$work/host3.log" || { echo "error: host 3's node did not leave cleanly"; exit 1; }
ip netns del "gt$id-h3"
wait_for "members_are 1 $prefix.1:7000 $prefix.2:7000" 30 || { echo "error: host 3 is still listed"; exit 1; }
log "   cluster of 2 after $((SECONDS - t1)) s"

log "3. scale-out: host 4 boots with the machines there are now"
t2=$SECONDS
add_host 4
boot_host 4 "$prefix.1:7000,$prefix.2:7000,$prefix.4:7000"
wait_for "members_are 1 $prefix.1:7000 $prefix.2:7000 $prefix.4:7000" 90 || { echo "error: host 4 did not join"; exit 1; }
grep -q "warm start: copied the model" "$work/host4.log" || wait_for "grep -q 'warm start: copied the model' '$work/host4.log'" 30 ||
  { echo "error: host 4 did not copy a member's model"; exit 1; }
log "   cluster of 3 after $((SECONDS - t2)) s; host 4 copied a member's model"

log "4. training goes on"
wait_for "rounds_above 4 0" 120 ||
  { echo "error: host 4 runs no rounds"; exit 1; }
wait_for "rounds_above 2 $rounds_before" 60 ||
  { echo "error: host 2's rounds stopped"; exit 1; }
for n in 1 2 4; do
  log "   host $n: samples $(metric "$n" gridtrain_samples_total), rounds $(metric "$n" 'gridtrain_rounds_total{dim="0"'), test accuracy $(metric "$n" gridtrain_test_accuracy)"
done

log "5. a crash: host 2's node is killed (kill -9); the boot loop starts it again"
wait_for "[ -s '$work/ckpt2/node-host2.ckpt' ]" 120 || { echo "error: host 2 wrote no checkpoint"; exit 1; }
node2=$(pgrep -f "^$gridnode run .*--name host2 " || true)
[ -n "$node2" ] || { echo "error: host 2's gridnode is not running"; exit 1; }
t3=$SECONDS
kill -KILL "$node2"
wait_for "grep -q 'resumed from $work/ckpt2/node-host2.ckpt at step [1-9]' '$work/host2.log'" 60 ||
  { echo "error: host 2's node did not resume from its checkpoint"; exit 1; }
wait_for "members_are 1 $prefix.1:7000 $prefix.2:7000 $prefix.4:7000" 60 || { echo "error: host 2 did not rejoin"; exit 1; }
rounds_restarted=$(metric 2 'gridtrain_rounds_total{dim="0"')
wait_for "rounds_above 2 ${rounds_restarted:-0}" 60 ||
  { echo "error: host 2 runs no rounds after its restart"; exit 1; }
log "   $(grep -o 'resumed from .* at step [0-9]*' "$work/host2.log" | tail -n 1); back in the cluster and averaging after $((SECONDS - t3)) s"
log "PASS"
