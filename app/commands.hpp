#pragma once
// gridnode's commands (README.md, "The command line"; a contract that scripts and tests rely on). Each returns
// the process's exit code; errors go to stderr, one line each, starting with "error:". This is the edge where an
// Error becomes output.

#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/result.hpp"

namespace gridtrain::app {

enum ExitCode : int { kOk = 0, kInternal = 1, kBadInput = 2, kRejected = 3 };

// Prints "error: <message>" to stderr and returns `code`.
int fail(int code, const std::string& message);
// A bad-input error (config, command line, data file): exit code 2.
int fail(const Error& error);

struct CheckConfigArgs {
  std::string file;
  std::vector<std::string> overrides;
  bool print = false;
  bool schema = false;
};

// gridnode check-config FILE [--set key=value]... [--print] | --schema
int check_config(const CheckConfigArgs& args);

struct RunArgs {
  std::string config_file;
  std::string seed_address;  // HOST:PORT of a member to join through, or a list tried in order; "" = bootstrap
  std::string listen;
  std::vector<std::string> overrides;
  std::string name;      // stable across restarts: names the checkpoint file and the CSV rows
  int shard_index = 0;   // data.shard node: this node's shard, of shard_count
  int shard_count = 1;
  bool resume = false;
  // As --resume where this node's checkpoint exists; otherwise trains from the start and says so (a service's
  // start, which is a restart most times and the first start once).
  bool resume_if_present = false;
  int wait_members = 0;  // train only once the cluster has this many members (gridnode demo's start line)
  std::string log_format;  // "" = metrics.log_format's
  std::string log_level;   // "" = metrics.log_level's
};

// gridnode run: one node, until its training is done or a signal stops it.
int run(const RunArgs& args);

struct StatusArgs {
  std::string seed_address;
  bool json = false;
  // A node's config: the cluster token and TLS files its cluster section names (the options below override them).
  std::string config_file;
  std::string token_file;  // "" = a cluster without a token
  // A cluster with TLS: a certificate its CA signed, its key, and the CA (as cluster.tls_*); all or none.
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_ca;
};

// gridnode status: the live grid, asked of any member.
int status(const StatusArgs& args);

struct PlotArgs {
  std::string csv;           // a metrics CSV (metrics.csv), of one node or many
  std::string out = "plots";  // the folder the PNGs go to
};

// gridnode plot: accuracy.png, loss.png, samples_per_s.png and tau.png in args.out (telemetry/metrics_plot.hpp).
// 0 once they are written, 2 for a bad CSV or folder, 1 if gnuplot failed.
int plot(const PlotArgs& args);

// The same plots of `csv`, into `out_dir`, titled `title` (plain: no quote); what `gridnode plot` and the demo
// draw. Error: a bad CSV or folder (bad input), or gnuplot failed (Error::key "gnuplot").
Status draw_metrics_plots(const std::string& csv, const std::string& out_dir, const std::string& title);

struct DemoArgs {
  int nodes = 4;
  int epochs = 10;  // of each node over its 1/nodes shard: 4 nodes take about 15 s on 2 cores
  std::string out = "demo-out";
  std::vector<std::string> overrides;  // --set key=value, passed on to every node
};

// gridnode demo: N `gridnode run` processes of this executable on loopback (app/demo.cpp says what it writes).
// 0 if every node finished, 2 for bad arguments, 1 otherwise.
int demo(const DemoArgs& args, const char* argv0);

struct ChaosArgs {
  int nodes = 6;
  double minutes = 30;
  int every = 20;         // seconds between two faults
  int stop_seconds = 8;   // how long a stopped node stays stopped
  int faults = 0;         // stop after this many faults (0: when the minutes are up)
  bool target_grid_master = false;  // every fault hits the node hosting the GridMaster
  bool kills_only = false;          // every fault is a kill
  // Every other fault cuts the network (app/net_lab.hpp; root): one node from the rest, a minority from a
  // majority, two halves, in turn, for cut_seconds, then heals it.
  bool partitions = false;
  int cut_seconds = 10;
  unsigned random_seed = 1;
  std::string out = "chaos-out";
  std::vector<std::string> overrides;  // --set key=value, passed on to every node
};

// gridnode chaos: a local training cluster under random kills, stops, restarts and (--partitions) cuts of the
// network (app/chaos.cpp says what it measures and prints). 0 if the cluster recovered from every fault and no cut
// had two GridMasters at once, 2 for bad arguments, 1 otherwise.
int chaos(const ChaosArgs& args, const char* argv0);

}  // namespace gridtrain::app
