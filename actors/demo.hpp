#pragma once
// `gridnode demo`: a local cluster of N `gridnode run` processes of this same executable on loopback, training
// the MLP 784-256-128-10 on Fashion-MNIST with elastic averaging (2-D grid, α = 0.3, θ = 1), each on its own
// shard. It relays their progress lines prefixed "[node i]", prints every node's final test accuracy, and
// writes to the output directory: cluster.yaml (the config the nodes ran), node-<i>.csv and the merged
// metrics.csv, node-<i>.log (each node's whole output) and accuracy.png (test accuracy against the time since
// each node started training, one curve per node; gnuplot). Ctrl-C stops every node. Each node runs OpenBLAS on
// one thread.

#include <string>
#include <vector>

namespace gridtrain::actors {

struct DemoArgs {
  int nodes = 4;
  int epochs = 10;  // of each node over its 1/nodes shard: 4 nodes take about 15 s on 2 cores
  std::string out = "demo-out";
  std::vector<std::string> overrides;  // --set key=value, passed on to every node
};

// Returns the exit code: 0 if every node finished, 2 for bad arguments, 1 otherwise.
int demo(const DemoArgs& args, const char* argv0);

}  // namespace gridtrain::actors
