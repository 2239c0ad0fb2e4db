"""gridtrain.torch: a PyTorch model averaged by a gridtrain node.

    averager = gridtrain.torch.ElasticAverager(node, model)
    ...
    optimizer.step()
    averager.step(samples=len(x))

The contract with your optimizer (docs/design.md, "The PyTorch front end"): your training loop is the only writer of
the model's floats. The node's rounds run in the background on their own thread; each one's elastic pull,
m <- m + alpha * (mean - m), waits in a buffer of the node's until step() adds it to the parameters, on your thread,
between two optimizer steps. So a forward and backward pass never sees a parameter move, and no float is written by
two threads at once. step() never waits on the network.
"""

import torch

from . import _gridtrain
from .node import Node

__all__ = ["ElasticAverager"]

_STATE_FORMAT = "gridtrain.torch.ElasticAverager/1"


class _DeviceMirror:
    """The arena as the host mirror of a model kept elsewhere (a GPU; or, with share_memory=False, CPU tensors of
    its own). The model's parameters are views of one flat tensor on their device. Each step, when the last download
    of that tensor has landed (never waiting for it): the download into the arena (the mirror the rounds read), the
    pending pulls up to the device and added there, and the next download started. One download is in flight at a
    time, so pulls taken while none is cannot be lost from the mirror: a pull taken is in the next download.
    On a GPU the copies go through pinned buffers on a stream of their own, non-blocking."""

    def __init__(self, store, flat, every):
        self.store = store
        self.flat = flat
        self.every = max(1, int(every))
        self.cuda = flat.device.type == "cuda"
        n = flat.numel()
        self.down = torch.empty(n, dtype=torch.float32, pin_memory=self.cuda)
        self.up = torch.empty(n, dtype=torch.float32, pin_memory=self.cuda)
        # The node reads and writes them through the buffer protocol, which numpy's views of them speak.
        self.down_buffer = self.down.numpy()
        self.up_buffer = self.up.numpy()
        self.stream = torch.cuda.Stream(device=flat.device) if self.cuda else None
        self.in_flight = None  # the download's event (on the CPU, True: done at once)
        self.since = 0
        self.downloads = 0
        self.uploads = 0

    def _landed(self):
        if self.in_flight is None:
            return True
        if self.in_flight is True or self.in_flight.query():
            self.store.update_mirror(self.down_buffer)
            self.in_flight = None
            return True
        return False

    def _upload(self):
        ranges = self.store.take_pending(self.up_buffer)
        for offset, size in ranges:
            part = self.up[offset:offset + size]
            self.flat[offset:offset + size].add_(part.to(self.flat.device, non_blocking=True) if self.cuda else part)
        if ranges:
            self.uploads += 1
        return bool(ranges)

    def _download(self):
        if self.cuda:
            self.stream.wait_stream(torch.cuda.current_stream(self.flat.device))
            with torch.cuda.stream(self.stream):
                self.down.copy_(self.flat, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self.stream)
            self.in_flight = event
        else:
            self.down.copy_(self.flat)
            self.in_flight = True
        self.since = 0
        self.downloads += 1

    def step(self):
        """Whether it added pulls to the model."""
        self.since += 1
        if not self._landed():
            return False
        pulled = self._upload()
        if self.since >= self.every:
            self._download()
        return pulled

    def settle(self):
        """Everything pending on the device and the mirror current, waiting as long as it takes (the warm start)."""
        if self.in_flight is not None and self.in_flight is not True:
            self.in_flight.synchronize()
        self._landed()
        self._upload()
        self._download()
        if self.cuda:
            self.in_flight.synchronize()
        self._landed()


