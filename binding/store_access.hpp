#pragma once
// How a line's rounds reach the model: the data plane's ModelAccess over a node's ParameterStore. Each landed chunk
// goes data plane -> Round -> here -> ParameterStore -> allreduce's update of that chunk. Nothing of it is CAF: it
// lives apart from the actors, which only hand it to the data plane (actors/dimension_node.cpp, endpoint_setup).

#include <memory>

#include "dataplane/line_runner.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::binding {

// The store's floats as the data plane reads and updates them. With an immediate store (gridnode's learner) the
// rounds update the model in place, fold chunks over it and may send straight from its memory; with a deferred one
// (the PyTorch front end) each update waits in the store's pending buffer for the owner to apply, so there is no
// fold and no send from the model. The outer step (allreduce.outer nesterov) works with either.
dataplane::ModelAccess store_access(std::shared_ptr<learner::ParameterStore> store);

}  // namespace gridtrain::binding
