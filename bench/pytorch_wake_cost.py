"""What averaging costs each second of a PyTorch training thread's CPU, and what other threads' wake-ups alone do.

The Fashion-MNIST MLP example on NODES processes of this machine, three ways: without gridtrain (--plain) alone;
the same beside WAKERS processes of build/bench/bench_wake_load that only wake, RATE times a second each, touching
no memory (--touch-kb for some); and with the averager at the example's settings (python3 -m gridtrain.launch).
For each epoch after the second, each process's samples/s (its own epoch line) over the share of a core its
training thread had between that line and the one before (utime + stime of the process's main thread, from /proc):
samples per second of the training thread's CPU, and that share. Repetitions rotate the order of the three; each
way's figure is printed against the plain loop alone of the same repetition.

    PYTHONPATH=build/python /usr/bin/python3 bench/pytorch_wake_cost.py [--nodes 2] [--epochs 12] [--repeats 6]
                                                                        [--wakers 2] [--rate 700] [--touch-kb 0]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from gridtrain import launch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "pytorch", "fashion_mnist_mlp.py")
EXAMPLE_NAME = "fashion_mnist_mlp.py"
WAKE_LOAD = os.path.join(HERE, "..", "build", "bench", "bench_wake_load")
TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid):
    """The CPU seconds of the process's main thread so far (utime + stime), or None once it is gone."""
    try:
        fields = open(f"/proc/{pid}/task/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def rank_pid(rank):
    """The pid of the example's process of `rank` started by the launcher (from its environment), or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if EXAMPLE_NAME not in open(f"/proc/{pid}/cmdline").read():
                continue
            env = open(f"/proc/{pid}/environ").read().split("\0")
        except OSError:
            continue
        if f"GRIDTRAIN_RANK={rank}" in env and f"WAKE_COST_PARENT={os.getpid()}" in env:
            return int(pid)
    return None


class Epochs:
    """Each process's epoch lines as they come: samples/s over its training thread's share of a core since the
    line before, for the epochs after the second."""

    def __init__(self, nodes):
        self.per_cpu, self.shares, self.last, self.pids = ([[] for _ in range(nodes)], [[] for _ in range(nodes)],
                                                           [None] * nodes, [None] * nodes)
        self.tail = []

    def line(self, rank, text, pid):
        self.tail = (self.tail + [f"[node {rank}] {text}"])[-40:]
        m = re.match(r"epoch (\d+) .*?samples_per_s (\d+)", text)
        if not m:
            return
        now, cpu = time.monotonic(), thread_cpu(pid) if pid else None
        last = self.last[rank]
        if last and cpu is not None and int(m.group(1)) >= 3:
            share = (cpu - last[1]) / (now - last[0])
            if share > 0:
                self.shares[rank].append(share)
                self.per_cpu[rank].append(float(m.group(2)) / share)
        self.last[rank] = (now, cpu) if cpu is not None else None

    def result(self):
        if any(not x for x in self.per_cpu):
            raise SystemExit("error: a process printed too few epoch lines:\n" + "".join(self.tail))
        return (statistics.mean(statistics.mean(x) for x in self.per_cpu),
                statistics.mean(statistics.mean(x) for x in self.shares))


def run_plain(nodes, epochs):
    """(samples per second of training-thread CPU, the training thread's share of a core): means over the processes
    of their epochs 3..epochs."""
    procs = [subprocess.Popen([sys.executable, EXAMPLE, "--epochs", str(epochs), "--plain"], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=launch.environment(os.environ, r, nodes, "")) for r in range(nodes)]
    epochs_seen = Epochs(nodes)

    def follow(r, p):
        for line in p.stdout:
            epochs_seen.line(r, line, p.pid)

    readers = [threading.Thread(target=follow, args=(r, p)) for r, p in enumerate(procs)]
    for t in readers:
        t.start()
    for p in procs:
        p.wait(timeout=3600)
    for t in readers:
        t.join()
    return epochs_seen.result()


def run_averaged(nodes, epochs):
    """As run_plain, with the averager: the example through the launcher, at its settings."""
    epochs_seen = Epochs(nodes)

    class Lines:  # the launcher's output stream: "[node R] line"
        def write(self, text):
            m = re.match(r"\[node (\d+)\] (.*)", text, re.S)
            if m:
                rank = int(m.group(1))
                if epochs_seen.pids[rank] is None:
                    epochs_seen.pids[rank] = rank_pid(rank)
                epochs_seen.line(rank, m.group(2), epochs_seen.pids[rank])

        def flush(self):
            pass

    env = dict(os.environ, WAKE_COST_PARENT=str(os.getpid()))  # marks our launcher's processes for rank_pid()
    code = launch.launch(nodes, [EXAMPLE, "--epochs", str(epochs)], env=env, out=Lines())
    if code != 0:
        raise SystemExit(f"error: the launcher exited {code}:\n" + "".join(epochs_seen.tail))
    return epochs_seen.result()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--wakers", type=int, default=2)
    p.add_argument("--rate", type=float, default=700, help="wake-ups a second of each waker")
    p.add_argument("--touch-kb", type=float, default=0, help="memory each wake-up touches, a cache line in 64 bytes")
    a = p.parse_args()
    if a.epochs < 4 or a.repeats < 1 or a.wakers < 1 or a.nodes < 1:
        p.error("expected --epochs >= 4, and --repeats, --wakers and --nodes >= 1")
    if not os.access(WAKE_LOAD, os.X_OK):
        p.error(f"{WAKE_LOAD} is missing: build it (ninja -C build bench_wake_load)")
    print(f"pytorch_wake_cost: {os.cpu_count()} cores, {a.nodes} processes of the MLP example, {a.epochs} epochs; "
          f"wakers: {a.wakers} at {a.rate:g} wake-ups a second each, {a.touch_kb:g} KB touched each")
    ways = ["alone", "beside the wakers", "with the averager"]
    figures = {w: [] for w in ways}
    for r in range(a.repeats):
        for way in ways[r % 3:] + ways[:r % 3]:
            wakers = [subprocess.Popen([WAKE_LOAD, "--rate", str(a.rate), "--touch-kb", str(a.touch_kb)])
                      for _ in range(a.wakers)] if way == "beside the wakers" else []
            try:
                figure, share = run_averaged(a.nodes, a.epochs) if way == "with the averager" else \
                    run_plain(a.nodes, a.epochs)
            finally:
                for w in wakers:
                    w.kill()
                    w.wait()
            figures[way].append(figure)
            print(f"  repetition {r + 1}, {way}: training thread {100 * share:.1f}% of a core, {figure:,.0f} "
                  f"samples per second of its CPU", flush=True)
    print("samples per second of training-thread CPU, median: " +
          ", ".join(f"{w} {statistics.median(figures[w]):,.0f}" for w in ways))
    for way in ways[1:]:
        ratios = sorted(x / y for x, y in zip(figures[way], figures["alone"]))
        print(f"  {way} against alone, repetition by repetition: {', '.join(f'{x:.3f}' for x in ratios)} "
              f"(median {statistics.median(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
