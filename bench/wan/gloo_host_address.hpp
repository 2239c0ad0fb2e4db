#pragma once
// Compiled in front of bench/peers/gloo_allreduce.cpp for bench/wan/run (bench/wan/CMakeLists.txt, -include): that
// program listens on 127.0.0.1, which a rank in another network namespace cannot reach. Here its call
// CreateDevice(attr) finds an overload taking a non-const attr (a better match for the variable it passes than
// Gloo's const one), which sets the address to listen on from GLOO_HOST_ADDRESS, when set, and hands on to Gloo.
// Everything else of the program, its timing and checks included, is the one bench/allreduce_compare measures.

#include <gloo/transport/tcp/device.h>

#include <cstdlib>
#include <memory>

namespace gloo::transport::tcp {

inline std::shared_ptr<::gloo::transport::Device> CreateDevice(attr& listen) {
  if (const char* address = std::getenv("GLOO_HOST_ADDRESS"); address != nullptr && *address != '\0')
    listen.hostname = address;
  return CreateDevice(static_cast<const attr&>(listen));
}

}  // namespace gloo::transport::tcp
