"""gridtrain: elastic, grid-structured training. A node of a gridtrain cluster inside your own training process.

    import gridtrain
    import gridtrain.torch

    with gridtrain.Node(config="cluster.yaml", listen="10.0.0.6:7000", seed="10.0.0.5:7000") as node:
        averager = gridtrain.torch.ElasticAverager(node, model)   # joins the cluster with this model
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
            averager.step(samples=len(x))                         # never waits on the network

The node is the one `gridnode run` starts (the same YAML and `--set` keys, gate, token, TLS, failover, status,
metrics and logs); README.md, "Train your own PyTorch model", says more.
"""

import importlib

from ._gridtrain import ConfigError, Error, NodeError, RejectedError
from .node import Node

__all__ = ["Node", "Error", "ConfigError", "RejectedError", "NodeError"]
__version__ = "0.1.0"


def __getattr__(name):
    # gridtrain.torch is imported on first use, so that `import gridtrain` does not import PyTorch.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'gridtrain' has no attribute '{name}'")
