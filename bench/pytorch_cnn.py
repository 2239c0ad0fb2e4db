#!/usr/bin/env python3
"""The Fashion-MNIST CNN of bench/cuda_cnn.cpp in PyTorch eager, on the same GPU, for the side-by-side figure.

    python3 bench/pytorch_cnn.py [--data DIR] [--epochs 15] [--batch 64] [--lr 0.01] [--steps N] [--precision P]
    python3 bench/pytorch_cnn.py --graphs --steps N [--batch 64] [--data DIR] [--precision P]

The same model (conv 5x5x32 pad 2 -> relu -> maxpool 2 -> conv 5x5x64 pad 2 -> relu -> maxpool 2 -> dense 1024
-> relu -> dense 10), the same initialisation scheme (He normal for layers that feed a relu, Xavier normal for the
last, zero biases), the same standardisation, batch, momentum 0.9, weight decay and per-step cosine schedule.
Momentum differs only in form: torch's v <- mu*v + g, w <- w - lr*v equals gridtrain's v <- mu*v - lr*g,
w <- w + v at a constant rate. --precision as gridtrain's learner.precision: fp32 (the default) with TF32 switched
off for cuBLAS and cuDNN; tf32 with it on (PyTorch's cuDNN default); bf16 as PyTorch's mixed precision does it,
the forward pass and the loss under torch.autocast(dtype=torch.bfloat16), FP32 weights and optimizer (BF16 needs
no gradient scaler).
Like gridtrain, the training set stays in (pinned) host memory and each minibatch is copied up per step.
samples/s counts training steps only, after 50 warm-up steps, with the GPU synchronised at both ends.

--graphs times PyTorch the way a user who wants its speed runs it, the strongest single-GPU setup: the training
set resident on the GPU, each minibatch gathered there, the whole step (forward, backward, SGD with momentum)
captured once as a CUDA graph and replayed, no synchronisation between steps, timed with CUDA events, in
--precision (autocast inside the capture for bf16). It measures samples/s only (--steps): a replayed graph keeps its
learning rate fixed.
"""

import argparse
import contextlib
import gzip
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

MEAN, STD = 0.28604060, 0.35302424  # learner/dataset.hpp: Fashion-MNIST's training-set pixel/255 statistics
WARMUP = 50


