#!/usr/bin/env bash
# Every GPU check and benchmark of the CUDA backend, in one run, on a GPU machine:
#   1. builds the learner, the CUDA module, the learner tests and the CUDA benchmarks (CUDA required);
#   2. runs the learner tests, the CUDA ones included (they must not skip here);
#   3. runs the CNN on Fashion-MNIST in gridtrain and in PyTorch, side by side, in each learner.precision (fp32,
#      tf32, bf16; PyTorch's bf16 is autocast): samples/s at batch 64 and 256 (PyTorch eager, and PyTorch at its
#      fastest: data on the GPU, the step as a CUDA graph), then test accuracy after 15 epochs (gridtrain in
#      each precision, PyTorch eager in fp32);
#   4. times every cuDNN convolution algorithm on the CNN's convolutions, with its error against a direct sum;
#   5. runs a 4-node in-process cluster sharing the GPU, with elastic averaging: test accuracy per node, by the
#      learner alone (bench_cuda_cluster) and through gridnode's actors (bench_convergence);
#   6. runs `gridnode demo` with the CNN on the GPU: 4 node processes, the main job as a user runs it, in each
#      precision;
#   7. builds the Python module for this machine's python3 and runs bench/pytorch_averager.py with the model on
#      the GPU (the PyTorch front end's host mirror).
# It ends with a summary of the figures.
#
# The machine needs nvcc, cmake, ninja, and a python3 with PyTorch and pip's cuDNN (nvidia-cudnn-*); nothing of
# Debian's. What the build needs from Debian, and the data, come in .gpu/ (made here by scripts/gpu-pack.sh and
# carried along): .gpu/prefix.tar.xz and .gpu/data/.
#
# Usage: scripts/gpu-check.sh [BUILD_DIR]     (default build-gpu; the log also goes to $OUT/gpu-check.log when
#        OUT is set). Environment: EPOCHS (default 15), STEPS (timed steps, default 2000), BATCH (default 64),
#        PRECISIONS (default "fp32 tf32 bf16"), BUILD_ONLY=1 (build and run the tests only, letting the CUDA ones skip: the part that runs anywhere).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
build=${1:-build-gpu}
epochs=${EPOCHS:-15}
steps=${STEPS:-2000}
batch=${BATCH:-64}
precisions=${PRECISIONS:-fp32 tf32 bf16}
log=${OUT:-$build}/gpu-check.log
mkdir -p "$(dirname "$log")" "$build"
exec > >(tee "$log") 2>&1

fail() { echo "error: $*"; exit 1; }
step() { echo; echo "=== $*"; }

step "machine"
{ [ -d .gpu/data ] && [ -f .gpu/prefix.tar.xz ]; } || fail "no .gpu/ here: run scripts/gpu-pack.sh where apt works, and carry .gpu"
export PATH="/usr/local/cuda/bin:$PATH"
if ! command -v nvcc >/dev/null; then
  # A toolkit from pip's nvidia-* wheels keeps nvcc inside the Python environment.
  nvcc=$(python3 -c "import nvidia, os; print(*[os.path.join(r, 'nvcc') for p in nvidia.__path__ for r, _, f in os.walk(p) if 'nvcc' in f and r.endswith('bin')][:1])" 2>/dev/null)
  if [ -n "$nvcc" ]; then
    PATH="$(dirname "$nvcc"):$PATH"
    export PATH
  fi
fi
command -v nvcc >/dev/null || fail "no nvcc on PATH, in /usr/local/cuda/bin or in the Python environment"
command -v cmake >/dev/null || fail "no cmake"
command -v ninja >/dev/null || fail "no ninja"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
nvcc --version | tail -2
cmake --version | head -1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"

step "dependencies: .gpu/prefix.tar.xz, cuDNN and cuBLAS from the Python environment where the toolkit lacks them"
deps=/tmp/gridtrain-deps
rm -rf "$deps" && mkdir -p "$deps"
tar -C "$deps" -xJf .gpu/prefix.tar.xz 2>/dev/null ||
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .gpu/prefix.tar.xz "$deps" ||
  fail "cannot unpack .gpu/prefix.tar.xz"
arch=x86_64-linux-gnu
export CPATH="$deps/usr/include:$deps/usr/include/$arch:$deps/usr/include/$arch/openblas-pthread${CPATH:+:$CPATH}"
libs="$deps/usr/lib/$arch:$deps/usr/lib/$arch/openblas-pthread:$deps/lib/$arch"
export LIBRARY_PATH="$libs${LIBRARY_PATH:+:$LIBRARY_PATH}"
nvidia_dir() { python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null; }
cudnn_root=$(nvidia_dir cudnn)
# The Python module for this machine's python3, the one with PyTorch and CUDA (step 7).
cmake_args=(-DCMAKE_PREFIX_PATH="$deps/usr" -DCAF_ROOT="$deps/usr" -DPython_EXECUTABLE="$(command -v python3)")
if [ -n "$cudnn_root" ]; then
  cmake_args+=(-DCUDNN_ROOT="$cudnn_root")
  libs="$libs:$cudnn_root/lib"
