"""Python nodes in a cluster, as processes: what `gridnode status` and /metrics show of them; the Fashion-MNIST
example (examples/pytorch/fashion_mnist_mlp.py) on 2 and 4 processes against one plain PyTorch process that trains
on all the data with the same total samples; and kill -9 of a trainer, of the one hosting the GridMaster, and a
restart that rejoins and warm-starts. The accuracy bound is 1 point of test accuracy."""

import json
import os
import signal
import subprocess
import time
import urllib.request

from harness import (BUILD, EXAMPLES, GRIDNODE, MLP, PYTHON, WORKER, ClusterRun, Process, TestCase,
                     final_accuracy, run_tests)

CONFIG = os.path.join(EXAMPLES, "cluster.yaml")
# 4 nodes each doing a quarter of the steps: 1.1-1.5 points below one process at 3 epochs, and at 5 on a machine
# whose nodes run 10-20K samples/s each (0.8761-0.8776 against 0.8881); 0.7-1.0 at 8.
EPOCHS = 10
# The kill and restart: the others run this many epochs, so that they are still training when the restarted process
# (Python, PyTorch, the data and the checkpoint loaded again: 8 s there) joins them.
RESTART_EPOCHS = 2 * EPOCHS
BOUND = 0.01
TRAIN_SAMPLES = 60000  # Fashion-MNIST's training set


