#include "tests/learner/gradient_check.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "learner/init.hpp"
#include "learner/layer_stack.hpp"
#include "tests/base/require_ok.hpp"

namespace gridtrain::learner::testing {

namespace {

using config::LayerType;

struct Compare {
  double atol, rtol;
  GradientReport report;

  double error(double analytic, double numeric) const {
    return std::abs(analytic - numeric) / (atol + rtol * std::max(std::abs(analytic), std::abs(numeric)));
  }

  // With the one-sided differences `left` = (f(0) - f(-eps)) / eps and `right` = (f(eps) - f(0)) / eps: an entry
  // whose two sides differ by more than half the larger is at a kink, and passes if the analytic gradient is
  // either side.
  void add(double analytic, double numeric, double left, double right, const std::string& where) {
    const bool kink = std::abs(left - right) > 0.5 * std::max(std::abs(left), std::abs(right));
    if (error(analytic, numeric) > 1 && kink && std::min(error(analytic, left), error(analytic, right)) <= 1) {
      ++report.checked;
      if (report.kinks++ == 0)
        report.first_kink = where + ": analytic " + std::to_string(analytic) + ", left " + std::to_string(left) +
                            ", right " + std::to_string(right);
      return;
    }
    add(analytic, numeric, where);
  }

  void add(double analytic, double numeric, const std::string& where) {
    const double err = error(analytic, numeric);
    ++report.checked;
    if (err > report.worst || report.where.empty()) {
      report.worst = std::max(err, report.worst);
      report.where = where + ": analytic " + std::to_string(analytic) + ", numeric " + std::to_string(numeric);
    }
  }
};

std::vector<float> draw_x(std::mt19937_64& rng, std::size_t n, const std::string& how) {
  if (how == "away_from_zero") {
    std::uniform_real_distribution<double> mag(0.1, 1.0);
    std::bernoulli_distribution sign(0.5);
    std::vector<float> out(n);
    for (float& v : out) v = static_cast<float>(sign(rng) ? mag(rng) : -mag(rng));
    return out;
  }
  if (how == "distinct") {
    // A shuffled ladder: no two values within 0.05, so a step of eps < 0.025 never changes a window's max.
    std::vector<float> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(0.05 * static_cast<double>(i) - 0.025 * n);
    std::shuffle(out.begin(), out.end(), rng);
    return out;
  }
  return normal(rng, n);
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// A host vector mirrored in backend memory.
struct Mirror {
  Backend& backend;
  std::vector<float> host;
  Buffer dev;
  Mirror(Backend& b, std::vector<float> h) : backend(b), host(std::move(h)), dev(b.allocate(host.size())) { push(); }
  void push() { backend.upload(host, dev.data()); }
  std::vector<float>& pull() {
    backend.download(dev.data(), host);
    return host;
  }
};

}  // namespace

void require_close(const GradientReport& r) {
  INFO("worst at " << r.where << " (" << r.checked << " entries checked)");
  INFO(r.kinks << " at a kink, the first " << r.first_kink);
  CHECK(r.checked > 0);
  CHECK(r.worst <= 1.0);
  CHECK(r.kinks * 50 <= r.checked);
}

std::vector<float> normal(std::mt19937_64& rng, std::size_t n, double std) {
  std::normal_distribution<double> d(0.0, std);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(d(rng));
  return out;
}

LayerShape layer_shape(const std::vector<int>& input, const config::LayerSpec& layer) {
  config::ModelConfig mc;
  mc.input = input;
  mc.layers = {layer,
               {.type = LayerType::flatten},
               {.type = LayerType::dense, .units = 3},
               {.type = LayerType::softmax_cross_entropy}};
  auto model = Model::build(mc);
  REQUIRE_OK(model);
  return model.value().layers()[0];
}

GradientReport check_layer(Backend& backend, const LayerShape& shape, int batch, std::uint64_t seed,
                           const std::string& x_values, double eps, double atol, double rtol) {
  std::mt19937_64 rng(seed);
  const std::size_t in = shape.input_floats() * batch, out = shape.output_floats() * batch;
  const bool has_params = shape.tensor_count > 0;
  std::size_t weight_floats = 0, bias_floats = 0;
  if (shape.spec.type == LayerType::dense) {
    weight_floats = shape.input_floats() * shape.spec.units;
    bias_floats = shape.spec.units;
  } else if (shape.spec.type == LayerType::conv2d) {
    weight_floats = std::size_t(shape.spec.filters) * shape.channels() * shape.spec.kernel * shape.spec.kernel;
    bias_floats = shape.spec.filters;
  }
  Mirror x(backend, draw_x(rng, in, x_values));
  Mirror w(backend, normal(rng, std::max<std::size_t>(weight_floats, 1), 0.5));
  Mirror b(backend, normal(rng, std::max<std::size_t>(bias_floats, 1), 0.5));
  Mirror y(backend, std::vector<float>(out));
  const std::vector<float> r = normal(rng, out);
  Mirror dy(backend, r);
  Mirror dx(backend, std::vector<float>(in, 7.0f));  // garbage: backward must overwrite it
  Mirror dw(backend, std::vector<float>(w.host.size(), 7.0f));
  Mirror db(backend, std::vector<float>(b.host.size(), 7.0f));

  auto layer = backend.make_layer(shape, batch);
  const LayerParams params = has_params ? LayerParams{w.dev.data(), b.dev.data()} : LayerParams{};
  auto f = [&] {
    layer->forward(batch, x.dev.data(), y.dev.data(), params);
    return dot(y.pull(), r);
  };
  f();
  layer->backward(batch, x.dev.data(), y.dev.data(), dy.dev.data(), dx.dev.data(), params,
                  has_params ? LayerGrads{dw.dev.data(), db.dev.data()} : LayerGrads{});
  const std::vector<float> gx = dx.pull(), gw = dw.pull(), gb = db.pull();

  Compare cmp{atol, rtol, {}};
  auto probe = [&](Mirror& m, std::size_t i, double analytic, const std::string& name) {
    const float saved = m.host[i];
    m.host[i] = static_cast<float>(saved + eps);
    m.push();
    const double plus = f();
    m.host[i] = static_cast<float>(saved - eps);
    m.push();
    const double minus = f();
    m.host[i] = saved;
    m.push();
    cmp.add(analytic, (plus - minus) / (2 * eps), name + "[" + std::to_string(i) + "]");
  };
  for (std::size_t i = 0; i < in; ++i) probe(x, i, gx[i], "dx");
  for (std::size_t i = 0; i < weight_floats; ++i) probe(w, i, gw[i], "dW");
  for (std::size_t i = 0; i < bias_floats; ++i) probe(b, i, gb[i], "db");
  return cmp.report;
}

GradientReport check_loss(Backend& backend, int classes, int batch, std::uint64_t seed, double eps, double atol,
                          double rtol) {
  std::mt19937_64 rng(seed);
  Mirror z(backend, normal(rng, std::size_t(classes) * batch, 2.0));
  std::vector<std::int32_t> labels(batch);
  for (auto& l : labels) l = static_cast<std::int32_t>(rng() % classes);
  Mirror dz(backend, std::vector<float>(z.host.size(), 7.0f));
  auto loss = backend.make_loss(classes, batch);
  loss->forward(batch, z.dev.data(), labels.data());
  loss->backward(batch, labels.data(), dz.dev.data());
  const std::vector<float> g = dz.pull();
  Compare cmp{atol, rtol, {}};
  for (std::size_t i = 0; i < z.host.size(); ++i) {
    const float saved = z.host[i];
    z.host[i] = static_cast<float>(saved + eps);
    z.push();
    const double plus = loss->forward(batch, z.dev.data(), labels.data()).loss;
    z.host[i] = static_cast<float>(saved - eps);
    z.push();
    const double minus = loss->forward(batch, z.dev.data(), labels.data()).loss;
    z.host[i] = saved;
    z.push();
    cmp.add(g[i], (plus - minus) / (2 * eps), "dlogits[" + std::to_string(i) + "]");
  }
  return cmp.report;
}

GradientReport check_stack(Backend& backend, const Model& model, int batch, std::uint64_t seed, std::size_t stride,
                           double eps, double atol, double rtol) {
  std::mt19937_64 rng(seed);
  LayerStack stack(model, backend, batch);
  const std::vector<float> inputs = normal(rng, model.input_floats() * batch);
  std::vector<std::int32_t> labels(batch);
  for (auto& l : labels) l = static_cast<std::int32_t>(rng() % model.classes());
  std::vector<float> params = initial_parameters(model, seed);
  // Biases drawn too: zero biases would leave every relu's kink where the inputs' symmetry puts it.
  for (const auto& layer : model.layers())
    if (layer.tensor_count)
      for (std::size_t i = model.tensor_offset(layer.first_tensor + 1); i < model.tensor_offset(layer.first_tensor + 2);
           ++i)
        params[i] = static_cast<float>(std::normal_distribution<double>(0.0, 0.1)(rng));
  backend.upload(params, stack.params());
  const double centre = stack.forward(batch, inputs, labels).loss;  // f(0), for the one-sided differences
  stack.backward();
  std::vector<float> grads(params.size());
  backend.download(stack.grads(), grads);

  Compare cmp{atol, rtol, {}};
  for (std::size_t i = 0; i < params.size(); i += stride) {
    const float saved = params[i];
    params[i] = static_cast<float>(saved + eps);
    backend.upload(params, stack.params());
    const double plus = stack.forward(batch, inputs, labels).loss;
    params[i] = static_cast<float>(saved - eps);
    backend.upload(params, stack.params());
    const double minus = stack.forward(batch, inputs, labels).loss;
    params[i] = saved;
    std::size_t t = 0;
    while (model.tensor_offset(t + 1) <= i) ++t;
    cmp.add(grads[i], (plus - minus) / (2 * eps), (centre - minus) / eps, (plus - centre) / eps,
            model.tensors()[t].name + "[" + std::to_string(i - model.tensor_offset(t)) + "]");
  }
  backend.upload(params, stack.params());
  return cmp.report;
}

}  // namespace gridtrain::learner::testing
