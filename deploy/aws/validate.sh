#!/usr/bin/env bash
# Offline checks of the AWS deployment (no AWS account, no network): the template against cfn-lint and the
# CloudFormation resource specification, a broken template that must fail, the shell scripts (syntax, shellcheck
# when installed, the user data as CloudFormation renders it), and discover-aws-seeds and spot-watch against a
# stand-in metadata service and AWS CLI. Runs from any directory. Exit 0 when every check passes, 1 when one
# fails, 2 when the npm packages are not installed (npm ci --prefix deploy/aws).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here" || exit 2

for tool in node curl; do
  command -v "$tool" >/dev/null 2>&1 || { echo "error: validate.sh: $tool is not installed" >&2; exit 2; }
done
for package in cfn-lint @aws-cdk/cfnspec js-yaml; do
  if [ ! -d "node_modules/$package" ]; then
    echo "error: validate.sh: deploy/aws/node_modules lacks $package; install the pinned packages first:" >&2
    echo "  npm ci --prefix deploy/aws    (from the repository root)" >&2
    exit 2
  fi
done

template=gridtrain-asg.yaml
failures=0
tmp=$(mktemp -d)
imds_pid=""
cleanup() {
  [ -z "$imds_pid" ] || kill "$imds_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

pass() { echo "ok: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# check NAME COMMAND...: runs it, its output shown, and counts a failure.
check() {
  local name=$1
  shift
  if "$@"; then pass "$name"; else fail "$name"; fi
}

echo "== shell scripts"
node check-spec.mjs --user-data LaunchTemplate "$template" >"$tmp/user-data.sh" || fail "render the user data"
syntax() {
  local shell=$1 file
  shift
  for file in "$@"; do "$shell" -n "$file" || return 1; done
}
check "sh -n discover-aws-seeds spot-watch test/bin/*" \
  syntax sh discover-aws-seeds spot-watch test/bin/aws test/bin/fake-systemctl
check "bash -n validate.sh and the user data" syntax bash validate.sh "$tmp/user-data.sh"
if command -v shellcheck >/dev/null 2>&1; then
  check "shellcheck discover-aws-seeds spot-watch validate.sh test/bin/*" \
    shellcheck discover-aws-seeds spot-watch validate.sh test/bin/aws test/bin/fake-systemctl
  check "shellcheck the user data" shellcheck -s bash "$tmp/user-data.sh"
else
  echo "skip: shellcheck is not installed"
fi

echo "== template"
check "check-spec $template" node check-spec.mjs "$template"
check "cfn-lint $template" node check-spec.mjs --cfn-lint "$template" test/lint-parameters.json

echo "== the check can fail"
rc=0
node check-spec.mjs test/broken.yaml >"$tmp/broken.out" 2>&1 || rc=$?
if [ "$rc" -ne 1 ]; then
  cat "$tmp/broken.out"
  fail "check-spec test/broken.yaml exited $rc, expected 1"
elif ! diff -u test/broken.expected "$tmp/broken.out"; then
  fail "check-spec test/broken.yaml: its output differs from test/broken.expected"
else
  pass "check-spec test/broken.yaml fails with the $(grep -c '^error:' "$tmp/broken.out") expected problems"
fi

echo "== discover-aws-seeds and spot-watch against a stand-in metadata service"
node test/mock-imds.mjs 2 >"$tmp/imds.port" &
imds_pid=$!
for _ in $(seq 50); do
  [ -s "$tmp/imds.port" ] && break
  sleep 0.1
done
imds="http://127.0.0.1:$(head -n 1 "$tmp/imds.port")"

rc=0
PATH="$here/test/bin:$PATH" AWS_EC2_METADATA_SERVICE_ENDPOINT=$imds \
  ./discover-aws-seeds --port 7000 >"$tmp/seeds" 2>"$tmp/seeds.err" || rc=$?
if [ "$rc" -eq 0 ] && diff -u test/discover.expected "$tmp/seeds"; then
  pass "discover-aws-seeds lists the group's nodes oldest first"
else
  cat "$tmp/seeds.err"
  fail "discover-aws-seeds (exit $rc)"
fi

rc=0
PATH="$here/test/bin:$PATH" AWS_EC2_METADATA_SERVICE_ENDPOINT=$imds FAKE_AWS_FAIL=describe-auto-scaling-groups \
  ./discover-aws-seeds --port 7000 >"$tmp/seeds" 2>"$tmp/seeds.err" || rc=$?
if [ "$rc" -eq 1 ] && [ ! -s "$tmp/seeds" ] &&
  grep -q '^error: discover-aws-seeds: cannot describe' "$tmp/seeds.err"; then
  pass "discover-aws-seeds reports a failed AWS call: error line, exit 1, nothing on stdout"
else
  cat "$tmp/seeds" "$tmp/seeds.err"
  fail "discover-aws-seeds with a failing AWS call (exit $rc)"
fi

rc=0
AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:9 \
  ./discover-aws-seeds --port 7000 >/dev/null 2>"$tmp/seeds.err" || rc=$?
if [ "$rc" -eq 1 ] && grep -q '^error: discover-aws-seeds: no IMDSv2 token' "$tmp/seeds.err"; then
  pass "discover-aws-seeds off EC2: error line, exit 1"
else
  cat "$tmp/seeds.err"
  fail "discover-aws-seeds without a metadata service (exit $rc)"
fi

rc=0
FAKE_SYSTEMCTL_LOG="$tmp/systemctl.log" SPOT_WATCH_SYSTEMCTL="$here/test/bin/fake-systemctl" SPOT_WATCH_INTERVAL=1 \
  AWS_EC2_METADATA_SERVICE_ENDPOINT=$imds timeout 30 ./spot-watch >"$tmp/spot.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && [ "$(cat "$tmp/systemctl.log" 2>/dev/null)" = "stop gridnode.service" ]; then
  pass "spot-watch stops gridnode.service on an interruption notice"
else
  cat "$tmp/spot.out"
  fail "spot-watch on a spot instance (exit $rc)"
fi

rc=0
rm -f "$tmp/systemctl.log"
FAKE_SYSTEMCTL_LOG="$tmp/systemctl.log" SPOT_WATCH_SYSTEMCTL="$here/test/bin/fake-systemctl" SPOT_WATCH_INTERVAL=1 \
  AWS_EC2_METADATA_SERVICE_ENDPOINT=$imds/on-demand timeout 30 ./spot-watch >"$tmp/spot.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && [ ! -e "$tmp/systemctl.log" ]; then
  pass "spot-watch exits at once on an on-demand instance"
else
  cat "$tmp/spot.out"
  fail "spot-watch on an on-demand instance (exit $rc)"
fi

echo
if [ "$failures" -gt 0 ]; then
  echo "validate.sh: $failures check(s) failed"
  exit 1
fi
echo "validate.sh: all checks passed"
