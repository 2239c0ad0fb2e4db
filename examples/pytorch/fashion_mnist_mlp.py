"""The Fashion-MNIST MLP (784-256-128-10) in PyTorch, averaged by gridtrain: each node trains on its shard, one
shard per member of the cluster, cut again each epoch as members come and go.

    python3 -m gridtrain.launch --nodes 4 examples/pytorch/fashion_mnist_mlp.py --epochs 5

(PYTHONPATH=build/python from a build tree; the package python3-gridtrain installs it.) Each node prints one line per
epoch (its loss, test accuracy, samples/s, tau = steps per elastic update, rounds), then its final test accuracy.
Alone (python3 examples/pytorch/fashion_mnist_mlp.py) it bootstraps a cluster of one and trains on all the data.
The data is Debian's dataset-fashion-mnist (or the folder FASHION_MNIST_DIR names).

The gridtrain part is four lines: the Node, the ElasticAverager, averager.step() after optimizer.step(), and
node.report_epoch() (optional: it feeds `gridnode status`, metrics.csv and /metrics).
"""

import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch

import gridtrain
import gridtrain.torch
from gridtrain import launch

# Debian's dataset-fashion-mnist, or the folder FASHION_MNIST_DIR names.
DATA = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist/")


def idx(name, offset):
    with gzip.open(os.path.join(DATA, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def load(split):
    images = idx(f"{split}-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    labels = idx(f"{split}-labels-idx1-ubyte.gz", 8)
    x = (torch.tensor(images, dtype=torch.float32) / 255 - 0.2860) / 0.3530
    return x, torch.tensor(labels, dtype=torch.long)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.path.join(here, "cluster.yaml"), help="the cluster's YAML")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=None,
                   help="the learning rate (default 0.02 times the number of nodes: N nodes that average closely "
                        "train like one with an N times larger batch)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per node")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (the data and the model on the GPU)")
    p.add_argument("--seed", type=int, default=1, help="model initialisation (the same on every node)")
    p.add_argument("--checkpoint", default="", help="a file: resume from it if it exists, and save each epoch")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--plain", action="store_true", help="the same training without gridtrain (for comparison)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rank, nodes = launch.rank(), launch.nodes()
    if a.lr is None:
        a.lr = 0.02 * nodes

    device = torch.device(a.device)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    xtr, ytr, xte, yte = xtr.to(device), ytr.to(device), xte.to(device), yte.to(device)

    torch.manual_seed(a.seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    start_epoch = 0
    saved = torch.load(a.checkpoint, map_location=device) if a.checkpoint and os.path.exists(a.checkpoint) else None
    if saved:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start_epoch = saved["epoch"]

    place = [rank, nodes]

    def my_shard(node, epoch):
        """This node's part of the training set for this epoch. With a cluster, one part per member as it is
        now: when a node dies the others share its part, and a node that comes back takes one again. The parts are
        cut from a shuffle of all the data that every node draws alike (seeded by the epoch), as PyTorch's
        DistributedSampler does after set_epoch()."""
        if node:
            try:
                place[:] = node.data_shard()
            except gridtrain.NodeError:
                pass  # cut off from the cluster just now: the part it had
        order = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(epoch)).to(device)
        return order[place[0]::place[1]]

    def train(averager=None, node=None):
        loss_fn = torch.nn.CrossEntropyLoss()
        accuracy = 0.0
        for epoch in range(start_epoch, a.epochs):
            shard = my_shard(node, epoch)
            shard = shard[torch.randperm(len(shard), device=device)]
            steps = len(shard) // a.batch
            loss_sum = 0.0
            started = time.perf_counter()
            for step in range(steps):
                # The learning rate follows a cosine over the epochs, by where this step is in its epoch.
                progress = (epoch + step / steps) / a.epochs
                for group in optimizer.param_groups:
                    group["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * progress))
                j = shard[step * a.batch:(step + 1) * a.batch]
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(xtr[j]), ytr[j])
                loss.backward()
                optimizer.step()
                if averager:
                    averager.step(samples=len(j))  # the rounds' pulls since the last step, applied here
                loss_sum += loss.detach()
            trained = time.perf_counter() - started
            with torch.no_grad():
                out = model(xte)
                test_loss = loss_fn(out, yte).item()
                accuracy = (out.argmax(1) == yte).float().mean().item()
            loss = loss_sum.item() / steps
            if node:  # the node's epoch line (with tau and rounds), metrics.csv, /metrics and gridnode status
                node.report_epoch(epoch + 1, loss=loss, test_loss=test_loss, test_accuracy=accuracy)
            else:
                print(f"epoch {epoch + 1} samples_per_s {steps * a.batch / trained:.0f} loss {loss:.4f} "
                      f"test_accuracy {accuracy:.4f}", flush=True)
            if a.checkpoint:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1,
                            "averager": averager.state_dict() if averager else None}, a.checkpoint + ".part")
                os.replace(a.checkpoint + ".part", a.checkpoint)
        return accuracy

    if a.plain:
        accuracy = train()
    else:
        with gridtrain.Node(config=a.config, overrides=a.set) as node:
            averager = gridtrain.torch.ElasticAverager(node, model)  # joins; a joiner copies a line peer's model
            if saved and saved.get("averager"):
                averager.load_state_dict(saved["averager"])
            # Joined a running cluster (or restarted): take up its schedule where the others are, as the model
            # just copied is. Behind it, this node's larger learning rate would pull them back at their end.
            done = min(node.cluster_epochs_done(), a.epochs - 1)  # at least one epoch of its own
            if done > start_epoch:
                print(f"node {rank}: the cluster finished {done} epochs; continuing from epoch {done + 1}", flush=True)
                start_epoch = done
            accuracy = train(averager, node)
    print(f"node {rank}: final test_accuracy {accuracy:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
