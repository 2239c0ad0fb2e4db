"""Bad input to the Python front end: each gets a clear exception (the text gridnode prints, where gridnode has
one), bounded in time, and the interpreter goes on."""

import os
import socket
import subprocess
import tempfile
import threading
import time

import torch

import gridtrain
import gridtrain.torch
from harness import BUILD, EXAMPLES, GRIDNODE, PYTHON, SOURCE, WORKER, Process, TestCase, run_tests

CONFIG = os.path.join(EXAMPLES, "cluster.yaml")


def gridnode_error(*args):
    """What `gridnode ARGS` prints after "error: " (its one error line), and its exit code."""
    done = subprocess.run([GRIDNODE] + list(args), capture_output=True, text=True, timeout=60)
    lines = [l for l in done.stderr.splitlines() if l.startswith("error: ")]
    return (lines[0][len("error: "):] if lines else None), done.returncode


def linear(width=2):
    torch.manual_seed(0)
    return torch.nn.Linear(3, width)


class BadInputTest(TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gridtrain-bad-input-")

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_a_bad_config_raises_the_error_gridnode_prints(self):
        for name, text in [("range.yaml", "cluster:\n  listen: 127.0.0.1:0\ngrid:\n  dims: 9\n"),
                           ("unknown.yaml", "allreduce:\n  elastic_rat: 0.3\n"),
                           ("syntax.yaml", "grid: [dims: 2\n")]:
            with self.subTest(name):
                path = self.write(name, text)
                expected, code = gridnode_error("check-config", path)
                self.assertEqual(code, 2)
                self.assertIsNotNone(expected)
                with self.assertRaises(gridtrain.ConfigError) as raised:
                    gridtrain.Node(path, listen="127.0.0.1:0")
                self.assertEqual(str(raised.exception), expected)
                self.assertEqual(raised.exception.exit_code, 2)
                self.assertIsInstance(raised.exception, ValueError)
        expected, _ = gridnode_error("check-config", CONFIG, "--set", "allreduce.elastic_rate=7")
        with self.assertRaises(gridtrain.ConfigError) as raised:
            gridtrain.Node(CONFIG, listen="127.0.0.1:0", overrides={"allreduce.elastic_rate": 7})
        self.assertEqual(str(raised.exception), expected)
        self.assertIn("allreduce.elastic_rate", str(raised.exception))
        with self.assertRaisesRegex(gridtrain.ConfigError, "cannot read the config file"):
            gridtrain.Node(os.path.join(self.tmp, "missing.yaml"))
        with self.assertRaisesRegex(gridtrain.ConfigError, "learner.kind must be external"):
            gridtrain.Node(CONFIG, listen="127.0.0.1:0", overrides={"learner.kind": "probe"})

    def test_bad_options_raise_what_gridnode_run_says(self):
        expected, code = gridnode_error("run", "--config", CONFIG, "--listen", "0.0.0.0:0")
        self.assertEqual(code, 2)
        with self.assertRaises(gridtrain.ConfigError) as raised:
            gridtrain.Node(CONFIG, listen="0.0.0.0:0")
        self.assertEqual(str(raised.exception), expected)
        with self.assertRaisesRegex(gridtrain.ConfigError, "--seed"):
            gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="no-port-here")
        with self.assertRaisesRegex(gridtrain.ConfigError, "wait_members"):
            gridtrain.Node(CONFIG, listen="127.0.0.1:0", wait_members=-1)

    def test_a_node_with_another_model_is_refused(self):
        with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0) as a:
            gridtrain.torch.ElasticAverager(a, linear(2))
            other = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0)
            with self.assertRaises(gridtrain.RejectedError) as raised:
                gridtrain.torch.ElasticAverager(other, linear(3))
            self.assertEqual(raised.exception.exit_code, 3)
            self.assertIn("a different model", str(raised.exception))
            other.close()
            # The cluster goes on with its one member, and the refused node's exit path is clean: a process that
            # meets the same refusal says so and exits by itself with gridnode's code for it, 3.
            self.assertEqual(len(a.grid()["nodes"]), 1)
            worker = Process([PYTHON, WORKER, "--config", CONFIG, "--model", "other"],
                             env={"GRIDTRAIN_LISTEN": "127.0.0.1:0", "GRIDTRAIN_SEED": a.address,
                                  "PYTHONPATH": os.path.join(BUILD, "python")})
            self.assertEqual(worker.wait(timeout=60), 3)
            self.assertIn("RejectedError (exit code 3)", worker.output())
            self.assertIn("a different model", worker.output())

    def test_a_seed_that_is_no_gridtrain_node_fails_the_join_in_bounded_time(self):
        # A port that accepts and never answers (another service), and one where nothing listens.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        held = []
        stop = threading.Event()

        def accept():
            silent.settimeout(0.2)
            while not stop.is_set():
                try:
                    held.append(silent.accept()[0])
                except OSError:
                    pass

        threading.Thread(target=accept, daemon=True).start()
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
        closed.close()
        try:
            for seed, reason in [(f"127.0.0.1:{silent.getsockname()[1]}", "did not answer the gate handshake"),
                                 (f"127.0.0.1:{closed_port}", "could not join")]:
                with self.subTest(seed):
                    node = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=seed, wait_members=0)
                    started = time.monotonic()
                    with self.assertRaises(gridtrain.NodeError) as raised:
                        gridtrain.torch.ElasticAverager(node, linear())
                    self.assertLess(time.monotonic() - started, 20)  # the join timeout (10 s) and a handshake's
                    self.assertIn(reason, str(raised.exception))
                    self.assertIn(seed, str(raised.exception))
                    node.close()
        finally:
            stop.set()
            silent.close()
            for s in held:
                s.close()

    def test_a_wrong_token_is_refused(self):
        mine = self.write("token-a", "one cluster's secret\n")
        theirs = self.write("token-b", "another cluster's secret\n")
        with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0,
                            overrides={"cluster.token_file": mine}) as a:
            gridtrain.torch.ElasticAverager(a, linear())
            stranger = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0,
                                      overrides={"cluster.token_file": theirs})
            started = time.monotonic()
            with self.assertRaises(gridtrain.RejectedError) as raised:
                gridtrain.torch.ElasticAverager(stranger, linear())
            self.assertLess(time.monotonic() - started, 20)
            self.assertIn("wrong cluster token", str(raised.exception))
            stranger.close()
            # The right token gets in.
            with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0,
                                overrides={"cluster.token_file": mine}) as friend:
                gridtrain.torch.ElasticAverager(friend, linear())
                self.assertEqual(len(a.grid()["nodes"]), 2)

    def test_a_tls_cluster_takes_its_ca_s_nodes_and_refuses_a_node_without_tls(self):
        certs = os.path.join(self.tmp, "certs")
        subprocess.run([os.path.join(SOURCE, "scripts", "make-certs.sh"), certs, "a", "b"], check=True,
                       capture_output=True, timeout=60)

        def tls(name):
            return {"cluster.tls_certificate": os.path.join(certs, f"{name}.pem"),
                    "cluster.tls_key": os.path.join(certs, f"{name}.key"), "cluster.tls_ca": os.path.join(certs, "ca.pem")}

        with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0, overrides=tls("a")) as a:
            gridtrain.torch.ElasticAverager(a, linear())
            with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0,
                                overrides=tls("b")) as b:
                gridtrain.torch.ElasticAverager(b, linear())
                self.assertEqual(len(a.grid()["nodes"]), 2)
            plain = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0)
            with self.assertRaises(gridtrain.RejectedError) as raised:
                gridtrain.torch.ElasticAverager(plain, linear())
            self.assertIn("TLS", str(raised.exception))
            plain.close()
        with self.assertRaisesRegex(gridtrain.ConfigError, "cluster.tls_"):
            gridtrain.Node(CONFIG, listen="127.0.0.1:0", overrides={"cluster.tls_ca": os.path.join(certs, "ca.pem")})


if __name__ == "__main__":
    run_tests()
