"""A character-level transformer language model in PyTorch, averaged by gridtrain: each node trains on its shard of
a text that every Debian machine has (/usr/share/common-licenses/GPL-3, 35 KB), and predicts the next character.

    python3 -m gridtrain.launch --nodes 2 examples/pytorch/char_transformer.py

(PYTHONPATH=build/python from a build tree; the package python3-gridtrain installs it.) A model gridnode's own learner
cannot express (attention, layer normalisation, AdamW): the averaging is the same. Each node prints one line per
epoch (its loss, next-character accuracy on the held-out last tenth of the text, samples/s, tau, rounds), then
its final accuracy and perplexity. Alone (or with --plain: no gridtrain at all) it trains on all of the text.

The gridtrain part is the same four lines as in fashion_mnist_mlp.py.
"""

import argparse
import math
import os
import sys
import time

import torch

import gridtrain
import gridtrain.torch
from gridtrain import launch

TEXT = "/usr/share/common-licenses/GPL-3"


class CharTransformer(torch.nn.Module):
    def __init__(self, vocabulary, context, width=64, heads=4, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocabulary, width)
        self.position = torch.nn.Parameter(torch.zeros(context, width))
        block = torch.nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                                 batch_first=True, norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(block, layers)
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocabulary)
        # Each position sees itself and the characters before it.
        self.register_buffer("causal", torch.triu(torch.full((context, context), float("-inf")), diagonal=1))

    def forward(self, x):
        n = x.shape[1]
        h = self.embed(x) + self.position[:n]
        return self.head(self.norm(self.blocks(h, mask=self.causal[:n, :n])))


def windows(codes, context, stride):
    """Inputs and next-character targets: every `stride`-th window of `context` characters."""
    starts = torch.arange(0, len(codes) - context - 1, stride)
    index = starts[:, None] + torch.arange(context)[None, :]
    return codes[index], codes[index + 1]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.path.join(here, "cluster.yaml"), help="the cluster's YAML")
    p.add_argument("--text", default=TEXT, help="the text to model")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--stride", type=int, default=8, help="characters between two training windows")
    p.add_argument("--lr", type=float, default=1e-2, help="AdamW's rate (not scaled with the nodes)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per node")
    p.add_argument("--seed", type=int, default=1, help="model initialisation (the same on every node)")
    p.add_argument("--checkpoint", default="", help="a file: resume from it if it exists, and save each epoch")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--plain", action="store_true", help="the same training without gridtrain (for comparison)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rank, nodes = launch.rank(), launch.nodes()

    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    vocabulary = sorted(set(text))
    codes = torch.tensor([vocabulary.index(c) for c in text], dtype=torch.long)
    split = len(codes) * 9 // 10
    xtr, ytr = windows(codes[:split], a.context, a.stride)
    xte, yte = windows(codes[split:], a.context, a.context)
    shard = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(0))[rank::nodes]
    xtr, ytr = xtr[shard], ytr[shard]

    torch.manual_seed(a.seed)
    model = CharTransformer(len(vocabulary), a.context)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    steps_per_epoch = max(1, len(xtr) // a.batch)
    total_steps = a.epochs * steps_per_epoch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))
    start_epoch = 0
    saved = torch.load(a.checkpoint) if a.checkpoint and os.path.exists(a.checkpoint) else None
    if saved:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        start_epoch = saved["epoch"]

    def evaluate():
        with torch.no_grad():
            logits = model(xte)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, len(vocabulary)), yte.reshape(-1)).item()
            return loss, (logits.argmax(-1) == yte).float().mean().item()

    def train(averager=None, node=None):
        test_loss, accuracy = evaluate()
        for epoch in range(start_epoch, a.epochs):
            order = torch.randperm(len(xtr))
            loss_sum = 0.0
            started = time.perf_counter()
            for i in range(0, steps_per_epoch * a.batch, a.batch):
                j = order[i:i + a.batch]
                optimizer.zero_grad(set_to_none=True)
                logits = model(xtr[j])
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, len(vocabulary)), ytr[j].reshape(-1))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                if averager:
                    averager.step(samples=len(j))  # the rounds' pulls since the last step, applied here
                loss_sum += loss.detach()
            trained = time.perf_counter() - started
            test_loss, accuracy = evaluate()
            loss = loss_sum.item() / steps_per_epoch
            if node:  # the node's epoch line (with tau and rounds), metrics.csv, /metrics and gridnode status
                node.report_epoch(epoch + 1, loss=loss, test_loss=test_loss, test_accuracy=accuracy)
            else:
                print(f"epoch {epoch + 1} samples_per_s {steps_per_epoch * a.batch / trained:.0f} loss {loss:.4f} "
                      f"test_accuracy {accuracy:.4f} test_perplexity {math.exp(test_loss):.2f}", flush=True)
            if a.checkpoint:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "schedule": schedule.state_dict(), "epoch": epoch + 1,
                            "averager": averager.state_dict() if averager else None}, a.checkpoint + ".part")
                os.replace(a.checkpoint + ".part", a.checkpoint)
        return test_loss, accuracy

    if a.plain:
        test_loss, accuracy = train()
    else:
        with gridtrain.Node(config=a.config, overrides=a.set) as node:
            averager = gridtrain.torch.ElasticAverager(node, model)  # joins; a joiner copies a line peer's model
            if saved and saved.get("averager"):
                averager.load_state_dict(saved["averager"])
            test_loss, accuracy = train(averager, node)
    print(f"node {rank}: final test_accuracy {accuracy:.4f} test_perplexity {math.exp(test_loss):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
