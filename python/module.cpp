// _gridtrain: the Python binding of a hosted node (python/hosted_node.hpp) and of its model's store. The torch glue
// is Python (python/gridtrain/torch.py); nothing here includes torch: the store's arena is exported through the
// buffer protocol, so it works with Debian's PyTorch 1.13 and with any newer one.
//
// Every call that may block or touch the cluster releases the GIL. A Failure becomes the exception class of its
// exit code (gridtrain.ConfigError 2, RejectedError 3, NodeError 1; all gridtrain.Error) with the text gridnode
// prints after "error: "; anything else a C++ library throws becomes a Python exception too (pybind11's mapping):
// nothing unwinds into the interpreter.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "python/hosted_node.hpp"
#include "telemetry/epoch_log.hpp"

namespace py = pybind11;
using gridtrain::learner::ParameterStore;
using gridtrain::python::Failure;
using gridtrain::python::HostedNode;

namespace {

// The exception classes, made once at import (PyErr_NewException keeps them alive in the module).
PyObject* error_class = nullptr;
PyObject* config_error_class = nullptr;
PyObject* rejected_error_class = nullptr;
PyObject* node_error_class = nullptr;

PyObject* new_error_class(py::module_& m, const char* name, PyObject* bases, int exit_code, const char* doc) {
  const std::string qualified = std::string("gridtrain.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  PyObject_SetAttrString(cls, "exit_code", py::int_(exit_code).ptr());
  m.add_object(name, py::handle(cls));
  return cls;
}

void raise_failure(const Failure& f) {
  PyObject* cls = f.code() == gridtrain::app::kBadInput   ? config_error_class
                  : f.code() == gridtrain::app::kRejected ? rejected_error_class
                                                          : node_error_class;
  PyErr_SetString(cls, f.what());
}

// A writable, C-contiguous buffer of float32 of exactly `floats` floats, or a ConfigError-like TypeError/ValueError
// naming `what`.
float* float_buffer(const py::buffer& b, std::size_t floats, const char* what, py::buffer_info& info) {
  info = b.request(/*writable=*/true);
  if (info.itemsize != 4 || (info.format != py::format_descriptor<float>::format() && info.format != "f"))
    throw py::type_error(std::string(what) + ": expected a buffer of float32, found format '" + info.format + "'");
  if (static_cast<std::size_t>(info.size) != floats)
    throw py::value_error(std::string(what) + ": expected " + std::to_string(floats) + " floats, found " +
                          std::to_string(info.size));
  py::ssize_t stride = info.itemsize;
  for (py::ssize_t d = info.ndim; d-- > 0;) {
    if (info.shape[d] != 1 && info.strides[d] != stride)
      throw py::value_error(std::string(what) + ": expected a contiguous buffer");
    stride *= info.shape[d];
  }
  return static_cast<float*>(info.ptr);
}

// Runs `wait(interrupted)` without the GIL; `interrupted` takes it back to ask Python for a signal (Ctrl-C), and the
// signal's exception (KeyboardInterrupt) is what the call raises then.
template <class Wait>
void blocking_wait(Wait&& wait) {
  bool interrupted = false;
  try {
    py::gil_scoped_release release;
    wait(std::function<bool()>([&interrupted] {
      py::gil_scoped_acquire acquire;
      if (!interrupted && PyErr_CheckSignals() != 0) interrupted = true;
      return interrupted;
    }));
  } catch (const Failure&) {
    if (interrupted) throw py::error_already_set();
    throw;
  }
}

// The model's store as Python sees it: its arena through the buffer protocol, and the deferred updates.
struct Model {
  std::shared_ptr<ParameterStore> store;
};

}  // namespace

PYBIND11_MODULE(_gridtrain, m) {
  m.doc() = "gridtrain's node, hosted in this process (the C++ part of the gridtrain package)";

  error_class = new_error_class(m, "Error", nullptr, gridtrain::app::kInternal,
                                "A gridtrain error; exit_code is what gridnode would exit with for it.");
  const py::tuple config_bases = py::make_tuple(py::handle(error_class), py::handle(PyExc_ValueError));
  config_error_class = new_error_class(m, "ConfigError", config_bases.ptr(), gridtrain::app::kBadInput,
                                       "Bad input: a config (file:line:col), an option, an override.");
  rejected_error_class = new_error_class(m, "RejectedError", error_class, gridtrain::app::kRejected,
                                         "The cluster refused the node: another model, protocol or token.");
  const py::tuple node_bases = py::make_tuple(py::handle(error_class), py::handle(PyExc_RuntimeError));
  node_error_class = new_error_class(m, "NodeError", node_bases.ptr(), gridtrain::app::kInternal,
                                     "The node could not join, or ended: no seed answered, it was stopped.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Failure& f) {
      raise_failure(f);
    }
  });

  py::class_<Model>(m, "Model", py::buffer_protocol(), R"(The node's model: one float32 arena, tensor after tensor.
Exported through the buffer protocol (writable): torch.frombuffer(model, dtype=torch.float32) is a view of it.)")
      .def_buffer([](Model& self) {
        auto arena = self.store->owner_arena();
        return py::buffer_info(arena.data(), sizeof(float), py::format_descriptor<float>::format(), 1,
                               {static_cast<py::ssize_t>(arena.size())}, {static_cast<py::ssize_t>(sizeof(float))});
      })
      .def_property_readonly("size", [](const Model& self) { return self.store->size(); }, "floats in the arena")
      .def_property_readonly("signature", [](const Model& self) { return self.store->signature(); },
                             "the hash of the tensors' names and shapes that the cluster compares")
      .def_property_readonly(
          "tensors",
          [](const Model& self) {
            py::list out;
            for (std::size_t i = 0; i < self.store->tensor_count(); ++i) {
              const auto& t = self.store->tensor(i);
              out.append(py::make_tuple(t.name, py::tuple(py::cast(t.shape)), t.offset, t.size));
            }
            return out;
          },
          "(name, shape, offset, size) of every tensor, in arena order")
      .def(
          "apply_pending", [](Model& self) { return self.store->apply_deferred(); },
          py::call_guard<py::gil_scoped_release>(),
          "Adds the rounds' pending updates to the arena and clears them; the floats updated (0: none pending). "
          "Call it from the thread that writes the model (the training loop), never while its optimizer runs.")
      .def(
          "take_pending",
          [](Model& self, const py::buffer& out) {
            py::buffer_info info;
            float* into = float_buffer(out, self.store->size(), "take_pending", info);
            std::vector<ParameterStore::Range> taken;
            {
              py::gil_scoped_release release;
              taken = self.store->take_deferred({into, self.store->size()});
            }
            py::list ranges;
            for (const auto& r : taken) ranges.append(py::make_tuple(r.offset, r.size));
            return ranges;
          },
          "For a model kept elsewhere (a GPU) with the arena as its host mirror: moves the pending updates into "
          "`out` (float32, as large as the arena) and returns the (offset, size) ranges written; the caller adds "
          "them to its model.")
      .def(
          "update_mirror",
          [](Model& self, const py::buffer& in) {
            py::buffer_info info;
            const float* from = float_buffer(in, self.store->size(), "update_mirror", info);
            py::gil_scoped_release release;
            self.store->update_mirror({from, self.store->size()});
          },
          "For a host mirror: the model as it is now (float32, as large as the arena) into the arena; pending "
          "updates stay pending.")
      .def(
          "read",
          [](const Model& self, const py::buffer& out) {
            py::buffer_info info;
            float* into = float_buffer(out, self.store->size(), "read", info);
            py::gil_scoped_release release;
            self.store->fetch({into, self.store->size()});
          },
          "The model as the cluster sees it (the arena plus the pending updates) into `out`.")
      .def_property_readonly("has_outer", [](const Model& self) { return self.store->has_outer(); },
                             "whether the rounds made outer-step state (allreduce.outer nesterov)")
      .def(
          "outer_state",
          [](const Model& self, const py::buffer& outer, const py::buffer& velocity) {
            py::buffer_info outer_info, velocity_info;
            const std::size_t n = self.store->size();
            float* o = float_buffer(outer, n, "outer_state", outer_info);
            float* v = float_buffer(velocity, n, "outer_state", velocity_info);
            py::gil_scoped_release release;
            self.store->outer_state({o, n}, {v, n});
          },
          "The outer step's state into `outer` and `velocity` (float32, each as large as the arena): for a "
          "checkpoint.")
      .def(
          "set_outer_state",
          [](Model& self, const py::buffer& outer, const py::buffer& velocity) {
            py::buffer_info outer_info, velocity_info;
            const std::size_t n = self.store->size();
            const float* o = float_buffer(outer, n, "set_outer_state", outer_info);
            const float* v = float_buffer(velocity, n, "set_outer_state", velocity_info);
            py::gil_scoped_release release;
            self.store->set_outer_state({o, n}, {v, n});
          },
          "Restores the outer step's state of a checkpoint (as outer_state wrote it).");

  py::class_<HostedNode>(m, "Node", R"(A gridtrain node in this process (see gridtrain.Node).)")
      .def(py::init([](const std::string& config, const std::string& listen, const std::string& seed,
                       const std::vector<std::string>& overrides, const std::string& name, int wait_members,
                       const std::string& log_format, const std::string& log_level) {
             gridtrain::app::RunArgs args;
             args.config_file = config;
             args.listen = listen;
             args.seed_address = seed;
             args.overrides = overrides;
             args.name = name;
             args.wait_members = wait_members;
             args.log_format = log_format;
             args.log_level = log_level;
             py::gil_scoped_release release;
             return std::make_unique<HostedNode>(args);
           }),
           py::arg("config"), py::arg("listen") = "", py::arg("seed") = "",
           py::arg("overrides") = std::vector<std::string>{}, py::arg("name") = "", py::arg("wait_members") = 0,
           py::arg("log_format") = "", py::arg("log_level") = "")
      .def(
          "make_model",
          [](HostedNode& self, const std::vector<std::pair<std::string, std::vector<int>>>& tensors) {
            std::vector<gridtrain::learner::TensorSpec> specs;
            for (const auto& [name, shape] : tensors) specs.push_back({name, shape.empty() ? std::vector<int>{1} : shape});
            return Model{self.make_model(std::move(specs))};
          },
          py::arg("tensors"), "The model's (name, shape) list: its store, zeros until the caller fills it.")
      .def(
          "join", [](HostedNode& self) { blocking_wait([&](const auto& interrupted) { self.join(interrupted); }); },
          "Joins (or bootstraps) the cluster; blocks until the node is in. Ctrl-C stops it.")
      .def(
          "wait_for_members",
          [](HostedNode& self) {
            blocking_wait([&](const auto& interrupted) { self.wait_for_members(interrupted); });
          },
          "The start line: blocks until the cluster has wait_members members, or one of them trains already.")
      .def("step", &HostedNode::step, py::arg("samples"), py::call_guard<py::gil_scoped_release>(),
           "One more optimizer step over `samples` samples; True when it allowed the lines one more round.")
      .def(
          "report_epoch",
          [](HostedNode& self, int epoch, double loss, double test_loss, double test_accuracy) {
            gridtrain::learner::EpochReport r;
            {
              py::gil_scoped_release release;
              r = self.report_epoch({.epoch = epoch, .loss = loss, .test_loss = test_loss, .test_accuracy = test_accuracy});
            }
            py::dict out;
            out["epoch"] = r.epoch;
            out["samples"] = r.samples;
            out["time_s"] = r.time_s;
            out["samples_per_s"] = r.samples_per_s;
            out["loss"] = r.loss;
            out["test_loss"] = r.test_loss;
            out["test_accuracy"] = r.test_accuracy;
            out["tau"] = r.tau;
            out["rounds"] = r.rounds;
            out["waited_s"] = r.waited_s;
            return out;
          },
          py::arg("epoch"), py::arg("loss") = 0.0, py::arg("test_loss") = 0.0, py::arg("test_accuracy") = -1.0)
      .def(
          "stats",
          [](const HostedNode& self) {
            gridtrain::actors::NodeStats s;
            {
              py::gil_scoped_release release;
              s = self.stats();
            }
            const auto total = s.total();
            py::dict out;
            out["member"] = s.member;
            out["rounds_done"] = total.rounds_done;
            out["rounds_per_dim"] = [&] {
              py::list dims;
              for (const auto& d : s.dims) dims.append(d.rounds.rounds_done);
              return dims;
            }();
            out["bytes_sent"] = total.bytes_sent;
            out["bytes_received"] = total.bytes_received;
            out["quorum_shortfalls"] = total.quorum_shortfalls;
            return out;
          },
          "The node's counters: rounds done (in all and per dimension), bytes sent and received.")
      .def_property_readonly("warm_started", &HostedNode::warm_started,
                             "whether the join copied a member's model (a warm start)")
      .def("data_shard", &HostedNode::data_shard, py::call_guard<py::gil_scoped_release>(),
           "(index, count): this node's place among the cluster's members, by id, and their number.")
      .def("grid_json", &HostedNode::grid_json, py::call_guard<py::gil_scoped_release>(),
           "The live grid as `gridnode status --json` prints it.")
      .def("close", &HostedNode::close, py::call_guard<py::gil_scoped_release>(), "Leaves the cluster cleanly.")
      .def_property_readonly("id", &HostedNode::id)
      .def_property_readonly("address", &HostedNode::address)
      .def_property_readonly("joined", &HostedNode::joined)
      .def_property_readonly("name", [](const HostedNode& self) { return self.plan().name; })
      .def_property_readonly("metrics_port", &HostedNode::metrics_port);
}
