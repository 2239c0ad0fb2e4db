"""What the PyTorch front end costs a training loop.

1. Throughput: the Fashion-MNIST MLP example (examples/pytorch/fashion_mnist_mlp.py) on NODES processes of this
   machine (python3 -m gridtrain.launch), with the averager, against the same loop without it (--plain: the same
   processes, shards and steps, no node). samples/s is each node's mean over its epochs after the first;
   repetitions alternate between the two (ABBA), and the medians are compared.
2. step(): the time of ElasticAverager.step() in a loop of two nodes of this process averaging the same MLP, with
   nothing pending (most steps) and when it applies a round's pull (the pass over the arena).
3. With --device cuda (where a GPU is): the same with the model on the GPU, and its host mirror's downloads.

    PYTHONPATH=build/python /usr/bin/python3 bench/pytorch_averager.py [--nodes 2] [--epochs 3] [--repeats 3]
                                                                      [--device cpu|cuda]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import torch

import gridtrain
import gridtrain.torch
from gridtrain import launch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "pytorch", "fashion_mnist_mlp.py")
CONFIG = os.path.join(HERE, "..", "examples", "pytorch", "cluster.yaml")


def throughput(nodes, epochs, device, plain, settings=()):
    """The mean over the nodes of each node's mean samples/s over epochs 2.., the nodes' final accuracies, and their
    last epoch's tau. With the averager, through the launcher; without (--plain: no node, so nothing to launch),
    the same processes started at once with the launcher's environment (ranks, shards, threads)."""
    example = [EXAMPLE, "--epochs", str(epochs), "--device", device]
    if plain:
        procs = [subprocess.Popen([sys.executable] + example + ["--plain"], text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=launch.environment(os.environ, r, nodes, ""))
                 for r in range(nodes)]
        out = "".join("".join(f"[node {r}] {line}" for line in p.communicate(timeout=3600)[0].splitlines(True))
                      for r, p in enumerate(procs))
    else:
        sets = [arg for kv in settings for arg in ("--set", kv)]
        out = subprocess.run([sys.executable, "-m", "gridtrain.launch", "--nodes", str(nodes)] + example + sets,
                             capture_output=True, text=True, timeout=3600).stdout
    rates = {}
    for m in re.finditer(r"\[node (\d+)\] epoch (\d+) .*?samples_per_s (\d+)", out):
        if int(m.group(2)) >= 2:
            rates.setdefault(int(m.group(1)), []).append(float(m.group(3)))
    finals = [float(a) for a in re.findall(r"final test_accuracy ([0-9.]+)", out)]
    taus = [float(t) for t in re.findall(rf"epoch {epochs} .* tau ([0-9.]+|inf)", out)]
    if len(rates) != nodes:
        raise SystemExit(f"error: expected {nodes} nodes' epoch lines, found {len(rates)}:\n{out[-2000:]}")
    return statistics.mean(statistics.mean(r) for r in rates.values()), finals, taus or [float("nan")]


def mlp(device):
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                               torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)


def step_cost(device, seconds):
    """step() times, in µs: the median of the steps that applied nothing and of those that applied a pull."""
    idle, pulled = [], []
    # Both nodes step on this one thread: a staleness bound would make one wait for rounds that need the other's
    # allowances, so none.
    unbounded = {"allreduce.staleness_bound": 0}
    with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0, overrides=unbounded) as a:
        a_avg = gridtrain.torch.ElasticAverager(a, mlp(device))
        with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0, overrides=unbounded) as b:
            b_avg = gridtrain.torch.ElasticAverager(b, mlp(device))
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for avg in (a_avg, b_avg):
                    before = avg.pulls
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter_ns()
                    avg.step(samples=64)
                    t = (time.perf_counter_ns() - t0) / 1000
                    (pulled if avg.pulls > before else idle).append(t)
                time.sleep(0.0005)  # a training step's worth of time, for the pacing to let rounds run
            rounds = a.stats()["rounds_done"]
            mirror = a_avg.mirror_stats()
    return statistics.median(idle), (statistics.median(pulled) if pulled else float("nan")), len(pulled), \
        len(idle) + len(pulled), rounds, mirror


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--step-seconds", type=float, default=10)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for the nodes with the averager (e.g. allreduce.cpu_share=0.1)")
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("skipped: --device cuda, and this machine's PyTorch sees no GPU")
        return 0
    print(f"pytorch_averager: torch {torch.__version__}, {os.cpu_count()} cores, device {device}, "
          f"{a.nodes} processes, {a.epochs} epochs each on 1/{a.nodes} of Fashion-MNIST"
          + (f", with {' '.join(a.set)}" if a.set else ""))
    on, off = [], []
    for r in range(a.repeats):
        # Alternating which goes first (ABBA), so that a machine getting slower or faster favours neither.
        if r % 2 == 0:
            rate_off, acc_off, _ = throughput(a.nodes, a.epochs, a.device, plain=True)
            rate_on, acc_on, taus = throughput(a.nodes, a.epochs, a.device, plain=False, settings=a.set)
        else:
            rate_on, acc_on, taus = throughput(a.nodes, a.epochs, a.device, plain=False, settings=a.set)
            rate_off, acc_off, _ = throughput(a.nodes, a.epochs, a.device, plain=True)
        off.append(rate_off)
        on.append(rate_on)
        print(f"  repetition {r + 1}: without {rate_off:8.0f} samples/s per node (accuracy "
              f"{min(acc_off):.4f}-{max(acc_off):.4f}), with the averager {rate_on:8.0f} (accuracy "
              f"{min(acc_on):.4f}-{max(acc_on):.4f}, tau {min(taus):.1f}-{max(taus):.1f}): {rate_on / rate_off:.3f}x")
    ratios = sorted(x / y for x, y in zip(on, off))
    if ratios:  # --repeats 0: step() alone
        print(f"throughput: median {statistics.median(on):.0f} samples/s per node with the averager, "
              f"{statistics.median(off):.0f} without: {statistics.median(on) / statistics.median(off):.3f}x; "
              f"repetition by repetition {', '.join(f'{r:.3f}' for r in ratios)} "
              f"(median {statistics.median(ratios):.3f})")
    idle, pulled, n_pulled, n, rounds, mirror = step_cost(device, a.step_seconds)
    print(f"step(): median {idle:.1f} us with nothing pending, {pulled:.1f} us applying a pull "
          f"({n_pulled} of {n} steps; {rounds} rounds; MLP, 235,146 floats)")
    if mirror:
        print(f"host mirror: {mirror['downloads']} downloads and {mirror['uploads']} uploads in {n // 2} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