def status(seed):
    done = subprocess.run([GRIDNODE, "status", "--seed", seed, "--json"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"gridnode status failed: {done.stderr}")
    return json.loads(done.stdout)


class ClusterTest(TestCase):
    reference = None

    @classmethod
    def setUpClass(cls):
        plain = Process([PYTHON, MLP, "--epochs", str(EPOCHS), "--plain"],
                        env={"PYTHONPATH": os.path.join(BUILD, "python")}, label="one process")
        assert plain.wait(timeout=300) == 0, plain.output()
        cls.reference = final_accuracy(plain)
        print(f"one PyTorch process on all the data, {EPOCHS} epochs: test accuracy {cls.reference:.4f}", flush=True)

    def check_close_to_one_process(self, run, ranks):
        for r in ranks:
            accuracy = final_accuracy(run.ranks[r])
            self.assertIsNotNone(accuracy, f"rank {r} printed no final accuracy")
            self.assertGreaterEqual(accuracy, self.reference - BOUND,
                                    f"rank {r}: {accuracy:.4f} against one process's {self.reference:.4f}")

    def test_a_python_node_shows_in_gridnode_status_and_serves_its_metrics(self):
        run = ClusterRun(WORKER, 2, ["--config", CONFIG, "--report-every", "50", "--set", "metrics.listen=127.0.0.1:0",
                                     "--set", "metrics.log_format=json"])
        run.start()
        first = run.ranks[0]
        port = int(first.wait_for_line(r"metrics port (\d+)", 60).group(1))
        self.assertIsNotNone(run.ranks[1].wait_for_line(r"in the cluster", 60))
        deadline = time.monotonic() + 30
        while True:
            view = status(run.address)
            nodes = view["nodes"]
            if len(nodes) == 2 and all(n["samples"] > 0 and n["test_accuracy"] == 0.5 and n["rounds_done"] > 0
                                       and n["epochs_done"] > 0 for n in nodes):
                break
            self.assertLess(time.monotonic(), deadline, f"status never showed both nodes training: {view}")
            time.sleep(0.5)
        self.assertIn(run.address, [n["address"] for n in nodes])
        self.assertEqual(view["dims"], 1)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        for name in ["gridtrain_rounds_total", "gridtrain_samples_total", "gridtrain_test_accuracy",
                     "gridtrain_bytes_sent_total"]:
            self.assertIn(name, metrics)
        # JSON logs: the node's own events are JSON objects, one per line.
        events = [json.loads(line) for line in first.lines if line.startswith("{")]
        self.assertTrue({"listening", "joined", "epoch"} <= {e.get("event") for e in events}, events[:5])
        # A node that joins now learns how far the others are (to take up their schedule, as the MLP example does).
        joiner = run.start_rank(2)
        others = min(n["epochs_done"] for n in nodes)
        done = joiner.wait_for_line(r"the others finished (\d+) epochs", 60)
        self.assertIsNotNone(done, joiner.output())
        self.assertGreaterEqual(int(done.group(1)), others)
        joiner.stop(signal.SIGTERM)
        # A signal makes the node leave cleanly; the cluster then has one member.
        run.ranks[1].proc.send_signal(signal.SIGTERM)
        self.assertEqual(run.ranks[1].wait(timeout=30), 0)
        deadline = time.monotonic() + 15
        while len(status(run.address)["nodes"]) != 1:
            self.assertLess(time.monotonic(), deadline, "the node that was stopped did not leave")
            time.sleep(0.2)

    def test_two_and_four_processes_train_within_a_point_of_one(self):
        for nodes in (2, 4):
            with self.subTest(nodes=nodes):
                run = ClusterRun(MLP, nodes, ["--epochs", str(EPOCHS)]).start()
                codes = run.wait(timeout=400)
                self.assertEqual(set(codes.values()), {0}, codes)
                self.check_close_to_one_process(run, range(nodes))
                for r in range(nodes):
                    # Each took its share of the first epoch: one that counted fewer members took more and lagged.
                    first = run.ranks[r].wait_for_line(r"^epoch 1 samples (\d+) ", 0)
                    self.assertLessEqual(int(first.group(1)), TRAIN_SAMPLES // nodes, run.ranks[r].output())
                    # They averaged: every node completed rounds.
                    rounds = run.ranks[r].wait_for_line(rf"epoch {EPOCHS} .* rounds (\d+)", 0)
                    self.assertGreater(int(rounds.group(1)), 0)

    def test_a_trainer_killed_and_restarted_rejoins_and_warm_starts(self):
        run = ClusterRun(MLP, 4, lambda rank: ["--epochs", str(RESTART_EPOCHS)] +
                         (["--checkpoint", checkpoint] if rank == 2 else []))
        checkpoint = os.path.join(run.tmp, "rank2.pt")
        run.start()
        self.assertIsNotNone(run.ranks[2].wait_for_line(r"^epoch 1 ", 200), run.ranks[2].output())
        deadline = time.monotonic() + 60  # the example saves its checkpoint after the epoch's line
        while not os.path.exists(checkpoint):
            self.assertLess(time.monotonic(), deadline, "rank 2 wrote no checkpoint after its first epoch")
            time.sleep(0.05)
        run.ranks[2].stop(signal.SIGKILL)
        killed = run.ranks[2]
        restarted = run.start_rank(2)
        self.assertIsNotNone(restarted.wait_for_line(r"warm start: copied the model of node", 60), restarted.output())
        codes = run.wait(timeout=400)
        self.assertEqual(set(codes.values()), {0}, codes)
        self.assertIsNone(restarted.wait_for_line(r"^epoch 1 ", 0), "the restart did not resume from epoch 1")
        self.assertNotEqual(killed.pid, restarted.pid)
        self.check_close_to_one_process(run, range(4))

    def test_the_others_finish_when_the_node_hosting_the_grid_master_is_killed(self):
        run = ClusterRun(MLP, 4, ["--epochs", str(EPOCHS)]).start()
        # After its first epoch: the survivors share its part of the data from their next epoch on (the example
        # cuts one shard per member, each epoch).
        self.assertIsNotNone(run.ranks[0].wait_for_line(r"^epoch 1 ", 200), run.ranks[0].output())
        run.ranks[0].stop(signal.SIGKILL)  # rank 0 bootstrapped the cluster: it hosts the GridMaster
        survivors = [1, 2, 3]
        for r in survivors:
            self.assertEqual(run.ranks[r].wait(timeout=400), 0, run.ranks[r].output())
        self.assertTrue(any(run.ranks[r].wait_for_line(r"took over as the cluster's GridMaster", 0)
                            for r in survivors), "no survivor took over as GridMaster")
        self.check_close_to_one_process(run, survivors)


if __name__ == "__main__":
    run_tests()