class ElasticAverager:
    """Averages `model`'s parameters with the cluster of `node` (a gridtrain.Node), which joins with this model.

    The parameters (model.named_parameters(): their names and shapes are the model's signature; a cluster of
    another model refuses the node with gridtrain.RejectedError) become views of the node's model:
    - CPU parameters share the node's memory (no copy per round);
    - parameters on a GPU (or with share_memory=False) become views of one flat tensor on their device, with the
      node's memory as its host mirror, refreshed by non-blocking copies every `mirror_every` steps.
    With buffers=True the floating-point buffers (BatchNorm's running statistics) are averaged too.

    Joining a running cluster copies a line peer's parameters before this returns (warm start). Create the
    averager after the model is on its device and its checkpoint (if any) is loaded, and before training; the
    optimizer may be made before or after (its parameters stay the same objects).

    Call step() after each optimizer.step(): it adds the pulls of the rounds finished since the last call to the
    parameters, and lets the node's lines run more rounds as allreduce.every_steps or cpu_share say. Never call it
    while the optimizer runs on another thread.
    """

    def __init__(self, node, model, *, buffers=False, share_memory=True, mirror_every=1):
        if not isinstance(node, Node):
            raise TypeError(f"node: expected a gridtrain.Node, found {type(node).__name__}")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model: expected a torch.nn.Module, found {type(model).__name__}")
        if not isinstance(mirror_every, int) or isinstance(mirror_every, bool) or mirror_every < 1:
            raise ValueError(f"mirror_every: expected an int >= 1, found {mirror_every!r}")
        named = list(model.named_parameters())
        if buffers:
            named += [(name, b) for name, b in model.named_buffers() if b.is_floating_point()]
        if not named:
            raise ValueError("model: it has no parameters to average")
        for name, t in named:
            if t.dtype != torch.float32:
                raise TypeError(f"parameter '{name}' is {t.dtype}: the averager averages float32 parameters "
                                f"(keep float32 master weights; autocast computes in lower precision)")
        devices = {t.device for _, t in named}
        if len(devices) > 1:
            raise ValueError(f"model: its parameters are on several devices ({', '.join(sorted(map(str, devices)))})"
                             f": the averager takes a model on one device")
        self.device = devices.pop()
        self._node = node
        self._tensors = [t for _, t in named]
        self._names = [name for name, _ in named]
        self._store = node._attach([(name, list(t.shape)) for name, t in named])
        self._arena = torch.frombuffer(self._store, dtype=torch.float32)
        self._offsets = [offset for _, _, offset, _ in self._store.tensors]
        self._mirror = None
        with torch.no_grad():
            if self.device.type == "cpu" and share_memory:
                for t, offset in zip(self._tensors, self._offsets):
                    view = self._arena[offset:offset + t.numel()].view(t.shape)
                    view.copy_(t.detach())
                    t.data = view
            else:
                flat = torch.empty(self._arena.numel(), dtype=torch.float32, device=self.device)
                for t, offset in zip(self._tensors, self._offsets):
                    view = flat[offset:offset + t.numel()].view(t.shape)
                    view.copy_(t.detach())
                    t.data = view
                self._arena.copy_(flat.cpu())
                self._mirror = _DeviceMirror(self._store, flat, mirror_every)
        self._first = self._tensors[0]
        self._first_ptr = self._first.data_ptr()
        self.steps = 0
        self.samples = 0
        self.pulls = 0  # steps that applied a pull of the rounds
        node._join()
        # The warm start came as a pending update: it becomes the model now, before the first step.
        with torch.no_grad():
            if self._mirror:
                self._mirror.settle()
            else:
                self._store.apply_pending()

    @property
    def node(self):
        return self._node

    @property
    def signature(self):
        """The hash of the parameters' names and shapes that the cluster compares."""
        return self._store.signature

    def step(self, samples=0):
        """After optimizer.step(): applies the pulls of the rounds finished since the last call, and lets the
        node's lines run more rounds as its pacing says. Never waits on the network, unless
        allreduce.staleness_bound is set: then a step at the bound waits for a round (docs/design.md). `samples`:
        how many samples this step trained on (for the node's reports: `gridnode status`, metrics.csv). Raises
        gridtrain.NodeError once the node has left or ended: a loop that goes on would no longer average."""
        if self._first.data_ptr() != self._first_ptr:
            raise RuntimeError("the model's parameters were replaced after the averager was made (model.to(), "
                               "load_state_dict(assign=...)?): make the averager after the model is in place")
        with torch.no_grad():
            if self._mirror:
                pulled = self._mirror.step()
            else:
                pulled = self._store.apply_pending() > 0
        self._node._step(int(samples))
        self.pulls += int(pulled)
        self.steps += 1
        self.samples += int(samples)

    def state_dict(self):
        """What a checkpoint needs of the averager (the model's own state_dict holds the parameters)."""
        state = {"format": _STATE_FORMAT, "signature": self._store.signature, "steps": self.steps,
                 "samples": self.samples, "names": list(self._names)}
        if self._store.has_outer:  # allreduce.outer nesterov: the outer parameters and momentum
            outer = torch.empty(self._store.size, dtype=torch.float32)
            velocity = torch.empty(self._store.size, dtype=torch.float32)
            self._store.outer_state(outer.numpy(), velocity.numpy())
            state["outer"], state["outer_velocity"] = outer, velocity
        return state

    def load_state_dict(self, state):
        """Restores the counters of a checkpoint of the same model. The parameters come from the model's own
        state_dict, loaded before the averager is made; a node that joins a running cluster then starts from a
        line peer's parameters, whose model moved on meanwhile."""
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError(f"state: not an ElasticAverager state (expected format {_STATE_FORMAT!r})")
        if state.get("signature") != self._store.signature:
            raise ValueError("state: it is the averager state of another model (other parameter names or shapes)")
        outer, velocity = state.get("outer"), state.get("outer_velocity")
        if outer is not None or velocity is not None:
            size = self._store.size
            if not all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.numel() == size
                       for t in (outer, velocity)):
                raise ValueError(f"state: outer and outer_velocity must be float32 tensors of {size} elements")
            # The outer step's state belongs to the model it was saved with: a node that copied a member's model
            # as it joined (a warm start) makes its own from that one, as gridnode does after --resume.
            if not self._node._core.warm_started:
                self._store.set_outer_state(outer.contiguous().numpy(), velocity.contiguous().numpy())
        self.steps = int(state["steps"])
        self.samples = int(state["samples"])

    def mirror_stats(self):
        """For a model with a host mirror: the downloads and uploads made so far; None when it shares memory."""
        if not self._mirror:
            return None
        return {"downloads": self._mirror.downloads, "uploads": self._mirror.uploads}
