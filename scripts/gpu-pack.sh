#!/usr/bin/env bash
# Prepares .gpu/, what scripts/gpu-check.sh needs on a bare GPU machine that has nvcc, cmake, a Python with
# PyTorch and cuDNN (pip's nvidia-cudnn), but no Debian packages and no network:
#   .gpu/prefix.tar.xz  the build's Debian dependencies (headers, libraries, CMake configs: yaml-cpp, CAF, spdlog,
#                       fmt, CLI11, doctest, OpenBLAS, zlib, nlohmann-json, Asio, prometheus-cpp), unpacked from
#                       their .debs with `dpkg -x` into one folder (usr/...) and packed;
#   .gpu/data/          Fashion-MNIST's four IDX .gz files.
# Run it here (Debian, with apt); carry .gpu to the GPU machine beside the working tree, then run
# scripts/gpu-check.sh there. .gpu/ is kept out of git through .git/info/exclude. About 45 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."

out=.gpu
data_dir=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

# The -dev packages the top-level CMakeLists.txt and the targets need, and the runtime libraries they link;
# nothing that an Ubuntu-like image already has (libc, libstdc++, libgcc, OpenSSL).
packages=(
  libyaml-cpp-dev libyaml-cpp0.7
  libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libcli11-dev doctest-dev nlohmann-json3-dev
  libasio-dev  # the data plane (header-only), for the actors' cluster run
  zlib1g-dev zlib1g
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0
  # telemetry's /metrics: prometheus-cpp's CMake config asks for civetweb (pull; its targets name the civetweb
  # binary) and CURL (push, not linked).
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  civetweb libcivetweb-dev libcivetweb1 libcurl4-openssl-dev libcurl4
  pybind11-dev  # the Python module (header-only), built there for that machine's python3 and its PyTorch
)

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
rm -rf "$out"
mkdir -p "$out/debs" "$out/data" "$out/prefix"

# Each package at the version apt would install here: the one the build was made and tested with.
(cd "$out/debs" && apt-get download "${packages[@]}" >/dev/null)
for deb in "$out"/debs/*.deb; do dpkg -x "$deb" "$out/prefix"; done

# What a build does not read: documentation, and Debian's alternatives links, which point into /etc.
rm -rf "$out/prefix/usr/share/doc" "$out/prefix/usr/share/man" "$out/prefix/usr/share/lintian"
find "$out/prefix" -xtype l -delete  # dangling links (absolute ones into / that do not exist in the prefix)
# zlib1g-dev's libz.so points at /lib/...; point it at the prefix's copy instead.
lib="$out/prefix/usr/lib/x86_64-linux-gnu"
if [ ! -e "$lib/libz.so" ]; then
  z=$(cd "$out/prefix" && find . -name 'libz.so.1.*' | head -1)
  [ -n "$z" ] && ln -sf "$(realpath --relative-to="$lib" "$out/prefix/$z")" "$lib/libz.so"
fi
tar -C "$out/prefix" -cJf "$out/prefix.tar.xz" .
rm -rf "$out/debs" "$out/prefix"

cp "$data_dir"/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz "$out/data/"
du -sh "$out" "$out"/*
