"""The PyTorch front end in one process: the contract between the user's optimizer and the averaging, the host
mirror, checkpoints of the averager, and what misuse raises. Two real nodes (each with its own actor system, data
plane and TCP ports on loopback) average between them here."""

import os
import threading
import time

import torch

import gridtrain
import gridtrain.torch
from harness import EXAMPLES, TestCase, run_tests

CONFIG = os.path.join(EXAMPLES, "cluster.yaml")


def linear():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


class TwoNodes:
    """Node a bootstraps, node b joins it; each averages its own copy of `make()`."""

    def __init__(self, make=linear, **averager_args):
        self.a = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0)
        self.a_model = make()
        self.A = gridtrain.torch.ElasticAverager(self.a, self.a_model, **averager_args)
        self.b = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=self.a.address, wait_members=0)
        self.b_model = make()
        self.B = gridtrain.torch.ElasticAverager(self.b, self.b_model, **averager_args)

    def close(self):
        self.b.close()
        self.a.close()


class FrontEndTest(TestCase):
    def test_parameters_move_only_at_step_and_the_nodes_meet_at_their_mean(self):
        nodes = TwoNodes()
        try:
            # CPU parameters are views of the node's arena: no copy per round.
            arena = nodes.A._arena
            for p in nodes.a_model.parameters():
                self.assertTrue(arena.data_ptr() <= p.data_ptr() < arena.data_ptr() + arena.numel() * 4)
            with torch.no_grad():
                for p in nodes.a_model.parameters():
                    p.fill_(0.0)
                for p in nodes.b_model.parameters():
                    p.fill_(10.0)
            moved_between_steps = 0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                before = [p.detach().clone() for p in nodes.b_model.parameters()]
                time.sleep(0.005)  # rounds run meanwhile; their pulls must wait for step()
                moved_between_steps += sum(not torch.equal(x, p) for x, p in zip(before, nodes.b_model.parameters()))
                nodes.A.step(samples=1)
                nodes.B.step(samples=1)
                a_w = nodes.a_model.weight.detach()
                b_w = nodes.b_model.weight.detach()
                if (a_w - 5).abs().max() < 1e-3 and (b_w - 5).abs().max() < 1e-3:
                    break
            self.assertEqual(moved_between_steps, 0, "a parameter moved outside step()")
            self.assertLess((nodes.a_model.weight.detach() - 5).abs().max().item(), 1e-3)
            self.assertLess((nodes.b_model.bias.detach() - 5).abs().max().item(), 1e-3)
            self.assertGreater(nodes.a.stats()["rounds_done"], 0)
            self.assertEqual(nodes.A.steps, nodes.A.samples)
        finally:
            nodes.close()

    def test_a_staleness_bound_holds_each_step_past_it_until_a_round_completes_and_never_a_node_alone(self):
        # every_steps far beyond the test: the pacing allows no round, so rounds start only at the bound.
        bound = {"allreduce.staleness_bound": 1, "allreduce.every_steps": 1000000}
        alone = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0, overrides=bound)
        try:
            averager = gridtrain.torch.ElasticAverager(alone, linear())
            for _ in range(50):
                averager.step(samples=1)
            self.assertEqual(alone.report_epoch(1)["waited_s"], 0.0)  # nothing to wait for
        finally:
            alone.close()
        a = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0, overrides=bound)
        A = gridtrain.torch.ElasticAverager(a, linear())  # joins: a.address is known from here
        b = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0, overrides=bound)
        stop = threading.Event()

        def b_trains(averager):
            try:
                while not stop.is_set():
                    averager.step(samples=1)
            except gridtrain.NodeError:
                pass  # closed under it

        b_thread = None
        try:
            b_thread = threading.Thread(target=b_trains, args=(gridtrain.torch.ElasticAverager(b, linear()),))
            b_thread.start()
            deadline = time.monotonic() + 30
            while a.stats()["rounds_done"] == 0 and time.monotonic() < deadline:  # the line is up
                A.step(samples=1)
            start = a.stats()["rounds_done"]
            self.assertGreater(start, 0)
            for _ in range(20):
                A.step(samples=1)
            # Each step saw a round complete since the one before, or waited for one; none would run without.
            self.assertGreaterEqual(a.stats()["rounds_done"] - start, 10)
            self.assertGreater(a.report_epoch(1)["waited_s"], 0.0)
        finally:
            stop.set()
            b.close()  # ends a wait of b's thread
            if b_thread:
                b_thread.join()
            a.close()

    def test_a_joiner_starts_from_its_peers_parameters_before_its_first_step(self):
        a = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0)
        try:
            a_model = linear()
            gridtrain.torch.ElasticAverager(a, a_model)
            with torch.no_grad():
                a_model.weight.fill_(3.0)
            joiner_model = linear()
            with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0) as b:
                gridtrain.torch.ElasticAverager(b, joiner_model)
                self.assertTrue(torch.all(joiner_model.weight.detach() == 3.0))
                self.assertTrue(torch.equal(joiner_model.bias.detach(), a_model.bias.detach()))
        finally:
            a.close()

    def test_a_model_with_a_host_mirror_averages_too(self):
        # share_memory=False: the path a model on a GPU takes (a flat tensor on its device, the arena its mirror),
        # here with CPU tensors; on a CPU the copies are synchronous.
        nodes = TwoNodes(share_memory=False)
        try:
            arena = nodes.A._arena
            p = next(nodes.a_model.parameters())
            self.assertFalse(arena.data_ptr() <= p.data_ptr() < arena.data_ptr() + arena.numel() * 4)
            with torch.no_grad():
                for p in nodes.a_model.parameters():
                    p.fill_(-4.0)
                for p in nodes.b_model.parameters():
                    p.fill_(8.0)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                nodes.A.step()
                nodes.B.step()
                time.sleep(0.002)
                if (nodes.a_model.weight.detach() - 2).abs().max() < 1e-3 and \
                        (nodes.b_model.weight.detach() - 2).abs().max() < 1e-3:
                    break
            self.assertLess((nodes.a_model.weight.detach() - 2).abs().max().item(), 1e-3)
            self.assertLess((nodes.b_model.weight.detach() - 2).abs().max().item(), 1e-3)
            stats = nodes.A.mirror_stats()
            self.assertGreater(stats["downloads"], 0)
            self.assertGreater(stats["uploads"], 0)
        finally:
            nodes.close()

    def test_the_averager_state_goes_into_a_checkpoint_and_comes_back(self):
        with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0) as node:
            model = linear()
            averager = gridtrain.torch.ElasticAverager(node, model)
            for _ in range(3):
                averager.step(samples=8)
            state = averager.state_dict()
            self.assertEqual((state["steps"], state["samples"]), (3, 24))
            path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"averager-{os.getpid()}.pt")
            torch.save({"averager": state}, path)
            loaded = torch.load(path)["averager"]
            os.remove(path)
        with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0) as node:
            again = gridtrain.torch.ElasticAverager(node, linear())
            again.load_state_dict(loaded)
            self.assertEqual((again.steps, again.samples), (3, 24))
        with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0) as node:
            other = gridtrain.torch.ElasticAverager(node, torch.nn.Linear(4, 2))
            with self.assertRaisesRegex(ValueError, "another model"):
                other.load_state_dict(loaded)
            with self.assertRaisesRegex(ValueError, "not an ElasticAverager state"):
                other.load_state_dict({"steps": 1})

    def test_the_outer_step_meets_at_the_mean_and_its_state_goes_into_a_checkpoint(self):
        # allreduce.outer nesterov with rate 1 and no momentum is plain averaging: the two meet at their mean, and
        # the outer parameters the rounds made are in the averager's state, restored by a node that copies nobody.
        nesterov = {"allreduce.outer": "nesterov", "allreduce.outer_rate": 1, "allreduce.outer_momentum": 0}
        a = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0, overrides=nesterov)
        try:
            a_model = linear()
            A = gridtrain.torch.ElasticAverager(a, a_model)
            with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0,
                                overrides=nesterov) as b:
                b_model = linear()
                B = gridtrain.torch.ElasticAverager(b, b_model)
                with torch.no_grad():
                    for p in a_model.parameters():
                        p.fill_(0.0)
                    for p in b_model.parameters():
                        p.fill_(6.0)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    A.step()
                    B.step()
                    time.sleep(0.002)
                    if (a_model.weight.detach() - 3).abs().max() < 1e-3 and \
                            (b_model.weight.detach() - 3).abs().max() < 1e-3:
                        break
                self.assertLess((a_model.weight.detach() - 3).abs().max().item(), 1e-3)
                self.assertLess((b_model.bias.detach() - 3).abs().max().item(), 1e-3)
                state = A.state_dict()
            self.assertIn("outer", state)
            self.assertLess((state["outer"] - 3).abs().max().item(), 1e-3)
        finally:
            a.close()
        with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0, overrides=nesterov) as node:
            again = gridtrain.torch.ElasticAverager(node, linear())
            again.load_state_dict(state)
            self.assertTrue(torch.equal(again.state_dict()["outer"], state["outer"]))
            with self.assertRaisesRegex(ValueError, "float32 tensors of 8 elements"):
                again.load_state_dict(dict(state, outer=torch.zeros(3)))

    def test_misuse_raises_a_clear_exception(self):
        with self.assertRaisesRegex(TypeError, "config: expected the path of a YAML file"):
            gridtrain.Node(config=5)
        with self.assertRaisesRegex(TypeError, "overrides: expected a dict"):
            gridtrain.Node(CONFIG, overrides=3)
        with self.assertRaisesRegex(TypeError, "seed: expected"):
            gridtrain.Node(CONFIG, seed=7000)
        with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0) as node:
            with self.assertRaisesRegex(TypeError, "model: expected a torch.nn.Module"):
                gridtrain.torch.ElasticAverager(node, "model")
            with self.assertRaisesRegex(TypeError, "parameter 'weight' is torch.float16"):
                gridtrain.torch.ElasticAverager(node, torch.nn.Linear(3, 2).half())
            with self.assertRaisesRegex(ValueError, "no parameters to average"):
                gridtrain.torch.ElasticAverager(node, torch.nn.ReLU())
            with self.assertRaisesRegex(ValueError, "mirror_every"):
                gridtrain.torch.ElasticAverager(node, linear(), mirror_every=0)
            model = linear()
            averager = gridtrain.torch.ElasticAverager(node, model)
            with self.assertRaisesRegex(ValueError, "one model per node"):
                gridtrain.torch.ElasticAverager(node, linear())
            model.weight.data = model.weight.data.clone()  # what model.to(other device) does
            with self.assertRaisesRegex(RuntimeError, "replaced after the averager was made"):
                averager.step()
        with self.assertRaisesRegex(gridtrain.NodeError, "closed"):
            averager._node._step(1)

    def test_an_exception_in_the_training_loop_leaves_the_cluster(self):
        a = gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed="", wait_members=0)
        try:
            gridtrain.torch.ElasticAverager(a, linear())
            with self.assertRaisesRegex(ZeroDivisionError, "boom"):
                with gridtrain.Node(CONFIG, listen="127.0.0.1:0", seed=a.address, wait_members=0) as b:
                    gridtrain.torch.ElasticAverager(b, linear())
                    self.assertEqual(len(a.grid()["nodes"]), 2)
                    raise ZeroDivisionError("boom")
            self.assertTrue(b.closed)
            deadline = time.monotonic() + 10
            while len(a.grid()["nodes"]) != 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(len(a.grid()["nodes"]), 1, "the node that raised did not leave")
        finally:
            a.close()


if __name__ == "__main__":
    run_tests()
