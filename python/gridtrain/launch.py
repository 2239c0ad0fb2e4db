"""Runs a training script as several gridtrain nodes on this machine, one process each: the first bootstraps the
cluster, the others join through it once it is up.

    python3 -m gridtrain.launch --nodes 4 train.py [ARGS...]

Each process gets, in its environment:
    GRIDTRAIN_RANK          0 .. N-1 (for its shard of the data)
    GRIDTRAIN_NODES         N
    GRIDTRAIN_LISTEN        127.0.0.1:0 (a free port)
    GRIDTRAIN_SEED          "" for rank 0; rank 0's address for the others
    GRIDTRAIN_WAIT_MEMBERS  N: training starts once the N are in
    GRIDTRAIN_ADDRESS_FILE  rank 0 only: where its node writes its address once it is in
    OMP_NUM_THREADS, OPENBLAS_NUM_THREADS  the machine's cores / N (at least 1), unless set already
gridtrain.Node takes listen, seed and wait_members from these when they are not given. The launcher exits with the
first non-zero exit code of its processes (0 if all succeed); Ctrl-C or a failed start stops them all. Each
process's output lines come out prefixed "[node R] ".
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ._env import ADDRESS_FILE, LISTEN, NODES, RANK, SEED, WAIT_MEMBERS


def rank():
    """This process's rank under the launcher (0 when it runs alone)."""
    return int(os.environ.get(RANK, "0"))


def nodes():
    """How many processes the launcher started (1 when it runs alone)."""
    return int(os.environ.get(NODES, "1"))


def _wait_for_address(path, first, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                address = f.read().strip()
            if address:
                return address
        if first.poll() is not None:
            raise RuntimeError(f"rank 0 exited with code {first.returncode} before its node was in a cluster")
        time.sleep(0.05)
    raise RuntimeError(f"rank 0's node was not in a cluster after {timeout_s} s")


def _start(python, command, env, rank, out):
    """One process, its output lines (stdout and stderr) copied to `out` as they come, prefixed with its rank."""
    proc = subprocess.Popen([python] + command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            bufsize=1, text=True, errors="replace")

    def copy():
        for line in proc.stdout:
            out.write(f"[node {rank}] {line}")
            out.flush()

    proc.copier = threading.Thread(target=copy, daemon=True)
    proc.copier.start()
    return proc


def environment(base, rank, nodes, seed, address_file=None):
    """The environment of the process of `rank` out of `nodes`, over `base`: what the docstring above lists."""
    env = dict(base)
    env.update({RANK: str(rank), NODES: str(nodes), LISTEN: "127.0.0.1:0", SEED: seed, WAIT_MEMBERS: str(nodes)})
    if address_file:
        env[ADDRESS_FILE] = address_file
    else:
        env.pop(ADDRESS_FILE, None)
    # N processes share this machine's cores: each gets its share of threads for OpenMP and OpenBLAS (which
    # torch.set_num_threads does not reach where PyTorch calls a system BLAS, as Debian's does), unless set. Left at
    # every core each, 4 processes on 2 cores ran at 3.5K to 8K samples/s each, and the fast ones finished a whole
    # epoch ahead (torchrun sets OMP_NUM_THREADS=1 for the same reason).
    share = str(max(1, (os.cpu_count() or 1) // nodes))
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(variable, share)
    return env


def launch(nodes, command, python=sys.executable, join_timeout_s=60, env=None, out=sys.stdout):
    """Starts `command` (a list: script and its arguments, run by `python`) as `nodes` processes; returns the first
    non-zero exit code, or 0."""
    if nodes < 1:
        raise ValueError(f"nodes: expected at least 1, found {nodes}")
    base = dict(os.environ if env is None else env)
    procs = []
    with tempfile.TemporaryDirectory(prefix="gridtrain-launch-") as tmp:
        address_file = os.path.join(tmp, "rank0.address")
        try:
            procs.append(_start(python, command, environment(base, 0, nodes, "", address_file), 0, out))
            address = _wait_for_address(address_file, procs[0], join_timeout_s) if nodes > 1 else ""
            for r in range(1, nodes):
                procs.append(_start(python, command, environment(base, r, nodes, address), r, out))
            code = 0
            for p in procs:
                rc = p.wait()
                p.copier.join()
                if rc != 0 and code == 0:
                    code = rc
            return code
        except (KeyboardInterrupt, RuntimeError) as e:
            if isinstance(e, RuntimeError):
                print(f"error: {e}", file=sys.stderr)
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for p in procs:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            return 130 if isinstance(e, KeyboardInterrupt) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m gridtrain.launch",
                                     description="Run a training script as N gridtrain nodes on this machine.")
    parser.add_argument("--nodes", type=int, default=2, help="processes to start (default 2)")
    parser.add_argument("script", help="the training script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    a = parser.parse_args(argv)
    if a.nodes < 1:
        parser.error(f"--nodes: expected at least 1, found {a.nodes}")
    return launch(a.nodes, [a.script] + a.args)


if __name__ == "__main__":
    sys.exit(main())
