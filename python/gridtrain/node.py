"""gridtrain.Node: the node of a gridtrain cluster that this process hosts."""

import atexit
import json
import os
import threading
import weakref

from . import _env, _gridtrain

_open_nodes = weakref.WeakSet()
_open_lock = threading.Lock()


def _override_text(key, value):
    """One override as `--set key=value` takes it: the value as a YAML scalar or flow collection."""
    if not isinstance(key, str) or not key:
        raise TypeError(f"overrides: a key must be a non-empty str, found {key!r}")
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = value
    elif isinstance(value, (list, tuple, dict)):
        text = json.dumps(value)  # JSON is YAML's flow style
    else:
        raise TypeError(f"overrides: {key}: expected a str, number, bool, None, list or dict, "
                        f"found {type(value).__name__}")
    return f"{key}={text}"


def _override_list(overrides):
    if overrides is None:
        return []
    if isinstance(overrides, dict):
        return [_override_text(k, v) for k, v in overrides.items()]
    if isinstance(overrides, (list, tuple)):
        for item in overrides:
            if not isinstance(item, str) or "=" not in item:
                raise TypeError(f"overrides: expected 'key=value' strings, found {item!r}")
        return list(overrides)
    raise TypeError(f"overrides: expected a dict {{key: value}} or a list of 'key=value', "
                    f"found {type(overrides).__name__}")


def _seed_text(seed):
    if seed is None:
        return ""
    if isinstance(seed, str):
        return seed
    if isinstance(seed, (list, tuple)) and all(isinstance(s, str) for s in seed):
        return ",".join(seed)
    raise TypeError(f"seed: expected 'HOST:PORT', 'HOST:PORT,HOST:PORT' or a list of them, found {seed!r}")


