"""A small PyTorch training process for the tests: a node averaging a tiny model on random data, until SIGTERM or
SIGINT (then it leaves cleanly and exits 0) or --steps are done. Its node takes listen, seed and wait_members from
the environment the tests set (as gridtrain.launch does).

    worker.py --config FILE [--model mlp|other] [--steps N] [--set KEY=VALUE]... [--report-every N]
"""

import argparse
import signal
import sys
import time

import torch

import gridtrain
import gridtrain.torch

stopping = False


def stop(signum, frame):
    global stopping
    stopping = True


def model_of(kind):
    torch.manual_seed(1)
    width = 16 if kind == "mlp" else 17  # "other": the same layers, another shape
    return torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 2))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--model", default="mlp")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--report-every", type=int, default=100)
    p.add_argument("--step-ms", type=float, default=1.0)
    p.add_argument("--set", action="append", default=[])
    a = p.parse_args()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    torch.set_num_threads(1)
    model = model_of(a.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with gridtrain.Node(config=a.config, overrides=a.set) as node:
            averager = gridtrain.torch.ElasticAverager(node, model)
            print(f"worker: in the cluster as {node.address}, metrics port {node.metrics_port}; "
                  f"the others finished {node.cluster_epochs_done()} epochs", flush=True)
            step = 0
            while not stopping and (a.steps == 0 or step < a.steps):
                x = torch.randn(32, 8)
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), torch.zeros(32, 2))
                loss.backward()
                optimizer.step()
                averager.step(samples=32)
                step += 1
                if step % a.report_every == 0:
                    node.report_epoch(step // a.report_every, loss=loss.item(), test_accuracy=0.5)
                time.sleep(a.step_ms / 1000)
            print(f"worker: leaving after {step} steps, {node.stats()['rounds_done']} rounds", flush=True)
    except gridtrain.Error as e:
        print(f"worker: {type(e).__name__} (exit code {e.exit_code}): {e}", flush=True)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
