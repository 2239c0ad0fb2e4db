"""A character-level transformer language model in PyTorch, averaged by gridtrain: each node trains on its shard of
the windows of a text every Debian machine has (the GPL, /usr/share/common-licenses/GPL-3, 35 KB) to predict each
next character, one shard per member of the cluster, cut again each epoch as members come and go.

    python3 -m gridtrain.launch --nodes 2 examples/pytorch/char_transformer.py

(PYTHONPATH=build/python from a build tree; the package python3-gridtrain installs it.) Each node prints one line per
epoch (its loss, next-character accuracy on the held-out last tenth of the text, samples/s, tau = steps per elastic
update, rounds), then its final test accuracy and perplexity. Alone it bootstraps a cluster of one and trains on all
the windows; --plain trains the same without gridtrain and prints the test perplexity each epoch too. Attention,
layer normalisation and AdamW are beyond gridnode's own learner (dense, conv, relu, maxpool, softmax); the averaging
does not care what the model is.

The gridtrain part is the same four lines as in fashion_mnist_mlp.py: the Node, the ElasticAverager, averager.step()
after optimizer.step(), and node.report_epoch() (optional: it feeds `gridnode status`, metrics.csv and /metrics).
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
    """Character and learned position embeddings, pre-norm transformer blocks under a causal mask, a final
    LayerNorm and a linear head to the next character's logits."""

    def __init__(self, vocabulary, context, width=64, heads=4, layers=2, feedforward=256, dropout=0.0):
        super().__init__()
        self.embed = torch.nn.Embedding(vocabulary, width)
        self.position = torch.nn.Embedding(context, width)
        block = torch.nn.TransformerEncoderLayer(width, heads, dim_feedforward=feedforward, dropout=dropout,
                                                 batch_first=True, norm_first=True)
        # No nested tensors: they are for padding masks, and newer PyTorch warns that norm_first rules them out.
        self.blocks = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocabulary)
        # Small embeddings (GPT-2's 0.02, not N(0, 1)), so the blocks' outputs count in the residual stream from
        # the start: 3 epochs reached 0.41 next-character accuracy where N(0, 1) reached 0.32.
        for e in (self.embed, self.position):
            torch.nn.init.normal_(e.weight, std=0.02)
        # Each position sees itself and the characters before it (-inf above the diagonal). A buffer, not a
        # parameter: the averager leaves it alone, and persistent=False keeps it out of the checkpoint.
        mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
        self.register_buffer("causal", mask, persistent=False)

    def forward(self, x):
        n = x.shape[1]
        h = self.embed(x) + self.position(torch.arange(n, device=x.device))
        return self.head(self.norm(self.blocks(h, mask=self.causal[:n, :n])))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.path.join(here, "cluster.yaml"), help="the cluster's YAML")
    p.add_argument("--text", default=TEXT, help="the text to model (UTF-8)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=32, help="windows per step")
    p.add_argument("--context", type=int, default=64, help="characters per window")
    p.add_argument("--stride", type=int, default=None,
                   help="characters between two training windows' starts (default an eighth of --context: 3,946 "
                        "windows an epoch from the 31.6 KB of training text, each character in 8, at 8 positions)")
    p.add_argument("--lr", type=float, default=3e-3,
                   help="AdamW's peak learning rate (default 3e-3, whatever the number of nodes: the MLP example "
                        "scales SGD's with them, but Adam's step size does not grow with the batch)")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per node")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (the text and the model on the GPU)")
    p.add_argument("--seed", type=int, default=1, help="model initialisation (the same on every node)")
    p.add_argument("--checkpoint", default="", help="a file: resume from it if it exists, and save each epoch")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--plain", action="store_true", help="the same training without gridtrain (for comparison)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rank, nodes = launch.rank(), launch.nodes()
    if a.stride is None:
        a.stride = max(1, a.context // 8)

    device = torch.device(a.device)
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    vocabulary = sorted(set(text))
    code = {c: i for i, c in enumerate(vocabulary)}
    codes = torch.tensor([code[c] for c in text], dtype=torch.long, device=device)
    split = len(codes) * 9 // 10  # the last tenth is the test text, never trained on
    span = torch.arange(a.context + 1, device=device)

    def windows(starts):
        """The windows from these start positions: their characters, and each one's next character."""
        chars = codes[starts[:, None] + span]
        return chars[:, :-1], chars[:, 1:]

    # Training windows start every --stride characters, and lie wholly in the training text with their targets.
    starts = torch.arange(0, split - a.context, a.stride)
    # The test text in consecutive windows: every character of it but each window's first is a target.
    xte, yte = windows(torch.arange(split, len(codes) - a.context, a.context, device=device))

    torch.manual_seed(a.seed)
    model = CharTransformer(len(vocabulary), a.context, dropout=a.dropout).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    start_epoch = 0
    saved = torch.load(a.checkpoint, map_location=device) if a.checkpoint and os.path.exists(a.checkpoint) else None
    if saved:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start_epoch = saved["epoch"]

    place = [rank, nodes]

    def my_shard(node, epoch):
        """This node's part of the training windows for this epoch. With a cluster, one part per member as it is
        now: when a node dies the others share its part, and a node that comes back takes one again. The parts are
        cut from a shuffle of all the windows that every node draws alike (seeded by the epoch), as PyTorch's
        DistributedSampler does after set_epoch()."""
        if node:
            try:
                place[:] = node.data_shard()
            except gridtrain.NodeError:
                pass  # cut off from the cluster just now: the part it had
        order = starts[torch.randperm(len(starts), generator=torch.Generator().manual_seed(epoch))].to(device)
        return order[place[0]::place[1]]

    def loss_fn(logits, targets):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def evaluate():
        """Mean cross-entropy and next-character accuracy over the test text."""
        model.eval()
        with torch.no_grad():
            logits = model(xte)
            test_loss = loss_fn(logits, yte).item()
            accuracy = (logits.argmax(-1) == yte).float().mean().item()
        model.train()
        return test_loss, accuracy

    def train(averager=None, node=None):
        test_loss, accuracy = evaluate()  # what the final line says if the checkpoint had every epoch already
        for epoch in range(start_epoch, a.epochs):
            shard = my_shard(node, epoch)
            shard = shard[torch.randperm(len(shard), device=device)]
            steps = max(1, len(shard) // a.batch)
            loss_sum = 0.0
            started = time.perf_counter()
            for step in range(steps):
                # The learning rate follows a cosine over the epochs, by where this step is in its epoch (so a
                # resumed run and a shard that changes size keep to the same curve).
                progress = (epoch + step / steps) / a.epochs
                for group in optimizer.param_groups:
                    group["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * progress))
                x, y = windows(shard[step * a.batch:(step + 1) * a.batch])
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # attention's early steps can spike
                optimizer.step()
                if averager:
                    averager.step(samples=len(x))  # the rounds' pulls since the last step, applied here
                loss_sum += loss.detach()
            trained = time.perf_counter() - started
            test_loss, accuracy = evaluate()
            loss = loss_sum.item() / steps
            if node:  # the node's epoch line (with tau and rounds), metrics.csv, /metrics and gridnode status
                node.report_epoch(epoch + 1, loss=loss, test_loss=test_loss, test_accuracy=accuracy)
            else:
                print(f"epoch {epoch + 1} samples_per_s {steps * a.batch / trained:.0f} loss {loss:.4f} "
                      f"test_loss {test_loss:.4f} test_accuracy {accuracy:.4f} "
                      f"test_perplexity {math.exp(test_loss):.2f}", flush=True)
            if a.checkpoint:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1,
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