fi
if ! ls /usr/local/cuda/lib64/libcublas.so* >/dev/null 2>&1; then
  cublas_root=$(nvidia_dir cublas)
  [ -n "$cublas_root" ] && cmake_args+=(-DCUBLAS_ROOT="$cublas_root") && libs="$libs:$cublas_root/lib"
fi
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "cuDNN: ${cudnn_root:-next to the toolkit}"

step "build (CUDA on)"
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRIDTRAIN_CUDA=ON "${cmake_args[@]}" |
  grep -E "CUDA|Error|error" || true
[ -f "$build/build.ninja" ] || fail "cmake could not configure"
cuda_start=$(date +%s)
cmake --build "$build" --target gridtrain_cuda || fail "the CUDA module did not build"
cuda_seconds=$(($(date +%s) - cuda_start))
cmake --build "$build" --target test_learner bench_cuda_cnn bench_cuda_cluster bench_cuda_conv_algos ||
  fail "the build failed"
echo "built in $(($(date +%s) - start)) s (the CUDA module alone: $cuda_seconds s, $(nproc) cores)"
# The actors' cluster (step 5) needs the whole runtime: CAF, Asio, prometheus-cpp from the prefix.
if [ "${BUILD_ONLY:-0}" != 1 ]; then
  actors_start=$(date +%s)
  if cmake --build "$build" --target bench_convergence >"$build/actors-build.log" 2>&1; then
    echo "bench_convergence built in $(($(date +%s) - actors_start)) s"
  else
    tail -20 "$build/actors-build.log"
    echo "bench_convergence did not build (above)"
  fi
fi

status=0
if [ "${BUILD_ONLY:-0}" = 1 ]; then
  step "learner tests (BUILD_ONLY: the CUDA ones may skip)"
  "$build/tests/learner/test_learner" || status=1
  "$build/tests/learner/test_learner" -tc="*CUDA*,*learner.device*" 2>&1 | grep -E "skipped:|chose|test cases" | sort | uniq -c
  exit $status
fi
step "learner tests, the CUDA ones included"
# learner_test's "which this build lacks" subcase expects no CUDA backend: here there is one.
"$build/tests/learner/test_learner" --subcase-exclude="*which this build lacks*" || status=1
step "the CUDA tests alone, each must run (no 'skipped:' line)"
"$build/tests/learner/test_learner" -tc="*CUDA*,*cuda*,*learner.device*" -s 2>&1 | grep -E "skipped:|chose|test cases|assertions" || true
if "$build/tests/learner/test_learner" -tc="*CUDA*" 2>&1 | grep -q "skipped:"; then
  echo "error: the CUDA tests skipped on a GPU machine"
  status=1
fi

step "cuDNN's convolution algorithms on the CNN's convolutions: time and error against a direct sum"
"$build/bench/bench_cuda_conv_algos" --batch "$batch" --batch 256 | tee "$build/conv_algos.txt" || status=1

data="$root/.gpu/data"
for b in "$batch" 256; do
  for p in $precisions; do
    step "samples/s side by side, $p, batch $b, $steps timed steps each: gridtrain, PyTorch eager, PyTorch graphs"
    "$build/bench/bench_cuda_cnn" --data "$data" --precision "$p" --batch "$b" --steps "$steps" |
      tee "$build/speed_${b}_$p.txt" || status=1
    python3 bench/pytorch_cnn.py --data "$data" --precision "$p" --batch "$b" --steps "$steps" |
      tee -a "$build/speed_${b}_$p.txt" || status=1
    python3 bench/pytorch_cnn.py --graphs --data "$data" --precision "$p" --batch "$b" --steps "$steps" |
      tee -a "$build/speed_${b}_$p.txt" || status=1
  done
done

step "what the device path gives: gridtrain fp32 at batch 256 with the training set in host memory (no CUDA graphs)"
"$build/bench/bench_cuda_cnn" --data "$data" --precision fp32 --batch 256 --steps "$steps" --data-on-device false |
  tee "$build/speed_256_host.txt" || status=1

for p in $precisions; do
  step "test accuracy after $epochs epochs, batch $batch, $p: gridtrain"
  "$build/bench/bench_cuda_cnn" --data "$data" --precision "$p" --batch "$batch" --epochs "$epochs" |
    tee "$build/accuracy_$p.txt" || status=1
done
step "test accuracy after $epochs epochs, batch $batch: PyTorch eager"
python3 bench/pytorch_cnn.py --data "$data" --batch "$batch" --epochs "$epochs" | tee "$build/torch_accuracy.txt" || status=1

step "4 nodes in one process sharing the GPU, elastic averaging, $epochs epochs"
# The same 4 nodes through gridnode's actors (in-process Nodes, real rounds, the Worker's elastic update), when
# the actors were built here.
"$build/bench/bench_cuda_cluster" --data "$data" --nodes 4 --batch "$batch" --epochs "$epochs" |
  tee "$build/cluster.txt" || status=1
