#!/bin/sh
# The Debian packages of a build, installed into an empty root: what `make package` builds must install, run and
# remove. ctest runs it (label package).
#   scripts/package-test.sh BUILD_DIR
# It builds the packages with CPack into a temporary folder, installs them with dpkg into a fresh root
# (--root, its own package database; the libraries it depends on are this machine's, hence --force-depends), runs
# the installed gridnode --help and check-config on the installed default config, checks the files the package
# puts in place, and removes it again. Needs root (dpkg); exits 77 (skipped) without it.
set -eu
build=$(cd "${1:?usage: package-test.sh BUILD_DIR}" && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "skipped: installing a package with dpkg needs root"
  exit 77
fi
work=$(mktemp -d /tmp/gridtrain-package-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "error: package-test: $*" >&2
  exit 1
}

(cd "$build" && cpack -G DEB -B "$work/packages" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack failed"; }
deb=$(find "$work/packages" -maxdepth 1 -name 'gridtrain_*.deb' | head -n 1)
[ -n "$deb" ] || fail "cpack made no gridtrain_*.deb"
echo "built: $(find "$work/packages" -maxdepth 1 -name '*.deb' -printf '%f ')"
dpkg-deb --field "$deb" Package Version Depends | sed 's/^/  /'

root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
: >"$root/var/lib/dpkg/status"
# The maintainer scripts run outside the empty root (it has no shell); they see DPKG_ROOT and leave systemd alone.
dpkg --root="$root" --force-depends --force-script-chrootless -i "$work"/packages/*.deb >"$work/dpkg.log" 2>&1 ||
  { cat "$work/dpkg.log"; fail "dpkg -i failed"; }

[ -x "$root/usr/bin/gridnode" ] || fail "no /usr/bin/gridnode"
help=$("$root/usr/bin/gridnode" --help) || fail "the installed gridnode --help failed"
echo "$help" | grep -q "Subcommands:" || fail "gridnode --help printed no subcommands"
echo "installed gridnode --help: $(echo "$help" | head -n 1)"
"$root/usr/bin/gridnode" check-config "$root/etc/gridtrain/cluster.yaml" --set cluster.token_file= >/dev/null ||
  fail "the installed default config does not validate"
for f in /usr/lib/gridtrain/gridtrain-boot /usr/lib/gridtrain/gridtrain-node /usr/lib/gridtrain/discover-aws-seeds \
    /usr/lib/gridtrain/spot-watch; do
  [ -x "$root$f" ] || fail "$f is missing or not executable"
done
for f in /usr/lib/systemd/system/gridnode.service /usr/lib/systemd/system/gridtrain-spot-watch.service \
    /usr/share/man/man1/gridnode.1.gz /etc/gridtrain/cluster.yaml; do
  [ -f "$root$f" ] || fail "$f is missing"
done
[ -d "$root/var/lib/gridtrain" ] || fail "/var/lib/gridtrain is missing"
gzip -dc "$root/usr/share/man/man1/gridnode.1.gz" | grep -q '^\.SS "gridnode run"' || fail "the man page has no run section"
conffiles=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Conffiles}' gridtrain)
echo "$conffiles" | grep -q /etc/gridtrain/cluster.yaml || fail "/etc/gridtrain/cluster.yaml is not a conffile"
echo "installed into an empty root: $(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Package} ${Version}, ' | sed 's/, $//')"

# The Python package, where the build has one: imported from where it was installed, by Debian's python3, and a node
# of it started on loopback with the installed default config, averaging a tiny torch model alone.
python_deb=$(find "$work/packages" -maxdepth 1 -name 'python3-gridtrain_*.deb' | head -n 1)
if [ -n "$python_deb" ]; then
  site=$root/usr/lib/python3/dist-packages
  [ -f "$site/gridtrain/__init__.py" ] || fail "python3-gridtrain installed no gridtrain package"
  ls "$site"/gridtrain/_gridtrain.cpython-*.so >/dev/null 2>&1 || fail "python3-gridtrain installed no module"
  PYTHONPATH=$site PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 - "$root/etc/gridtrain/cluster.yaml" "$site" <<'PYTHON' ||
import sys
import gridtrain
assert gridtrain.__file__.startswith(sys.argv[2]), f"imported {gridtrain.__file__}, not the installed package"
print("imported", gridtrain.__file__)
try:
    import torch
except ImportError:
    print("python3-torch is not installed: gridtrain.torch left out")
    sys.exit(0)
import gridtrain.torch
with gridtrain.Node(sys.argv[1], listen="127.0.0.1:0", seed="",
                    overrides={"cluster.token_file": "", "metrics.listen": "", "metrics.log_level": "warn"}) as node:
    averager = gridtrain.torch.ElasticAverager(node, torch.nn.Linear(4, 2))
    for _ in range(3):
        averager.step(samples=1)
    print("a node of the installed package averaged alone:", node.address, averager.steps, "steps")
PYTHON
    fail "the installed python3-gridtrain did not import or run"
fi

dpkg --root="$root" --force-depends --force-script-chrootless -r python3-gridtrain gridtrain-cuda gridtrain \
  >"$work/dpkg-r.log" 2>&1 ||
  { cat "$work/dpkg-r.log"; fail "dpkg -r failed"; }
[ ! -e "$root/usr/bin/gridnode" ] || fail "gridnode is still there after dpkg -r"
[ ! -e "$root/usr/lib/python3/dist-packages/gridtrain" ] || fail "the gridtrain Python package is still there after dpkg -r"
echo "removed: ok"
