"""What the Python front end's tests share: the build's paths, processes that die with the test, free addresses.

Every process a test starts is a Process here: stopped by PID at the test's end (and, through PR_SET_PDEATHSIG,
killed by the kernel if the test process itself dies), its output collected line by line as it comes."""

import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from gridtrain import launch

BUILD = os.environ["GRIDTRAIN_BUILD_DIR"]
SOURCE = os.environ["GRIDTRAIN_SOURCE_DIR"]
GRIDNODE = os.path.join(BUILD, "gridnode")
PYTHON = sys.executable
EXAMPLES = os.path.join(SOURCE, "examples", "pytorch")
MLP = os.path.join(EXAMPLES, "fashion_mnist_mlp.py")
WORKER = os.path.join(SOURCE, "tests", "python", "worker.py")

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Process:
    """A child process whose output lines are kept (and echoed, prefixed, for the test's log)."""

    def __init__(self, args, env=None, label=""):
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.label = label or os.path.basename(args[1] if len(args) > 1 else args[0])
        self.lines = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(args, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     errors="replace", bufsize=1, preexec_fn=_die_with_parent)
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        _started.append(self)

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            sys.stderr.write(f"[{self.label}] {line}\n")
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for_line(self, pattern, timeout):
        """The first match of `pattern` (a regex) in the output, waiting up to `timeout` s; None if none came."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = 0
            while True:
                for line in self.lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return m
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    return None
                self._cond.wait(min(left, 0.2))

    def output(self):
        with self._cond:
            return "\n".join(self.lines)

    def wait(self, timeout):
        rc = self.proc.wait(timeout=timeout)
        self._close_output()
        return rc

    def _close_output(self):
        self._reader.join(timeout=5)
        if not self._reader.is_alive():
            self.proc.stdout.close()

    def stop(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._close_output()


_started = []


def stop_all():
    """Stops every process the test started that still runs."""
    while _started:
        _started.pop().stop()


def final_accuracy(process):
    m = re.search(r"node \d+: final test_accuracy ([0-9.]+)", process.output())
    return float(m.group(1)) if m else None


class ClusterRun:
    """Ranks of a training script started one by one as `python3 -m gridtrain.launch` starts them, but each a
    Process of the test's (so that a test can kill, stall and restart them): rank 0 bootstraps and says its address
    in a file; the others join through it."""

    def __init__(self, script, nodes, args=(), extra_env=None):
        """`args`: the script's arguments, or a function of the rank that gives them."""
        self.script = script
        self.nodes = nodes
        self.args = args if callable(args) else (lambda rank, fixed=list(args): fixed)
        self.extra_env = dict(extra_env or {})
        self.tmp = tempfile.mkdtemp(prefix="gridtrain-test-")
        self.address = ""
        self.ranks = {}

    def env(self, rank):
        address_file = os.path.join(self.tmp, "rank0.address") if rank == 0 and not self.address else None
        env = launch.environment(os.environ, rank, self.nodes, self.address, address_file)
        env["PYTHONPATH"] = os.path.join(BUILD, "python")
        env.update(self.extra_env)
        return env

    def start_rank(self, rank):
        p = Process([PYTHON, self.script] + list(self.args(rank)), env=self.env(rank), label=f"rank {rank}")
        self.ranks[rank] = p
        return p

    def start(self, timeout=60):
        first = self.start_rank(0)
        path = os.path.join(self.tmp, "rank0.address")
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if first.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("rank 0 did not bootstrap a cluster:\n" + first.output())
            time.sleep(0.05)
        with open(path) as f:
            self.address = f.read().strip()
        for r in range(1, self.nodes):
            self.start_rank(r)
        return self

    def wait(self, timeout):
        return {r: p.wait(timeout) for r, p in self.ranks.items()}


class TestCase(unittest.TestCase):
    def tearDown(self):
        stop_all()


def run_tests():
    """unittest's main, with verbose output; the exit code says whether every test passed."""
    try:
        unittest.main(verbosity=2)
    finally:
        stop_all()