def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(folder, prefix):
    images = read_idx(f"{folder}/{prefix}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    images = (images - MEAN) / STD
    labels = read_idx(f"{folder}/{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels)


def set_precision(precision):
    """TF32 on or off for cuBLAS and cuDNN; returns the autocast context for the forward pass and the loss."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if precision == "bf16":
        return lambda: torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = torch.nn.Linear(64 * 7 * 7, 1024)
        self.fc2 = torch.nn.Linear(1024, 10)
        for layer in (self.conv1, self.conv2, self.fc1):
            torch.nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")  # He: N(0, 2 / fan_in)
            torch.nn.init.zeros_(layer.bias)
        torch.nn.init.xavier_normal_(self.fc2.weight)
        torch.nn.init.zeros_(self.fc2.bias)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--steps", type=int, default=0, help="time this many steps only, no accuracy")
    parser.add_argument("--graphs", action="store_true", help="data on the GPU, the step as a CUDA graph (--steps)")
    parser.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    args = parser.parse_args()
    if args.graphs:
        if args.steps <= 0:
            parser.error("--graphs times steps only: give --steps N")
        return time_graphs(args)

    autocast = set_precision(args.precision)
    torch.manual_seed(1)
    device = torch.device("cuda")
    train_x, train_y = load(args.data, "train")
    train_x, train_y = train_x.pin_memory(), train_y.pin_memory()
    test_x, test_y = load(args.data, "t10k")
    test_x, test_y = test_x.to(device), test_y.to(device)

    model = Cnn().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)
    count = train_x.shape[0]
    steps_per_epoch = math.ceil(count / args.batch)
    total = steps_per_epoch * args.epochs
    # gridtrain's cosine: lr0 * (1 + cos(pi * epoch / epochs)) / 2, with the epoch fractional, set every step.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 0.5 * (1 + math.cos(math.pi * min(step / steps_per_epoch, args.epochs) / args.epochs)))
    print(f"cnn on torch {torch.__version__} {torch.cuda.get_device_name()}: "
          f"{sum(p.numel() for p in model.parameters())} parameters, batch {args.batch}, lr {args.lr}, "
          f"{args.epochs} epochs, {args.precision}", flush=True)

    timed_seconds, timed_steps, timed_samples, step = 0.0, 0, 0, 0
    gen = torch.Generator().manual_seed(1)

    def evaluate():
        model.eval()
        loss, correct = 0.0, 0
        with torch.no_grad():
            for start in range(0, test_x.shape[0], 1000):
                with autocast():
                    logits = model(test_x[start:start + 1000]).float()
                loss += F.cross_entropy(logits, test_y[start:start + 1000], reduction="sum").item()
                correct += (logits.argmax(1) == test_y[start:start + 1000]).sum().item()
        model.train()
        return loss / test_x.shape[0], correct / test_x.shape[0]

    limit = args.steps + WARMUP if args.steps > 0 else total
    if args.steps == 0:
        print(f"{'epoch':>6} {'samples':>10} {'samples/s':>12} {'test_loss':>10} {'test_accuracy':>13}")
    accuracy = 0.0
    while step < limit:
        order = torch.randperm(count, generator=gen)
        for first in range(0, count, args.batch):
            if step >= limit:
                break
            timing = step >= WARMUP
            if timing:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            idx = order[first:first + args.batch]
            x = train_x[idx].pin_memory().to(device, non_blocking=True)
            y = train_y[idx].pin_memory().to(device, non_blocking=True)
            with autocast():
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss.item()  # as gridtrain's step, which returns the minibatch's loss
            if timing:
                torch.cuda.synchronize()
                timed_seconds += time.perf_counter() - t0
                timed_steps += 1
                timed_samples += idx.shape[0]
            step += 1
        if args.steps == 0:
            test_loss, accuracy = evaluate()
            print(f"{step // steps_per_epoch:>6} {min(step * args.batch, step // steps_per_epoch * count):>10} "
                  f"{timed_samples / max(timed_seconds, 1e-9):>12.0f} {test_loss:>10.4f} {accuracy:>13.4f}", flush=True)
    if args.steps == 0:
        print(f"pytorch eager {args.precision}: test accuracy after {args.epochs} epochs: {accuracy:.4f}")
    print(f"pytorch eager {args.precision}: {timed_samples / timed_seconds:.0f} samples/s (batch {args.batch}, "
          f"{timed_steps} timed steps, {1e3 * timed_seconds / timed_steps:.3f} ms/step)")


def time_graphs(args):
    autocast = set_precision(args.precision)
    torch.backends.cudnn.benchmark = True  # cuDNN times its algorithms once per shape, as gridtrain's backend does
    torch.manual_seed(1)
    device = torch.device("cuda")
    train_x, train_y = load(args.data, "train")
    train_x, train_y = train_x.to(device), train_y.to(device)
    model = Cnn().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)
    count = train_x.shape[0]
    order = torch.randperm(count, device=device)

    def minibatch(i):
        first = (i * args.batch) % (count - args.batch)
        idx = order[first:first + args.batch]
        return train_x[idx], train_y[idx]

    # Capture needs static inputs and warmed-up state (momentum buffers, cuDNN's choices): a few eager steps on a
    # side stream first, then one captured step whose inputs are refilled before each replay.
    static_x, static_y = (t.clone() for t in minibatch(0))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(5):
            opt.zero_grad(set_to_none=True)
            with autocast():
                warm_loss = F.cross_entropy(model(static_x), static_y)
            warm_loss.backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        with autocast():
            static_loss = F.cross_entropy(model(static_x), static_y)
        static_loss.backward()
        opt.step()

    def step(i):
        x, y = minibatch(i)
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    for i in range(WARMUP):
        step(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(args.steps):
        step(WARMUP + i)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / args.steps
    print(f"pytorch graphs {args.precision}: {args.batch / ms * 1e3:.0f} samples/s (batch {args.batch}, {args.steps} timed steps, "
          f"{ms:.3f} ms/step, data on the GPU, one CUDA graph per step, loss {static_loss.item():.3f}, "
          f"torch {torch.__version__} {torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