# The CNN of bench_cuda_cnn and bench/pytorch_cnn.py, as config.
cnn='[{type: conv2d, filters: 32, kernel: 5, padding: 2}, {type: relu}, {type: maxpool, size: 2},
      {type: conv2d, filters: 64, kernel: 5, padding: 2}, {type: relu}, {type: maxpool, size: 2},
      {type: dense, units: 1024}, {type: relu}, {type: dense, units: 10}, {type: softmax_cross_entropy}]'
if [ -x "$build/bench/bench_convergence" ]; then
  "$build/bench/bench_convergence" --epochs "$epochs" --nodes 4 --modes elastic \
    --set learner.device=cuda --set "learner.model.layers=$cnn" --set "learner.batch=$batch" \
    --set "data.train_images=$data/train-images-idx3-ubyte.gz" --set "data.train_labels=$data/train-labels-idx1-ubyte.gz" \
    --set "data.test_images=$data/t10k-images-idx3-ubyte.gz" --set "data.test_labels=$data/t10k-labels-idx1-ubyte.gz" |
    tee "$build/cluster_actors.txt" || status=1
else
  echo "error: bench_convergence was not built: the actors' cluster run is skipped"
  status=1
fi

# The main job as a user runs it, each node a process of its own with the CUDA backend (no gnuplot here: the
# demo warns that it drew no plots).
if cmake --build "$build" --target gridnode >"$build/gridnode-build.log" 2>&1; then
  for p in $precisions; do
    step "gridnode demo on the GPU, $p: 4 node processes sharing it, the CNN, $epochs epochs"
    "$build/gridnode" demo --nodes 4 --epochs "$epochs" --out "$build/demo-gpu-$p" --set learner.device=cuda \
      --set "learner.precision=$p" \
      --set "learner.model.layers=$cnn" --set "learner.batch=$batch" --set learner.optimizer.learning_rate=0.01 \
      --set "data.train_images=$data/train-images-idx3-ubyte.gz" --set "data.train_labels=$data/train-labels-idx1-ubyte.gz" \
      --set "data.test_images=$data/t10k-images-idx3-ubyte.gz" --set "data.test_labels=$data/t10k-labels-idx1-ubyte.gz" |
      tee "$build/demo_$p.txt" || status=1
  done
else
  tail -20 "$build/gridnode-build.log"
  echo "error: gridnode did not build (above): the demo on the GPU is skipped"
  status=1
fi

step "the PyTorch front end with the model on the GPU: bench/pytorch_averager.py --device cuda"
# The MLP example with its parameters on the GPU and the node's memory as their host mirror, 2 processes sharing
# the GPU, against the same loop without gridtrain; then the time of averager.step() with the mirror's copies.
if cmake --build "$build" --target gridtrain_python >"$build/python-build.log" 2>&1; then
  FASHION_MNIST_DIR=$data PYTHONPATH=$build/python python3 bench/pytorch_averager.py --device cuda --nodes 2 \
    --epochs 3 --repeats 2 | tee "$build/pytorch_averager.txt" || status=1
else
  tail -20 "$build/python-build.log"
  echo "error: the Python module did not build (above; it needs this python3's headers): step skipped"
  status=1
fi

step "summary"
# One table: samples/s per batch and precision, gridtrain against PyTorch's CUDA graph.
printf "%-6s %-5s %12s %14s %14s %7s\n" batch prec gridtrain torch-eager torch-graphs ratio
for b in "$batch" 256; do
  for p in $precisions; do
    f="$build/speed_${b}_$p.txt"
    g=$(grep -o "^gridtrain [a-z]* $p: [0-9]*" "$f" 2>/dev/null | grep -o "[0-9]*$")
    e=$(grep -o "^pytorch eager $p: [0-9]*" "$f" 2>/dev/null | grep -o "[0-9]*$")
    t=$(grep -o "^pytorch graphs $p: [0-9]*" "$f" 2>/dev/null | grep -o "[0-9]*$")
    r=$(awk -v g="${g:-0}" -v t="${t:-0}" 'BEGIN { if (t > 0) printf "%.2f", g / t; else printf "-" }')
    printf "%-6s %-5s %12s %14s %14s %7s\n" "$b" "$p" "${g:--}" "${e:--}" "${t:--}" "$r"
  done
done
grep -h "samples/s" "$build/speed_256_host.txt" 2>/dev/null | sed 's/^/host-gathered: /'
grep -h "store:\|steps as CUDA graphs" "$build"/speed_*.txt 2>/dev/null
grep -h "test accuracy after" "$build"/accuracy_*.txt "$build"/torch_accuracy.txt 2>/dev/null
grep -h "node \|cluster of\|rounds" "$build"/cluster.txt 2>/dev/null
for p in $precisions; do
  grep -h "^node [0-9]*: final test_accuracy" "$build/demo_$p.txt" 2>/dev/null | sed "s/^/$p /"
done
grep -h "^throughput\|^step()\|^host mirror" "$build"/pytorch_averager.txt 2>/dev/null
echo "CUDA module build: $cuda_seconds s"
[ $status -eq 0 ] && echo "gpu-check: all ran" || echo "gpu-check: something failed (see above)"
exit $status
