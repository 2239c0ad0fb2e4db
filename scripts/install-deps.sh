#!/usr/bin/env bash
# Installs the Debian packages gridtrain needs, only those that are missing.
# Used by `make test`, `make demo`, `make fuzz` and CI; needs root (or sudo) when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev libyaml-cpp-dev libasio-dev doctest-dev libopenblas-dev libspdlog-dev libcli11-dev
  prometheus-cpp-dev zlib1g-dev nlohmann-json3-dev libssl-dev openssl
  libgloo-dev libopenmpi-dev openmpi-bin
  dataset-fashion-mnist gnuplot-nox
  python3-dev pybind11-dev python3-pybind11
)

# `install-deps.sh fuzz`: also clang, whose libFuzzer `make fuzz` links (the test suite's smoke runs use g++).
# `install-deps.sh test`: also what the test suite checks deployment with: shellcheck and curl, iproute2 (network
# namespaces, `make test-hosts`), python3-torch for the Python front end's tests, and npm for the CloudFormation
# template's linters (deploy/aws/package.json,
# installed below into deploy/aws/node_modules at the versions its lock file pins).
mode=${1:-}
if [ "$mode" = "fuzz" ]; then packages+=(clang); fi
if [ "$mode" = "test" ]; then
  # python3-torch: the Python front end's tests (Debian's PyTorch, CPU; its recommends are not needed).
  packages+=(shellcheck curl iproute2 python3-torch)
  command -v npm >/dev/null || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
npm_tools() {
  [ "$mode" = "test" ] || return 0
  local aws
  aws="$(cd "$(dirname "$0")/.." && pwd)/deploy/aws"
  [ -d "$aws/node_modules" ] && return 0
  echo "installing the CloudFormation linters (npm ci in deploy/aws)"
  npm ci --prefix "$aws" --no-audit --no-fund --loglevel=error
}
if [ ${#missing[@]} -eq 0 ]; then
  npm_tools
  exit 0
fi

echo "installing missing packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then sudo="sudo"; else
    echo "error: missing packages (${missing[*]}) and not root; run 'make deps' as root" >&2
    exit 2
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
npm_tools
