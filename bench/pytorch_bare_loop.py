"""What the averager costs a bare training loop: the Fashion-MNIST MLP's steps and nothing else (no evaluation, no
reports, no launcher), two processes on this machine at once, each on half the data, in four variants:

    plain      the loop alone (gridtrain imported, as by the example's --plain; no node)
    alone      with a node and the averager, each process its own cluster (step() runs, no round ever does)
    idle-pair  one cluster of the two, no rounds (cpu_share 0.0001, no staleness bound)
    pair       one cluster of the two, at examples/pytorch/cluster.yaml's settings (or --set KEY=VALUE)

The variants alternate, --repeats times; each process's samples/s over each epoch after its first counts, and the
medians of the variants are compared with plain's. A control beside bench/pytorch_averager.py, whose runs are the
whole example (evaluation, reports, the launcher): where the two disagree, the difference is outside the rounds.

    PYTHONPATH=build/python /usr/bin/python3 bench/pytorch_bare_loop.py [--epochs 4] [--repeats 5] \\
        [--variants plain,alone,idle-pair,pair] [--set KEY=VALUE]
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples", "pytorch")
CONFIG = os.path.join(EXAMPLES, "cluster.yaml")
VARIANTS = ("plain", "alone", "idle-pair", "pair")


def train(variant, rank, epochs, port, settings):
    """One process: prints 'rates R2 R3 ...' (samples/s of each epoch after the first) and, paired, 'rounds N'.
    The data and the model are the example's and the other benchmark's (its --plain imports gridtrain too)."""
    import torch

    sys.path.insert(0, EXAMPLES)
    from fashion_mnist_mlp import load
    from pytorch_averager import mlp

    torch.set_num_threads(1)
    x, y = load("train")
    model = mlp("cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.04, momentum=0.9, weight_decay=1e-4)
    node = averager = None
    if variant != "plain":
        import gridtrain
        import gridtrain.torch
        overrides = dict(s.split("=", 1) for s in settings)
        if variant == "idle-pair":
            overrides.update({"allreduce.cpu_share": "0.0001", "allreduce.staleness_bound": "0"})
        if variant == "alone":
            node = gridtrain.Node(config=CONFIG, listen="127.0.0.1:0", seed="", overrides=overrides)
        else:
            node = gridtrain.Node(config=CONFIG, listen=f"127.0.0.1:{port + rank}",
                                  seed="" if rank == 0 else f"127.0.0.1:{port}", overrides=overrides,
                                  wait_members=2)
        averager = gridtrain.torch.ElasticAverager(node, model)
    loss_fn = torch.nn.CrossEntropyLoss()
    shard = torch.arange(rank, len(x), 2)
    rates = []
    for _ in range(epochs):
        order = shard[torch.randperm(len(shard))]
        steps = len(order) // 64
        started = time.perf_counter()
        for step in range(steps):
            j = order[step * 64:(step + 1) * 64]
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x[j]), y[j]).backward()
            optimizer.step()
            if averager:
                averager.step(samples=64)
        rates.append(steps * 64 / (time.perf_counter() - started))
    print("rates", " ".join(f"{r:.0f}" for r in rates[1:]), flush=True)
    if node:
        if variant != "alone":
            print("rounds", node.stats()["rounds_done"], flush=True)
        node.close()


def free_port_pair():
    """A port p with p + 1 free too, for the two processes' nodes."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise SystemExit("error: no two free ports in a row")


def run(variant, epochs, settings):
    """Both processes of one variant at once: their per-epoch rates and rounds. A process that fails stops the
    other (a paired one would wait for its peer for ever) and ends the benchmark with its error."""
    port = free_port_pair()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = []
    try:
        for rank in (0, 1):
            args = [sys.executable, __file__, "--child", variant, "--rank", str(rank), "--epochs", str(epochs),
                    "--port", str(port)] + [a for kv in settings for a in ("--set", kv)]
            log = tempfile.TemporaryFile(mode="w+")  # not a pipe: nobody reads it until the end
            procs.append(subprocess.Popen(args, env=env, text=True, stdout=log, stderr=subprocess.STDOUT))
            procs[-1].log = log
            if rank == 0 and variant not in ("plain", "alone"):
                time.sleep(2.5)  # the first one listens before the second joins it
        deadline = time.monotonic() + 600
        while any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    rates, rounds = [], []
    for p in procs:
        p.wait()
        p.log.seek(0)
        out = p.log.read()
        p.log.close()
        if p.returncode != 0:
            raise SystemExit(f"error: a {variant} process exited {p.returncode}:\n{out[-2000:]}")
        for line in out.splitlines():
            if line.startswith("rates "):
                rates += [float(v) for v in line.split()[1:]]
            elif line.startswith("rounds "):
                rounds.append(int(line.split()[1]))
    return rates, rounds


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        train(a.child, a.rank, a.epochs, a.port, a.set)
        return 0
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            p.error(f"--variants: unknown variant '{v}' (expected some of {', '.join(VARIANTS)})")
    if a.epochs < 2 or a.repeats < 1:
        p.error("--epochs: at least 2; --repeats: at least 1")
    rates = {v: [] for v in variants}
    rounds = {v: [] for v in variants}
    for r in range(a.repeats):
        for v in variants:
            got, n = run(v, a.epochs, a.set)
            rates[v] += got
            rounds[v] += n
            print(f"  repetition {r + 1}: {v:9} {statistics.mean(got):7.0f} samples/s per process"
                  + (f", {min(n)}-{max(n)} rounds" if n else ""), flush=True)
    base = statistics.median(rates["plain"]) if "plain" in rates else None
    for v in variants:
        m = statistics.median(rates[v])
        ratio = f" ({m / base:.3f}x plain)" if base else ""
        print(f"{v:9}: median {m:7.0f} samples/s over {len(rates[v])} process-epochs{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