class Node:
    """A node of a gridtrain cluster, hosted by this process: what `gridnode run` starts, with your model.

    Args mirror `gridnode run`'s options:
        config: the cluster's YAML file (its learner and data sections are not used: the model is yours).
        listen: HOST:PORT to listen on ("" = the config's cluster.listen; port 0 = any free port).
        seed: HOST:PORT of a member to join through, or several ("a:1,b:2" or a list), tried in order;
            "" bootstraps a new cluster.
        overrides: config keys to override, {"allreduce.elastic_rate": 0.3} or ["allreduce.elastic_rate=0.3"],
            as `--set`.
        name: the node's stable name (its rows in metrics.csv); default as gridnode's.
        wait_members: start training only once the cluster has this many members (or its members already train).
        log_format, log_level: as `--log-format` and `--log-level`.
    listen, seed and wait_members left out (None) come from the environment `python3 -m gridtrain.launch` sets
    (GRIDTRAIN_LISTEN, GRIDTRAIN_SEED, GRIDTRAIN_WAIT_MEMBERS), and otherwise are "", "" (bootstrap) and 0.

    Nothing joins yet: the node joins the cluster when it is given its model (gridtrain.torch.ElasticAverager),
    whose parameters' names and shapes must be the cluster's. Bad input raises gridtrain.ConfigError with the text
    gridnode prints (file:line:col for a config). Use it as a context manager, or call close(): the node then
    leaves the cluster cleanly, also when the training loop raises. Nodes still open when the interpreter exits
    are closed then.
    """

    def __init__(self, config, listen=None, seed=None, overrides=None, name="", wait_members=None, log_format="",
                 log_level=""):
        # Under `python3 -m gridtrain.launch`, what the launcher says (gridtrain/launch.py); else gridnode's defaults.
        if listen is None:
            listen = os.environ.get(_env.LISTEN, "")
        if seed is None:
            seed = os.environ.get(_env.SEED, "")
        if wait_members is None:
            wait_members = int(os.environ.get(_env.WAIT_MEMBERS, "0"))
        if not isinstance(config, (str, os.PathLike)):
            raise TypeError(f"config: expected the path of a YAML file, found {type(config).__name__}")
        if not isinstance(listen, str):
            raise TypeError(f"listen: expected 'HOST:PORT', found {listen!r}")
        if not isinstance(wait_members, int) or isinstance(wait_members, bool):
            raise TypeError(f"wait_members: expected an int, found {wait_members!r}")
        self._core = _gridtrain.Node(os.fspath(config), listen, _seed_text(seed), _override_list(overrides),
                                     name or "", wait_members, log_format or "", log_level or "")
        self._model = None
        self._closed = False
        with _open_lock:
            _open_nodes.add(self)

    # The node's own facts ---------------------------------------------------------------------------------------
    @property
    def id(self):
        """The node's id in the cluster (0 before it joined)."""
        return self._core.id

    @property
    def address(self):
        """HOST:PORT the node listens on, as the cluster dials it ("" before it joined)."""
        return self._core.address

    @property
    def name(self):
        return self._core.name

    @property
    def joined(self):
        return self._core.joined

    @property
    def metrics_port(self):
        """The port of the node's Prometheus endpoint (metrics.listen), 0 when it has none."""
        return self._core.metrics_port

    def stats(self):
        """The node's counters: rounds_done (in all, and rounds_per_dim), bytes_sent, bytes_received, ..."""
        return self._core.stats()

    def grid(self):
        """The live grid, as `gridnode status --json` prints it (a dict)."""
        return json.loads(self._core.grid_json())

    def cluster_epochs_done(self):
        """The most epochs any other member has finished and reported (report_epoch, or gridnode's learner), 0 when
        none has. A node that joins a running cluster (a restart from a checkpoint included) takes up the schedule
        from here rather than from its own count: the model it copied is that far along, and a node whose learning
        rate schedule lags the others' pulls them back toward an earlier model near the end of theirs. What the
        node last heard from its GridMaster (its members report every half second)."""
        me = self.id
        return max((n.get("epochs_done", 0) for n in self.grid()["nodes"] if n["id"] != me), default=0)

    def data_shard(self):
        """(index, count): this node's place among the cluster's members now (ordered by id), and how many there
        are. Cutting the data into `count` parts and taking part `index`, again each epoch, the members always
        cover all of it: when a node dies the others share its part, and a node that joins takes one. Members
        asked at slightly different times may see different counts for an epoch. Never waits: it is what the node
        last heard from its GridMaster (at most half a second ago), also while the cluster elects a new one.
        Raises gridtrain.NodeError when this node is not among the members (not joined, or cut off now)."""
        return self._core.data_shard()

    def report_epoch(self, epoch, loss=0.0, test_loss=0.0, test_accuracy=-1.0):
        """Reports an epoch as gridnode does: its `epoch` line (or JSON event), a metrics.csv row, the Prometheus
        gauges, and the test accuracy `gridnode status` shows. Returns the report (samples, samples_per_s, tau,
        rounds and waited_s added by the node)."""
        return self._core.report_epoch(int(epoch), float(loss), float(test_loss), float(test_accuracy))

    # Joining, for the averagers ---------------------------------------------------------------------------------
    def _attach(self, tensors):
        """The model's store for these (name, shape) pairs; then _join(). One model per node."""
        if self._closed:
            raise _gridtrain.NodeError("the node was closed")
        if self._model is not None:
            raise ValueError("this node averages a model already: one model per node")
        self._model = self._core.make_model(tensors)
        return self._model

    def _join(self):
        self._core.join()
        # Under the launcher, rank 0 says where it listens once it is in, so that the others can join through it.
        address_file = os.environ.get(_env.ADDRESS_FILE)
        if address_file:
            with open(address_file + ".part", "w") as f:
                f.write(self.address)
            os.replace(address_file + ".part", address_file)
        self._core.wait_for_members()

    def _step(self, samples):
        return self._core.step(samples)

    # Leaving ------------------------------------------------------------------------------------------------------
    def close(self):
        """Leaves the cluster cleanly (idempotent). The model's parameters stay valid, no longer averaged."""
        if self._closed:
            return
        self._closed = True
        self._core.close()
        with _open_lock:
            _open_nodes.discard(self)

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self._closed else ("joined" if self.joined else "not joined")
        return f"<gridtrain.Node {self.name} {self.address or '-'} {state}>"


@atexit.register
def _close_open_nodes():
    with _open_lock:
        nodes = list(_open_nodes)
    for node in nodes:
        try:
            node.close()
        except Exception:  # the interpreter is exiting: nothing left to tell
            pass
